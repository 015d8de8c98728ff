"""The cases of the differential suite: a cluster of one product's servers and one job, as plain
values that both sides read (``huawei``: objects on the API server for Huawei's plugin in the
real Volcano; ``ours``: the engine's ``NodeState`` and ``Job``), and a seeded generator.

A node is described as Huawei's device plugin describes it: its labels (``accelerator-type``
and the rest, MindCluster ``docs/.../01_preparing_for_installation.md``), its chip count at the
kubelet, and its DeviceInfo: the free chips (in the order the ConfigMap lists them, names
sorted as strings, ``contract.deviceinfo.chip_list``), the unhealthy and the network-unhealthy
ones. Chips neither free nor unhealthy are held by a bound pod asking for them (``huawei``
makes it), so Volcano's idle count agrees with the DeviceInfo.

A job is one PodGroup and its pods as Volcano's job controller creates them
(``pkg/controllers/job/job_controller_actions.go`` ``createOrUpdatePodGroup``: ``minMember``
and ``minResources``), with the labels, annotations and ``nodeSelector`` of Huawei's samples
(``tests/data/huawei_jobs``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from contract.annotations import (
    ACCELERATOR_TYPE_LABEL,
    DUO_LABEL,
    INFER_CARD_TYPE_LABEL,
    RA_BLOCK_ANNOTATION,
    RING_CONTROLLER_LABEL,
    SCHEDULE_POLICY_ANNOTATION,
    SERVER_TYPE_LABEL,
    SP_BLOCK_ANNOTATION,
    STRATEGY_310_LABEL,
    SUPER_POD_AFFINITY_LABEL,
    TOR_AFFINITY_LABEL,
    VNPU_DVPP_LABEL,
    VNPU_LEVEL_LABEL,
)
from contract.chip_names import ASCEND310, ASCEND310P, ASCEND910, NPU, ChipKind, chip_name
from contract.vnpu import (
    CHIP_NAME_LABEL,
    NPU_CORE_RESOURCE,
    TEMPLATES_310P,
    TEMPLATES_910,
    Template,
)

Obj = dict[str, Any]
_NO_STRINGS: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class Hardware:
    """One kind of server: the group the summary counts it under, our product name for its
    nodes, its chip kind and count at the kubelet, and the labels Huawei's installation gives
    it. ``super_pod``: its DeviceInfo carries a ``SuperPodID`` (Atlas A3, 850 and 950
    SuperPoDs); ``racks``: and a ``RackID`` (Atlas 950)."""

    group: str
    product: str
    kind: ChipKind
    chips: int
    labels: Mapping[str, str]
    super_pod: bool = False
    racks: bool = False
    # AI cores per chip where pods ask for AI cores (dynamic vNPU, ``huawei.com/npu-core``),
    # and what picks the chips' templates (``Ascend310P``, a 910B chip name).
    vnpu_cores: int = 0
    vnpu_chip: str = ""

    @property
    def templates(self) -> Mapping[str, Template]:
        return TEMPLATES_310P if self.vnpu_chip == "Ascend310P" else TEMPLATES_910[self.vnpu_chip]

    @property
    def resource(self) -> str:
        return NPU_CORE_RESOURCE if self.vnpu_cores else self.kind.resource


_910 = {"accelerator": "huawei-Ascend910", "host-arch": "huawei-arm"}


def _910x(accelerator_type: str) -> dict[str, str]:
    return {**_910, ACCELERATOR_TYPE_LABEL: accelerator_type}


# Atlas 350, 850 and 950 servers of ``huawei.com/npu`` chips: the device plugin labels them
# ``accelerator=huawei-npu`` (Ascend/mind-cluster component/ascend-device-plugin/pkg/server/
# manager.go setAcceleratorLabel); the 350 ones carry Huawei's product name as
# ``accelerator-type`` (``ascend-common/api/const_v2.go``), the SuperPoD ones none.
_NPU = {"accelerator": "huawei-npu", "host-arch": "huawei-arm"}


def _npu_type(accelerator_type: str) -> dict[str, str]:
    return {**_NPU, ACCELERATOR_TYPE_LABEL: accelerator_type}


_310P = {"accelerator": "huawei-Ascend310P", "host-arch": "huawei-arm"}
VNPU_GROUP = "310P vNPU"
VNPU_910B_GROUP = "910B vNPU"
_310 = {"accelerator": "huawei-Ascend310", "host-arch": "huawei-arm"}

HARDWARE: Mapping[str, Hardware] = {
    h.group: h
    for h in (
        Hardware("910 x8", "module910x8", ASCEND910, 8, {**_910, ACCELERATOR_TYPE_LABEL: "module"}),
        Hardware("910 half", "half910x4", ASCEND910, 4, {**_910, ACCELERATOR_TYPE_LABEL: "half"}),
        Hardware(
            "910 card x2", "card910x2", ASCEND910, 2, {**_910, ACCELERATOR_TYPE_LABEL: "card"}
        ),
        Hardware(
            "910 card x8", "card910x2", ASCEND910, 8, {**_910, ACCELERATOR_TYPE_LABEL: "card"}
        ),
        Hardware(
            "910B x8",
            "module910bx8",
            ASCEND910,
            8,
            {**_910, ACCELERATOR_TYPE_LABEL: "module-910b-8"},
        ),
        Hardware(
            "910B x16",
            "module910bx16",
            ASCEND910,
            16,
            {**_910, ACCELERATOR_TYPE_LABEL: "module-910b-16"},
        ),
        Hardware(
            "A3 x16",
            "module910a3x16",
            ASCEND910,
            16,
            {**_910, ACCELERATOR_TYPE_LABEL: "module-a3-16"},
        ),
        Hardware(
            "A3 x8", "module910a3x8", ASCEND910, 8, {**_910, ACCELERATOR_TYPE_LABEL: "module-a3-8"}
        ),
        Hardware(
            "A3 SuperPoD x16",
            "superpod910a3x16",
            ASCEND910,
            16,
            {**_910, ACCELERATOR_TYPE_LABEL: "module-a3-16-super-pod"},
            super_pod=True,
        ),
        Hardware(
            "A3 SuperPoD x8",
            "superpod910a3x8",
            ASCEND910,
            8,
            {**_910, ACCELERATOR_TYPE_LABEL: "module-a3-8-super-pod"},
            super_pod=True,
        ),
        # Atlas 850 (A5) 8-NPU servers: ``huawei.com/Ascend910`` chips, the base handler
        # (``common/util/type_v2.go`` Ascend800ia5x8SchedulerName).
        Hardware("850 x8", "atlas850x8", ASCEND910, 8, _910x("850-Atlas-8p-8")),
        Hardware("350 x8", "atlas350x8", NPU, 8, _npu_type("350-Atlas-8")),
        Hardware("350 x16", "atlas350x16", NPU, 16, _npu_type("350-Atlas-16")),
        Hardware("350 4p x8", "atlas350-4px8", NPU, 8, _npu_type("350-Atlas-4p-8")),
        Hardware("350 4p x16", "atlas350-4px16", NPU, 16, _npu_type("350-Atlas-4p-16")),
        Hardware("850 SuperPoD", "superpod850x8", NPU, 8, _NPU, super_pod=True),
        Hardware("950 SuperPoD", "superpod950x8", NPU, 8, _NPU, super_pod=True, racks=True),
        Hardware("310P", "ascend310p", ASCEND310P, 8, _310P),
        Hardware(
            "300I Duo",
            "chip310px2",
            ASCEND310P,
            16,  # eight cards of two, as simulation/hardware.py's ATLAS_300I_DUO
            {**_310P, INFER_CARD_TYPE_LABEL: "card-300i-duo"},
        ),
        Hardware("310", "chip310x4", ASCEND310, 8, _310),
        # 310P servers cut into vNPUs as pods ask (the device plugin's labels: ``servertype``
        # with the AI cores per chip, the chip's name: plugin/vnode.go
        # setChipPropertiesFromNPUNode reads both).
        Hardware(
            VNPU_GROUP,
            "ascend310p",
            ASCEND310P,
            4,
            {**_310P, SERVER_TYPE_LABEL: "Ascend310P-8", CHIP_NAME_LABEL: "310P3"},
            vnpu_cores=8,
            vnpu_chip="Ascend310P",
        ),
        # Atlas 800I A2 (910B3, 20 AI cores a chip) cut as pods ask: the 910 vNPU handler
        # (``internal/npu/ascend910/vnpu``), its chip type the chip name label.
        Hardware(
            VNPU_910B_GROUP,
            "module910bx8",
            ASCEND910,
            8,
            {
                **_910x("module-910b-8"),
                SERVER_TYPE_LABEL: "Ascend910B-20",
                CHIP_NAME_LABEL: "910B3",
            },
            vnpu_cores=20,
            vnpu_chip="910B3",
        ),
    )
}


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One server of a case: its chips as the DeviceInfo lists them (ids), its address, and
    its SuperPoD and rack where the hardware has them."""

    free: tuple[int, ...]
    unhealthy: tuple[int, ...] = ()
    network_unhealthy: tuple[int, ...] = ()
    address: str = ""
    super_pod: int | None = None
    rack: int | None = None
    # vNPUs made on the node's chips (chip, template), each held by a pod of its own.
    vnpus: tuple[tuple[int, str], ...] = ()

    def used(self, capacity: int) -> tuple[int, ...]:
        """Chips neither free nor unhealthy nor cut into vNPUs: a bound pod holds them."""
        gone = set(self.free) | set(self.unhealthy) | {c for c, _ in self.vnpus}
        return tuple(c for c in range(capacity) if c not in gone)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job: ``pods`` pods of ``npu`` chips each, its PodGroup's and pods' labels and
    annotations, the pods' ``nodeSelector``. Huawei's samples add pods without NPUs
    (``plain``: MindSpore's scheduler), a ``minMember`` below the pods (a Deployment's
    PodGroup: 1) and each NPU pod's own annotations (the ranks its operator writes)."""

    pods: int
    npu: int
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
    annotations: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
    selector: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
    resource: str = ASCEND910.resource
    plain: int = 0
    min_member: int | None = None
    pod_annotations: tuple[Mapping[str, str], ...] = ()
    plain_annotations: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
    plain_labels: Mapping[str, str] | None = None  # the pods' without NPUs (else ``labels``)
    affinity: Mapping[str, Any] | None = None  # the NPU pods' (a sample's podAntiAffinity)

    @property
    def members(self) -> int:
        """The PodGroup's ``minMember``."""
        return self.pods + self.plain if self.min_member is None else self.min_member


@dataclass(frozen=True, slots=True)
class Case:
    """A cluster of one hardware's servers and one job. ``exclusive``: the job's handler
    looks at every node of the session (ToR affinity, SuperPoDs), so the case runs alone."""

    name: str
    hardware: str
    nodes: tuple[NodeSpec, ...]
    job: JobSpec
    exclusive: bool = False
    note: str = ""  # what the generator meant to try
    # Labels the servers carry beyond their hardware's (a sample's selector: ``host-arch``).
    node_labels: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
    # Switch affinity's version (init-params ``nslb-version``): a 2.0 case runs in a Volcano
    # configured so (``huawei.huawei_volcano(nslb=...)``), never beside 1.0 ones.
    nslb: str = "1.0"

    @property
    def spec(self) -> Hardware:
        return HARDWARE[self.hardware]

    def node_name(self, i: int) -> str:
        return f"{self.name}-n{i}"

    def to_json(self) -> Obj:
        return {
            "name": self.name,
            "hardware": self.hardware,
            "exclusive": self.exclusive,
            "note": self.note,
            **({"node_labels": dict(self.node_labels)} if self.node_labels else {}),
            **({"nslb": self.nslb} if self.nslb != "1.0" else {}),
            "nodes": [
                {
                    "name": self.node_name(i),
                    "free": [chip_name(c, self.spec.kind) for c in n.free],
                    "unhealthy": [chip_name(c, self.spec.kind) for c in n.unhealthy],
                    "network_unhealthy": [
                        chip_name(c, self.spec.kind) for c in n.network_unhealthy
                    ],
                    **({"address": n.address} if n.address else {}),
                    **({"super_pod": n.super_pod} if n.super_pod is not None else {}),
                    **({"rack": n.rack} if n.rack is not None else {}),
                    **({"vnpus": [f"{c}-{t}" for c, t in n.vnpus]} if n.vnpus else {}),
                }
                for i, n in enumerate(self.nodes)
            ],
            "job": {
                "pods": self.job.pods,
                "npu": self.job.npu,
                "resource": self.job.resource,
                "labels": dict(self.job.labels),
                "annotations": dict(self.job.annotations),
                "selector": dict(self.job.selector),
                **({"plain": self.job.plain} if self.job.plain else {}),
                **({"min_member": self.job.min_member} if self.job.min_member else {}),
                **(
                    {"pod_annotations": [dict(a) for a in self.job.pod_annotations]}
                    if self.job.pod_annotations
                    else {}
                ),
                **(
                    {"plain_annotations": dict(self.job.plain_annotations)}
                    if self.job.plain_annotations
                    else {}
                ),
                **({"affinity": dict(self.job.affinity)} if self.job.affinity else {}),
                **(
                    {"plain_labels": dict(self.job.plain_labels)}
                    if self.job.plain_labels is not None
                    else {}
                ),
            },
        }


def case_from_json(raw: Mapping[str, Any]) -> Case:
    """A case as ``Case.to_json`` wrote it (a disagreement file's case, run again)."""
    spec = HARDWARE[raw["hardware"]]

    def ids(names: Sequence[str]) -> tuple[int, ...]:
        return tuple(int(n.removeprefix(spec.kind.prefix)) for n in names)

    nodes = tuple(
        NodeSpec(
            ids(n["free"]),
            ids(n["unhealthy"]),
            ids(n["network_unhealthy"]),
            n.get("address", ""),
            n.get("super_pod"),
            n.get("rack"),
            tuple((int(c), t) for c, _, t in (v.partition("-") for v in n.get("vnpus", []))),
        )
        for n in raw["nodes"]
    )
    job = raw["job"]
    return Case(
        raw["name"],
        raw["hardware"],
        nodes,
        JobSpec(
            job["pods"],
            job["npu"],
            dict(job["labels"]),
            dict(job["annotations"]),
            dict(job["selector"]),
            job["resource"],
            plain=int(job.get("plain", 0)),
            min_member=job.get("min_member"),
            pod_annotations=tuple(dict(a) for a in job.get("pod_annotations", [])),
            plain_annotations=dict(job.get("plain_annotations", {})),
            plain_labels=job.get("plain_labels"),
            affinity=job.get("affinity"),
        ),
        bool(raw.get("exclusive", False)),
        raw.get("note", ""),
        dict(raw.get("node_labels", {})),
        str(raw.get("nslb", "1.0")),
    )


def listed(chips: Sequence[int], kind: ChipKind) -> tuple[int, ...]:
    """Chips in the order a DeviceInfo lists them: names sorted as strings."""
    return tuple(sorted(chips, key=lambda c: chip_name(c, kind)))


# ---- generation -----------------------------------------------------------------------------


@dataclass
class _Draw:
    """One case being drawn: the random source, the hardware, a name."""

    rng: random.Random
    hardware: Hardware
    name: str

    def node(
        self,
        *,
        free_share: float | None = None,
        sick: float = 0.08,
        network: float = 0.0,
        whole: bool = False,
    ) -> NodeSpec:
        """A node with chips free, held or unhealthy at random (``whole``: all free)."""
        capacity = self.hardware.chips
        if whole:
            return NodeSpec(listed(range(capacity), self.hardware.kind))
        share = self.rng.choice((0.3, 0.5, 0.7, 0.9, 1.0)) if free_share is None else free_share
        free, unhealthy = [], []
        for chip in range(capacity):
            roll = self.rng.random()
            if roll < sick:
                unhealthy.append(chip)
            elif roll < sick + (1 - sick) * share:
                free.append(chip)
        net = [c for c in free if self.rng.random() < network]
        kind = self.hardware.kind
        return NodeSpec(listed(free, kind), tuple(unhealthy), tuple(net))

    def nodes(self, count: int, **how: Any) -> tuple[NodeSpec, ...]:
        return tuple(self.node(**how) for _ in range(count))

    def case(self, nodes: Sequence[NodeSpec], job: JobSpec, note: str, **extra: Any) -> Case:
        return Case(self.name, self.hardware.group, tuple(nodes), job, note=note, **extra)


def _routing(draw: _Draw, selector: str, policy: str | None, pods: int, npu: int) -> JobSpec:
    """A job whose handler is named by its ``accelerator-type`` selector, or by
    ``huawei.com/schedule_policy`` where MindCluster has one for the hardware."""
    if policy is not None and draw.rng.random() < 0.4:
        return JobSpec(pods, npu, annotations={SCHEDULE_POLICY_ANNOTATION: policy})
    return JobSpec(pods, npu, selector={ACCELERATOR_TYPE_LABEL: selector})


def _spread(draw: _Draw, pods: int, whole: float, network: float = 0.0) -> list[NodeSpec]:
    """Servers for a gang of ``pods``: one short of it to two more, most of them all free,
    some with network-unhealthy chips (which a gang leaves on network-aware handlers)."""
    count = draw.rng.randint(pods - 1, pods + 2)
    nodes = [draw.node(whole=draw.rng.random() < whole) for _ in range(count)]
    if network:
        kind = draw.hardware.kind
        nodes = [
            replace(n, network_unhealthy=listed(draw.rng.sample(n.free, 1), kind))
            if n.free and draw.rng.random() < network
            else n
            for n in nodes
        ]
    return nodes


def _ring_910(draw: _Draw) -> Case:
    """Atlas 800 (910): one pod of 1, 2, 4 or 8 chips (3, 5 and 16 refused) on rings of 4, or a
    gang of whole servers, without a selector (the default ``module`` handler) or with it."""
    rng = draw.rng
    selector = {} if rng.random() < 0.5 else {ACCELERATOR_TYPE_LABEL: "module"}
    # MindCluster's meshes of 4 on the same servers (``huawei.com/schedule_policy:
    # chip4-node8``, internal/npu/policy/chip4nodex), as Huawei's tidal sample asks.
    mesh = {SCHEDULE_POLICY_ANNOTATION: "chip4-node8"} if rng.random() < 0.2 else {}
    how = " (chip4-node8)" if mesh else ""
    if rng.random() < 0.3:
        pods = rng.choice((2, 2, 3, 4))
        job = JobSpec(pods, 8, annotations=mesh, selector=selector)
        return draw.case(_spread(draw, pods, 0.6), job, f"gang {pods}x8{how}")
    npu = rng.choice((1, 1, 2, 2, 4, 4, 8, 3, 5))
    nodes = draw.nodes(rng.randint(1, 5))
    job = JobSpec(1, npu, annotations=mesh, selector=selector)
    return draw.case(nodes, job, f"one pod of {npu}{how}")


def _gang_4x2_910(draw: _Draw) -> Case:
    """Atlas 800 (910): a job of two pods of 4 chips (Huawei places it; ours refused)."""
    nodes = draw.nodes(draw.rng.randint(1, 3), free_share=1.0, sick=0.0)
    return draw.case(nodes, JobSpec(2, 4), "2 pods of 4 on 910 x8")


def _base(draw: _Draw, selector: str, policy: str | None, sizes: Sequence[int]) -> Case:
    """MindCluster's base handler (card, half, 910B x8) and the 910B x16 one: one pod of any
    size (some out of range), or a gang of whole servers."""
    rng = draw.rng
    capacity = draw.hardware.chips
    if rng.random() < 0.25:
        pods = rng.choice((2, 3))
        # Mostly whole servers; some pods smaller than a server (Huawei's samples have them).
        npu = capacity if rng.random() < 0.7 else rng.choice([s for s in sizes if s < capacity])
        job = _routing(draw, selector, policy, pods, npu)
        gang = _spread(draw, pods, 0.6, network=0.3)
        return draw.case(gang, job, f"gang {pods}x{npu}")
    npu = rng.choice(sizes)
    nodes = draw.nodes(rng.randint(1, 5), network=0.1)
    return draw.case(nodes, _routing(draw, selector, policy, 1, npu), f"one pod of {npu}")


def _a3(draw: _Draw, policy: str) -> Case:
    """Atlas A3 servers (dies of two): one pod of 1 or an even count, odd counts refused, or a
    gang of whole servers, by ``huawei.com/schedule_policy``."""
    rng = draw.rng
    capacity = draw.hardware.chips
    annotations = {SCHEDULE_POLICY_ANNOTATION: policy}
    selector = {ACCELERATOR_TYPE_LABEL: draw.hardware.labels[ACCELERATOR_TYPE_LABEL]}
    if rng.random() < 0.25:
        pods = rng.choice((2, 3))
        npu = capacity if rng.random() < 0.7 else rng.choice((2, 4))
        job = JobSpec(pods, npu, annotations=annotations, selector=selector)
        return draw.case(_spread(draw, pods, 0.6), job, f"gang {pods}x{npu}")
    npu = rng.choice((1, 1, 2, 2, 4, 6, 8, capacity, 3))
    nodes = draw.nodes(rng.randint(1, 4))
    job = JobSpec(1, npu, annotations=annotations, selector=selector)
    return draw.case(nodes, job, f"one pod of {npu}")


def _super_pod(draw: _Draw, policy: str | None = None) -> Case:
    """An Atlas A3 SuperPoD (by its ``accelerator-type`` selector) or an Atlas 850 one (by
    ``huawei.com/schedule_policy: chip8-node8-sp``, ``policy/chip8node8sp``): ``sp-block`` jobs
    of whole servers over two physical SuperPoDs, or one pod asking ``sp-block`` chips."""
    rng = draw.rng
    capacity = draw.hardware.chips
    if policy is None:
        selector = {ACCELERATOR_TYPE_LABEL: draw.hardware.labels[ACCELERATOR_TYPE_LABEL]}
        routing: dict[str, str] = {}
    else:
        selector, routing = {}, {SCHEDULE_POLICY_ANNOTATION: policy}
    resource = draw.hardware.resource
    count = rng.randint(2, 10)
    nodes = [
        replace(draw.node(whole=rng.random() < 0.7, sick=0.0), super_pod=i % 2)
        for i in range(count)
    ]
    if rng.random() < 0.3:
        npu = rng.choice((2, 4, capacity))
        # The 850's ``sp-block`` defaults to the job's NPUs (``plugin/job.go`` setSpBlock).
        stated = {} if routing and rng.random() < 0.3 else {SP_BLOCK_ANNOTATION: str(npu)}
        job = JobSpec(
            1,
            npu,
            annotations={**routing, **stated},
            selector=selector,
            resource=resource,
        )
        return draw.case(nodes, job, f"one pod of {npu}, sp-block {npu}", exclusive=True)
    pods = rng.choice((1, 2, 2, 4))
    block = capacity * rng.choice((1, 2)) if pods % 2 == 0 else capacity
    soft = rng.random() < 0.2
    labels = {SUPER_POD_AFFINITY_LABEL: "soft"} if soft else {}
    job = JobSpec(
        pods,
        capacity,
        labels=labels,
        annotations={**routing, SP_BLOCK_ANNOTATION: str(block)},
        selector=selector,
        resource=resource,
    )
    note = f"gang {pods}x{capacity}, sp-block {block}" + (", soft" if soft else "")
    return draw.case(nodes, job, note, exclusive=True)


def _racks_950(draw: _Draw) -> Case:
    """An Atlas 950 SuperPoD (``chip8-node8-ra64-sp``, ``policy/chip8node8ra64sp``): servers
    in racks of up to 8 in one or two SuperPoDs (each DeviceInfo's ``SuperPodID`` and
    ``RackID``); a gang of whole servers by ``sp-block`` and ``ra-block`` (ra-blocks of 1, 2, 4
    or 8 servers, sp-blocks of whole ra-blocks), or one pod asking ``sp-block`` chips."""
    rng = draw.rng
    nodes = [
        replace(draw.node(whole=rng.random() < 0.8, sick=0.0), super_pod=sp, rack=rack)
        for sp in range(rng.choice((1, 1, 2)))
        for rack in range(rng.randint(1, 3))
        for _ in range(rng.randint(1, 8))
    ]
    annotations = {SCHEDULE_POLICY_ANNOTATION: "chip8-node8-ra64-sp"}
    # Without ``sp-block`` a job is one block of all its NPUs (``plugin/job.go`` setSpBlock).
    stated = rng.random() < 0.7
    if rng.random() < 0.25:
        npu = rng.choice((1, 2, 4, 8))
        if stated:
            annotations[SP_BLOCK_ANNOTATION] = str(npu)
        job = JobSpec(1, npu, annotations=annotations, resource=NPU.resource)
        return draw.case(nodes, job, f"one pod of {npu}, sp-block {npu}", exclusive=True)
    ra = rng.choice((1, 1, 2, 4, 8))
    pods = ra * rng.choice((1, 2, 3))
    block = rng.choice([b for b in range(ra, pods + 1, ra) if pods % b == 0])
    if stated or block != pods:
        annotations[SP_BLOCK_ANNOTATION] = str(8 * block)
    if ra > 1 or rng.random() < 0.5:
        annotations[RA_BLOCK_ANNOTATION] = str(8 * ra)
    job = JobSpec(pods, 8, annotations=annotations, resource=NPU.resource)
    return draw.case(
        nodes, job, f"gang {pods}x8, sp-block {8 * block}, ra-block {8 * ra}", exclusive=True
    )


def _npu_base(draw: _Draw, policy: str, sizes: Sequence[int]) -> Case:
    """Atlas 350 servers (``huawei.com/npu``, routed by ``huawei.com/schedule_policy`` only:
    ``chip1-node8/16`` the base handler, ``chip4-node8/16`` meshes of 4,
    ``policy/chip4nodex``): one pod of any size (some out of range), or a gang, with or
    without an ``accelerator-type`` selector."""
    rng = draw.rng
    capacity = draw.hardware.chips
    annotations = {SCHEDULE_POLICY_ANNOTATION: policy}
    selector = (
        {ACCELERATOR_TYPE_LABEL: draw.hardware.labels[ACCELERATOR_TYPE_LABEL]}
        if rng.random() < 0.5
        else {}
    )
    if rng.random() < 0.25:
        pods = rng.choice((2, 3))
        npu = capacity if rng.random() < 0.7 else rng.choice([s for s in sizes if s < capacity])
        job = JobSpec(pods, npu, annotations=annotations, selector=selector, resource=NPU.resource)
        return draw.case(_spread(draw, pods, 0.6, network=0.3), job, f"gang {pods}x{npu}")
    npu = rng.choice(sizes)
    nodes = draw.nodes(rng.randint(1, 5), network=0.1)
    job = JobSpec(1, npu, annotations=annotations, selector=selector, resource=NPU.resource)
    return draw.case(nodes, job, f"one pod of {npu}")


def _tor(draw: _Draw, nslb: str = "1.0") -> Case:
    """910B x8 servers under ToRs of ``basic-tor-node-cm`` (``TOR_LAYOUT``), a gang of whole
    servers with ``tor-affinity`` (normal or large model), under switch affinity ``nslb``."""
    rng = draw.rng
    count = rng.randint(3, 8)
    slots = rng.sample(range(len(TOR_LAYOUT.addresses)), count)
    nodes = [
        replace(draw.node(whole=rng.random() < 0.8, sick=0.0), address=TOR_LAYOUT.addresses[s])
        for s in sorted(slots)
    ]
    pods = rng.randint(2, min(count + 1, 6))
    schema = rng.choice(("normal-schema", "large-model-schema"))
    job = JobSpec(
        pods,
        8,
        labels={TOR_AFFINITY_LABEL: schema},
        selector={ACCELERATOR_TYPE_LABEL: "module-910b-8"},
    )
    return draw.case(nodes, job, f"gang {pods}x8, {schema}", exclusive=True, nslb=nslb)


def _inference_310p(draw: _Draw) -> Case:
    """Atlas 300I Pro (310P, the base handler of 64): one pod of 1..8."""
    npu = draw.rng.choice((1, 1, 2, 3, 4, 8))
    nodes = draw.nodes(draw.rng.randint(1, 4))
    return draw.case(nodes, JobSpec(1, npu, resource=ASCEND310P.resource), f"one pod of {npu}")


def _inference_duo(draw: _Draw) -> Case:
    """Atlas 300I Duo (cards of two): ``duo: "true"``, ``npu-310-strategy`` card or chip."""
    rng = draw.rng
    strategy = rng.choice(("card", "chip"))
    npu = rng.choice((1, 1, 2, 3, 4, 8))
    labels = {DUO_LABEL: "true", STRATEGY_310_LABEL: strategy}
    if strategy == "chip" and rng.random() < 0.3:  # whole cards (chip310px2, distributed)
        labels["distributed"] = "true"
        strategy += ", distributed"
    nodes = draw.nodes(rng.randint(1, 4))
    job = JobSpec(1, npu, labels=labels, resource=ASCEND310P.resource)
    return draw.case(nodes, job, f"one pod of {npu}, {strategy}")


def _inference_310(draw: _Draw) -> Case:
    """Atlas 300I (310, cards of four): ``npu-310-strategy`` card or chip."""
    rng = draw.rng
    strategy = rng.choice(("card", "chip"))
    npu = rng.choice((1, 1, 2, 3, 4, 5))
    nodes = draw.nodes(rng.randint(1, 4))
    job = JobSpec(1, npu, labels={STRATEGY_310_LABEL: strategy}, resource=ASCEND310.resource)
    return draw.case(nodes, job, f"one pod of {npu}, {strategy}")


@dataclass(frozen=True)
class TorLayout:
    """The one ``basic-tor-node-cm`` of a run (Huawei's plugin reads it once a minute:
    ascend-for-volcano ``common/k8s/configmap_cache.go`` GetTorNodeWithOneMinuteDelay): ToRs
    of servers, each server an address a case's node may take."""

    tors: int = 4
    per_tor: int = 4

    @property
    def addresses(self) -> tuple[str, ...]:
        return tuple(f"10.90.{t}.{s + 1}" for t in range(self.tors) for s in range(self.per_tor))

    def tor_info(self) -> str:
        """The ConfigMap's ``tor_info`` (MindCluster ``internal/nslb``'s format)."""
        return json.dumps(
            {
                "version": "1.0",
                "tor_count": self.per_tor,
                "server_list": [
                    {
                        "tor_id": t,
                        "tor_ip": f"10.91.0.{t + 1}",
                        "server": [
                            {"server_ip": f"10.90.{t}.{s + 1}", "npu_count": 8, "slice_id": s}
                            for s in range(self.per_tor)
                        ],
                    }
                    for t in range(self.tors)
                ],
            }
        )


TOR_LAYOUT = TorLayout()

# What a chip's vNPUs may be (templates that fit its 8 AI cores and 7 AI CPUs together, the
# media engine given once): the generator cuts a chip in one of these ways.
CUTS = (
    ("vir01",),
    ("vir02_1c",),
    ("vir04_3c",),
    ("vir04",),
    ("vir04_4c_dvpp",),
    ("vir04_3c_ndvpp",),
    ("vir02_1c", "vir02_1c"),
    ("vir04_3c", "vir02_1c"),
    ("vir04", "vir01"),
    ("vir02", "vir02", "vir02_1c"),
    ("vir04_4c_dvpp", "vir02_1c"),
    ("vir01", "vir01", "vir01", "vir01"),
)


# A 910B3 chip's cuts (20 AI cores, 6 AI CPUs).
CUTS_910B3 = (
    ("vir05_1c_16g",),
    ("vir10_3c_32g",),
    ("vir05_1c_16g", "vir05_1c_16g"),
    ("vir10_3c_32g", "vir05_1c_16g"),
    ("vir10_3c_32g", "vir10_3c_32g"),
    ("vir05_1c_16g", "vir05_1c_16g", "vir05_1c_16g", "vir05_1c_16g"),
)


def _vnpu_node(draw: _Draw, cuts: Sequence[tuple[str, ...]] = CUTS) -> NodeSpec:
    """A server whose chips are each free, unhealthy, held whole or cut into vNPUs."""
    rng = draw.rng
    free: list[int] = []
    sick: list[int] = []
    cut: list[tuple[int, str]] = []
    for chip in range(draw.hardware.chips):
        roll = rng.random()
        if roll < 0.06:
            sick.append(chip)
        elif roll < 0.5:
            free.append(chip)
        elif roll >= 0.62:
            cut += [(chip, t) for t in rng.choice(cuts)]
    return NodeSpec(listed(free, draw.hardware.kind), tuple(sick), vnpus=tuple(cut))


def _vnpu(draw: _Draw) -> Case:
    """Dynamic vNPU on 310P servers: one pod of 1, 2 or 4 AI cores (a template of the CPU
    level and media engine its labels ask) or of whole chips (8, 16), some sizes and labels
    upstream refuses."""
    rng = draw.rng
    nodes = tuple(_vnpu_node(draw) for _ in range(rng.randint(1, 3)))
    cores = rng.choice((1, 2, 2, 4, 4, 4, 8, 8, 16, 3, 10))
    labels = {RING_CONTROLLER_LABEL: "ascend-310P"}
    if cores in (2, 4) and rng.random() < 0.5:
        labels[VNPU_LEVEL_LABEL] = "high"
    if cores == 4 and rng.random() < 0.6:
        labels[VNPU_DVPP_LABEL] = rng.choice(("yes", "no", "null"))
    if cores in (1, 2) and rng.random() < 0.1:
        labels[VNPU_DVPP_LABEL] = "yes"  # refused on 1 or 2 AI cores
    job = JobSpec(1, cores, labels=labels, resource=NPU_CORE_RESOURCE)
    how = ",".join(
        f"{k.split('-')[-1]}={v}" for k, v in labels.items() if k != RING_CONTROLLER_LABEL
    )
    return draw.case(nodes, job, f"one pod of {cores} AI cores {how}".rstrip())


def _vnpu_910b(draw: _Draw) -> Case:
    """Dynamic vNPU on 910B3 servers (``ring-controller.atlas: ascend-910b``): one pod of 5 or
    10 AI cores or of whole chips (20, 40), some sizes upstream refuses, a few with a CPU level
    or media engine label it refuses there."""
    rng = draw.rng
    nodes = tuple(_vnpu_node(draw, CUTS_910B3) for _ in range(rng.randint(1, 3)))
    cores = rng.choice((5, 5, 10, 10, 20, 20, 40, 6, 15))
    labels = {RING_CONTROLLER_LABEL: "ascend-910b"}
    if rng.random() < 0.1:
        labels[rng.choice((VNPU_LEVEL_LABEL, VNPU_DVPP_LABEL))] = rng.choice(("high", "yes"))
    job = JobSpec(1, cores, labels=labels, resource=NPU_CORE_RESOURCE)
    return draw.case(nodes, job, f"one pod of {cores} AI cores")


NSLB2_GROUP = "910B x8 ToR NSLB 2.0"
# Generators by hardware group, and how often each is drawn.
GENERATORS: Mapping[str, tuple[Callable[[_Draw], Case], int]] = {
    "910 x8": (_ring_910, 6),
    "910 x8 2x4": (_gang_4x2_910, 1),
    "910 half": (lambda d: _base(d, "half", "chip4-node4", (1, 2, 4, 3, 5)), 2),
    "910 card x2": (lambda d: _base(d, "card", "chip1-node2", (1, 2, 3)), 2),
    "910 card x8": (lambda d: _base(d, "card", "chip1-node2", (1, 2, 4, 8, 9)), 2),
    "910B x8": (lambda d: _base(d, "module-910b-8", "chip8-node8", (1, 2, 3, 4, 8, 9)), 4),
    "910B x16": (
        lambda d: _base(d, "module-910b-16", "chip8-node16", (1, 2, 4, 8, 10, 16, 17)),
        3,
    ),
    "A3 x16": (lambda d: _a3(d, "chip2-node16"), 4),
    "A3 x8": (lambda d: _a3(d, "chip2-node8"), 2),
    "A3 SuperPoD x16": (_super_pod, 2),
    "A3 SuperPoD x8": (_super_pod, 1),
    "850 x8": (lambda d: _base(d, "850-Atlas-8p-8", None, (1, 2, 3, 4, 8, 9)), 2),
    "350 x8": (lambda d: _npu_base(d, "chip1-node8", (1, 2, 3, 4, 8, 9)), 2),
    "350 x16": (lambda d: _npu_base(d, "chip1-node16", (1, 2, 4, 8, 10, 16, 17)), 2),
    "350 4p x8": (lambda d: _npu_base(d, "chip4-node8", (1, 2, 3, 4, 5, 8, 9)), 2),
    "350 4p x16": (lambda d: _npu_base(d, "chip4-node16", (1, 2, 3, 4, 6, 8, 12, 16)), 2),
    "850 SuperPoD": (lambda d: _super_pod(d, "chip8-node8-sp"), 2),
    "950 SuperPoD": (_racks_950, 3),
    "910B x8 ToR": (_tor, 2),
    NSLB2_GROUP: (lambda d: _tor(d, "2.0"), 2),
    "310P": (_inference_310p, 2),
    "300I Duo": (_inference_duo, 2),
    "310": (_inference_310, 2),
    VNPU_GROUP: (_vnpu, 4),
    VNPU_910B_GROUP: (_vnpu_910b, 4),
}
_HARDWARE_OF = {"910 x8 2x4": "910 x8", "910B x8 ToR": "910B x8", NSLB2_GROUP: "910B x8"}
# Each needs a Volcano of its own: switch affinity 2.0, dynamic vNPU (presetVirtualDevice off).
# (The plugin takes one vNPU template set a session, the first vNPU node's: each vNPU chip a
# Volcano of its own.)
OWN_VOLCANO = (NSLB2_GROUP, VNPU_GROUP, VNPU_910B_GROUP)
_DEFAULT_GROUPS = [g for g in GENERATORS if g not in OWN_VOLCANO]


def generate(seed: int, count: int, groups: Sequence[str] | None = None) -> list[Case]:
    """``count`` cases drawn from ``seed`` (the same seed gives the same cases), each from a
    generator chosen by weight (``groups``: only these; by default all but switch affinity
    2.0's and dynamic vNPU's, which need a Volcano of their own: ``OWN_VOLCANO``)."""
    rng = random.Random(seed)
    names = [g for g in GENERATORS if g in groups] if groups else _DEFAULT_GROUPS
    weights = [GENERATORS[g][1] for g in names]
    cases = []
    for i in range(count):
        group = rng.choices(names, weights)[0]
        hardware = HARDWARE[_HARDWARE_OF.get(group, group)]
        draw = _Draw(random.Random(rng.getrandbits(64)), hardware, f"s{seed}-c{i}")
        cases.append(GENERATORS[group][0](draw))
    return cases
