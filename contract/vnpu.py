"""Virtual NPUs on the wire: templates, virtual device names and the ``huawei.com/npu-core``
annotation (``ascend-protocol.md`` §1.2, ``vnpu-and-inference.md`` §4–5).

A vNPU is cut out of one chip's AI cores by a template (``vir02_1c``: 2 AI cores, 1 AI CPU).
Its device type is ``<Base>-<coreSpec>`` (``Ascend310P-2c.1cpu``), its device
``<Base>-<coreSpec>-<vdevID>-<phyID>``; a dynamic vNPU's ``AscendReal`` entry adds
``_<vGroupID>``. Parsing is bounded like the chip lists': a tenant's annotation cannot cost
more than a few hundred bytes of work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contract.chip_names import (
    ASCEND310P,
    ASCEND910,
    RESOURCE_DOMAIN,
    ChipKind,
    InvalidInput,
    quoted,
)

NPU_CORE = "npu-core"
NPU_CORE_RESOURCE = RESOURCE_DOMAIN + NPU_CORE
NPU_CORE_ANNOTATION = NPU_CORE_RESOURCE  # the scheduler's choice: 1-vir02_1c or 0,1
MAX_PHY_ID = 100  # upstream refuses a larger chip id in the annotation
MAX_VDEV_ID = 0xFFFF_FFFF
DVPP_YES, DVPP_NO, DVPP_NULL = "yes", "no", "null"
# Allocate's errors when a pod's vNPU cannot be made (upstream's texts). The kubelet fails the
# pod (reason UnexpectedAdmissionError, the error in its message); the scheduler deletes it.
NO_NPU_RESOURCE = "NoNPUResource"
NPU_SEGMENT_FAILED = "NPUSegmentFailed"
ADMISSION_ERROR = "UnexpectedAdmissionError"

# Template → core spec (``pkg/common/device.go GetTemplateName2DeviceTypeMap``).
CORE_SPECS = {
    "vir16": "16c",
    "vir08": "8c",
    "vir04": "4c",
    "vir02": "2c",
    "vir01": "1c",
    "vir02_1c": "2c.1cpu",
    "vir04_3c": "4c.3cpu",
    "vir03_1c_8g": "3c.1cpu.8g",
    "vir04_4c_dvpp": "4c.4cpu.dvpp",
    "vir04_3c_ndvpp": "4c.3cpu.ndvpp",
    "vir05_1c_8g": "5c.1cpu.8g",
    "vir05_1c_16g": "5c.1cpu.16g",
    "vir06_1c_16g": "6c.1cpu.16g",
    "vir10_3c_16g": "10c.3cpu.16g",
    "vir10_3c_16g_nm": "10c.3cpu.16g.ndvpp",
    "vir10_3c_32g": "10c.3cpu.32g",
    "vir10_4c_16g_m": "10c.4cpu.16g.dvpp",
    "vir12_3c_32g": "12c.3cpu.32g",
}
TEMPLATE_OF_SPEC = {spec: name for name, spec in CORE_SPECS.items()}
_VIRTUAL_TYPE = re.compile(r"^(Ascend910-([2-6]|8|10|12|16)c|Ascend310P-(1|2|4)c)")
_MAX_ANNOTATION = 64 * 6  # 64 chips of up to 3 digits and a comma, with room


@dataclass(frozen=True, slots=True)
class Template:
    """What a template takes of a chip: AI cores, AI CPUs and the DVPP (media) engine."""

    name: str
    cores: int
    cpus: int
    dvpp: str = DVPP_NULL

    @property
    def spec(self) -> str:
        return CORE_SPECS[self.name]


# The 310P templates of dynamic vNPU (``vnpu-and-inference.md`` §5.4).
TEMPLATES_310P = {
    t.name: t
    for t in (
        Template("vir01", 1, 1),
        Template("vir02", 2, 2),
        Template("vir02_1c", 2, 1),
        Template("vir04", 4, 4),
        Template("vir04_3c", 4, 3),
        Template("vir04_3c_ndvpp", 4, 3, DVPP_NO),
        Template("vir04_4c_dvpp", 4, 4, DVPP_YES),
    )
}


# The 910B / A3 templates of dynamic vNPU by chip type: the key is the node's chip name label
# (``910B3``) or, on A3, its ``servertype`` (``Ascend910A3-20``) (Ascend/mind-cluster
# component/ascend-for-volcano plugin/factory.go ``getJobTemplate``, plugin/const.go).
_B1_B2 = (
    Template("vir03_1c_8g", 3, 1),
    Template("vir06_1c_16g", 6, 1),
    Template("vir12_3c_32g", 12, 3),
)
_B3 = (Template("vir05_1c_16g", 5, 1), Template("vir10_3c_32g", 10, 3))
_B4 = (
    Template("vir05_1c_8g", 5, 1),
    Template("vir10_3c_16g_nm", 10, 3, DVPP_NO),
    Template("vir10_4c_16g_m", 10, 4, DVPP_YES),
    Template("vir10_3c_16g", 10, 3),
)
_A3_24 = (Template("vir06_1c_16g", 6, 1), Template("vir12_3c_32g", 12, 3))
TEMPLATES_910 = {
    chip: {t.name: t for t in templates}
    for chip, templates in (
        ("910B1", _B1_B2),
        ("910B2C", _B1_B2),
        ("910B2", _B1_B2),
        ("910B3", _B3),
        ("910B4", _B4),
        ("910B4-1", _B3),
        ("Ascend910A3-20", _B3),
        ("Ascend910A3-24", _A3_24),
    )
}
A3_SERVER_PREFIX = "Ascend910A3-"  # plugin/const.go ServerTypeA3Prefix
# The node label the device plugin writes with the chip's name (``910B3``): a 910B node's
# chip type (plugin/const.go ChipTypeKey).
CHIP_NAME_LABEL = "node.kubernetes.io/npu.chip.name"
# ``ring-controller.atlas`` of an npu-core job → the chips its dynamic vNPU is cut from
# (internal/npu/factory.go: ascend-910, ascend-910b, huawei.com.npu → the 910 vNPU handler;
# ascend-310P → 310P's). No label: 310P, the only dynamic vNPU chip of the v5 plugin.
VNPU_KIND_OF_RING: dict[str | None, ChipKind] = {
    "ascend-310P": ASCEND310P,
    None: ASCEND310P,
    "ascend-910": ASCEND910,
    "ascend-910b": ASCEND910,
    "huawei.com.npu": ASCEND910,
}
VNPU_KINDS = (ASCEND310P, ASCEND910)


def vnpu_kind_of(real: str) -> ChipKind:
    """The chips an npu-core pod's ``AscendReal`` names (``Ascend910-…``): 310P unless 910."""
    return ASCEND910 if real.startswith(ASCEND910.name + "-") else ASCEND310P


def parse_server_type(text: str) -> tuple[str, int]:
    """The node label ``servertype``, ``<chip kind>-<AI cores per chip>`` (``Ascend310P-8``)."""
    kind, _, cores = text.partition("-")
    if not kind or len(text) > 40 or not cores.isascii() or not cores.isdigit() or len(cores) > 3:
        raise InvalidInput(f"servertype {quoted(text)} is not <chip kind>-<AI cores per chip>")
    return kind, int(cores)


def template_cores(name: str) -> int:
    """AI cores of a template: the number after ``vir`` (``vir04_3c_ndvpp`` → 4)."""
    head = name.split("_", 1)[0]
    digits = head[3:]
    if not head.startswith("vir") or not digits.isascii() or not digits.isdigit():
        raise InvalidInput(f"template {quoted(name)} is not vir<cores>[_…]")
    return int(digits)


def is_virtual_type(device_type: str) -> bool:
    """Whether a device type is a vNPU type (``Ascend310P-2c.1cpu``), as upstream tests it."""
    return _VIRTUAL_TYPE.match(device_type) is not None


@dataclass(frozen=True, slots=True)
class VirtualName:
    """A vNPU's device name, ``Ascend310P-2c.1cpu-100-0`` (``_<vgroup>`` in AscendReal)."""

    kind: ChipKind
    spec: str
    vdev: int
    phy: int
    vgroup: int | None = None

    @property
    def device_type(self) -> str:
        return f"{self.kind.name}-{self.spec}"

    @property
    def device_id(self) -> str:
        return f"{self.device_type}-{self.vdev}-{self.phy}"

    @property
    def real(self) -> str:
        """As ``huawei.com/AscendReal`` names it."""
        return self.device_id if self.vgroup is None else f"{self.device_id}_{self.vgroup}"


def _number(text: str, what: str, limit: int) -> int:
    if not text or len(text) > 10 or not text.isascii() or not text.isdigit():
        raise InvalidInput(f"{what} {quoted(text)} is not a decimal number")
    value = int(text)
    if value > limit:
        raise InvalidInput(f"{what} {value} is larger than {limit}")
    return value


def parse_virtual_name(text: str, kind: ChipKind | None = None) -> VirtualName:
    """``Ascend310P-2c.1cpu-100-0[_1]`` → its parts; InvalidInput names what is wrong. Its
    chips are ``kind``'s, or (None) those its name starts with."""
    kind = vnpu_kind_of(text) if kind is None else kind
    if len(text) > 80:
        raise InvalidInput(f"vNPU name {quoted(text)} is too long")
    body, _, group = text.partition("_")
    parts = body.split("-")
    if len(parts) != 4 or parts[0] != kind.name or parts[1] not in TEMPLATE_OF_SPEC:
        raise InvalidInput(
            f"vNPU name {quoted(text)} is not {kind.name}-<core spec>-<vdev id>-<phy id>"
        )
    return VirtualName(
        kind,
        parts[1],
        _number(parts[2], "vdev id", MAX_VDEV_ID),
        _number(parts[3], "phy id", MAX_PHY_ID),
        _number(group, "vgroup id", MAX_VDEV_ID) if group else None,
    )


@dataclass(frozen=True, slots=True)
class CoreChoice:
    """The scheduler's ``huawei.com/npu-core`` choice: a vNPU of ``template`` on chip
    ``chips[0]``, or whole chips (``template`` None)."""

    chips: tuple[int, ...]
    template: str | None = None

    def __str__(self) -> str:
        if self.template is not None:
            return f"{self.chips[0]}-{self.template}"
        return ",".join(str(c) for c in self.chips)

    def cores(self, cores_per_chip: int) -> int:
        """The AI cores the kubelet asks for with this choice."""
        if self.template is not None:
            return template_cores(self.template)
        return len(self.chips) * cores_per_chip


def parse_core_choice(text: str) -> CoreChoice:
    """``1-vir02_1c`` (a vNPU on chip 1) or ``0,1`` (whole chips)."""
    if not text or len(text) > _MAX_ANNOTATION:
        raise InvalidInput(f"{NPU_CORE_ANNOTATION} {quoted(text)} is empty or too long")
    if "-" in text:
        parts = text.split("-")
        if len(parts) != 2:
            raise InvalidInput(f"{NPU_CORE_ANNOTATION} {quoted(text)} is not <phy id>-<template>")
        phy = _number(parts[0], f"{NPU_CORE_ANNOTATION} phy id", MAX_PHY_ID)
        template_cores(parts[1])
        if parts[1] not in CORE_SPECS:
            raise InvalidInput(f"{NPU_CORE_ANNOTATION}: unknown template {quoted(parts[1])}")
        return CoreChoice((phy,), parts[1])
    chips = tuple(
        _number(p.strip(), f"{NPU_CORE_ANNOTATION} chip", MAX_PHY_ID) for p in text.split(",")
    )
    if len(set(chips)) != len(chips):
        raise InvalidInput(f"{NPU_CORE_ANNOTATION} {quoted(text)} names a chip twice")
    return CoreChoice(chips)
