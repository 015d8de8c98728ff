"""What a driver tells the agent about a node's NPUs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from contract.chip_names import ASCEND910, KINDS, ChipKind
from contract.vnpu import CORE_SPECS, VirtualName

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# A Kubernetes label value (non-empty here): what a chip name must be to become a node label
# (Ascend/mind-cluster component/ascend-device-plugin pkg/common/constants.go LabelValueRegex).
LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


class DriverError(RuntimeError):
    """The driver could not report chips (bad state file, npu-smi failure, DCMI error)."""


class Network(Enum):
    UP = "up"
    DOWN = "down"


@dataclass(frozen=True, slots=True)
class Chip:
    """One NPU chip. ``id`` is the physical id: ``/dev/davinci<id>``, ``Ascend910-<id>``."""

    id: int
    logic_id: int
    healthy: bool = True
    network: Network = Network.UP
    fault_codes: tuple[str, ...] = ()
    ip: str = ""
    model: str = ""
    card: tuple[int, int] | None = None  # npu-smi's (NPU ID, chip index), when known
    # A3/950 SuperPoD: the chip's ID within the SuperPoD (SDID, DCMI dcmi_get_spod_info), which
    # the rank table and baseDeviceInfos carry; None when the driver cannot tell.
    super_device_id: int | None = None

    @property
    def health(self) -> str:
        return HEALTHY if self.healthy else UNHEALTHY


@dataclass(frozen=True, slots=True)
class VirtualDevice:
    """A vNPU the driver reports: ``vdev`` on physical chip ``phy``, cut by ``template``."""

    vdev: int
    phy: int
    template: str
    vgroup: int = 0

    @property
    def spec(self) -> str:
        return CORE_SPECS[self.template]

    def name(self, kind: ChipKind) -> VirtualName:
        return VirtualName(kind, self.spec, self.vdev, self.phy, self.vgroup)


@dataclass(frozen=True, slots=True)
class NodeChips:
    """A snapshot of a node's chips. ``resource`` is the device type (``Ascend910``),
    ``product`` the chip_topology product (``module910x8``) or None when no ring rule is
    known for the hardware."""

    resource: str
    product: str | None
    chips: tuple[Chip, ...]
    # The node label ``servertype`` (``<chip type>-<AI cores>``, e.g. Ascend910-32) when known.
    server_type: str | None = None
    # A3 SuperPoD servers: the SuperPoD's ID and this server's index in it, when known; Ascend
    # 950 SuperPoD servers also their rack (the DeviceInfo's RackID).
    super_pod_id: int | None = None
    server_index: int | None = None
    rack_id: int | None = None
    ai_cores: int = 0  # AI cores per chip (the dynamic vNPU budget), 0 when unknown
    vnpus: tuple[VirtualDevice, ...] = ()
    # The chip's name as the driver reports it (``910B3``, ``310P3``; an A3 says
    # ``Ascend910``): the node label ``node.kubernetes.io/npu.chip.name``, which picks a 910B
    # node's vNPU templates. None when unknown.
    chip_name: str | None = None
    # Chips per die: 2 on an A3 server (an NPU module is one package of two chips, npu-smi's
    # "NPU" with chips 0 and 1, allocated together: Ascend/mind-cluster
    # component/ascend-for-volcano/internal/ascend910/ascend910a3/base.go); 0: no dies.
    die_size: int = 0
    # The server's or card's board id (DCMI dcmi_get_board_info; npu-smi info -t board), when
    # known: an 800I A2 without HCCS or a 300I A2 resets its chips one by one (agent/hot_reset.py).
    board_id: int | None = None
    # The chips the driver counts (DCMI's card number; the fake state's expected_chips), when
    # it says: one of them absent from ``chips`` is not reported yet, e.g. still resetting.
    expected_chips: tuple[int, ...] = ()

    @property
    def missing(self) -> tuple[int, ...]:
        """The chips the driver counts but does not report (upstream waits for them at start:
        Ascend/mind-cluster component/ascend-common/devmanager/devmanager.go
        WaitDeviceOnline, card number against card list)."""
        present = {c.id for c in self.chips}
        return tuple(c for c in self.expected_chips if c not in present)

    def die_of(self, chip: int) -> int | None:
        """The die (A3 NPU module) a chip is on: physical id // 2 on an A3; None elsewhere."""
        return chip // self.die_size if self.die_size else None

    @property
    def kind(self) -> ChipKind:
        return KINDS.get(self.resource, ASCEND910)

    def device_id(self, chip: Chip) -> str:
        return f"{self.resource}-{chip.id}"

    def by_device_id(self) -> dict[str, Chip]:
        return {self.device_id(c): c for c in self.chips}
