"""Dynamic-vNPU nodes (``huawei.com/npu-core``) as the extender keeps them.

A node's model (``engine.vnpu.VNode``) is replayed from its DeviceInfo and the
``huawei.com/npu-core`` annotations of its pods (``vnode_of``). Between the scheduler's
choice and the view showing it on the pod, the vNPU is *given*: counted on its node as a
pod whose vNPU is not created yet (the in-flight rule), so a second pod can neither take the
same AI cores nor ask the node for another template before the agent has created the first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from contract.annotations import (
    REAL_ANNOTATION,
    RING_CONTROLLER_LABEL,
    SERVER_TYPE_LABEL,
)
from contract.chip_names import ASCEND310P, ChipKind, InvalidInput, quoted
from contract.deviceinfo import DeviceInfo
from contract.objects import Obj
from contract.pods import PodView
from contract.vnpu import (
    A3_SERVER_PREFIX,
    CHIP_NAME_LABEL,
    NPU_CORE_ANNOTATION,
    NPU_CORE_RESOURCE,
    VNPU_KIND_OF_RING,
    CoreChoice,
    parse_core_choice,
    parse_server_type,
    parse_virtual_name,
)
from scheduler_core.engine import vnpu
from scheduler_core.engine.vnpu import VNode, VnpuInvalid, VPod

NOT_FOUND = "selectChipFromNodeSegment available chip not found for req {cores}"


def vpod_of(pod: PodView) -> VPod | None:
    """A live npu-core pod's share of its node, as its annotations say (None: it has been
    given nothing, or something unreadable)."""
    if pod.resource != NPU_CORE_RESOURCE or not pod.live or pod.npu_limit <= 0:
        return None
    try:
        choice = parse_core_choice(pod.annotations.get(NPU_CORE_ANNOTATION, ""))
    except InvalidInput:
        return None
    real = pod.annotations.get(REAL_ANNOTATION, "")
    vgroup = None
    if real and choice.template is not None:
        try:
            vgroup = parse_virtual_name(real).vgroup
        except InvalidInput:
            vgroup = None
    return VPod(pod.key, choice, bool(real), vgroup)


def chip_type_of(labels: Mapping[str, str], kind: ChipKind) -> str:
    """What picks a vNPU node's templates (``frame.go`` ``GetTaskResource``): ``Ascend310P``;
    on A3 the ``servertype`` (``Ascend910A3-20``); on 910B the chip name label (``910B3``)."""
    if kind is ASCEND310P:
        return vnpu.CHIP_310P
    server_type = labels.get(SERVER_TYPE_LABEL, "")
    if server_type.startswith(A3_SERVER_PREFIX):
        return server_type
    chip = labels.get(CHIP_NAME_LABEL)
    if chip is None:  # upstream's words (plugin/vnode.go setChipPropertiesFromNPUNode)
        raise VnpuInvalid(f"no node label <{CHIP_NAME_LABEL}>")
    return chip


def vnode_of(
    node: Obj,
    capacity: int,
    info: DeviceInfo,
    pods: Iterable[VPod],
    requested: int,
    *,
    allocatable: int,
) -> VNode | str:
    """``setNodeVNPUInfo``: the node's model, or why it is not a vNPU node. Its chips per
    AI core count come from the label ``servertype`` the agent writes (``Ascend310P-8``,
    ``Ascend910B-20``, ``Ascend910A3-20``)."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name", ""))
    labels = meta.get("labels") or {}
    label = labels.get(SERVER_TYPE_LABEL, "")
    try:
        kind, cores = parse_server_type(label)
    except InvalidInput as bad:
        return f"{name}: {NPU_CORE_RESOURCE} node without a readable label: {bad}"
    if not kind.startswith(info.kind.name):  # Ascend910B / Ascend910A3 are 910 chips
        return (
            f"{name}: label {SERVER_TYPE_LABEL} {quoted(label)} does not match its DeviceInfo "
            f"of {info.kind.name} chips"
        )
    try:
        return vnpu.node_model(
            name,
            chip_type=chip_type_of(labels, info.kind),
            cores_per_chip=cores,
            capacity=capacity,
            allocatable=allocatable,
            free=info.free,
            unhealthy=info.unhealthy,
            pods=sorted(pods, key=lambda p: p.key),
            requested=requested,
        )
    except VnpuInvalid as bad:
        return f"{name}: {bad}"


@dataclass(frozen=True, slots=True)
class GivenVnpu:
    """A vNPU (or whole chips) chosen for a pod whose annotation the view does not show."""

    uid: str
    node: str
    pod: VPod
    cores: int
    since: float


@dataclass(frozen=True, slots=True)
class VnpuTask:
    """What the predicate reads of a pod asking for npu-core."""

    name: str
    cores: int
    labels: Mapping[str, str]
    spec: str = ""  # its ``volcano.sh/task-spec``, which upstream's job checks name it by

    @property
    def kind(self) -> ChipKind:
        """The chips its job's ``ring-controller.atlas`` sends it to (310P without one)."""
        return VNPU_KIND_OF_RING.get(self.labels.get(RING_CONTROLLER_LABEL), ASCEND310P)


class VnpuNodes:
    def __init__(self, ttl: float) -> None:
        self._ttl = ttl
        self._nodes: dict[str, VNode] = {}
        self._given: dict[str, GivenVnpu] = {}  # pod key → what it was given
        self._on_node: dict[str, set[str]] = {}  # node → pod keys given there

    # ---- state ------------------------------------------------------------------------

    def set_node(self, name: str, node: VNode | None) -> None:
        if node is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = node

    def __contains__(self, name: str) -> bool:
        return name in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)

    def node(self, name: str) -> VNode | None:
        """The node with what was given there and is not in its view yet."""
        return self._effective(name) if name in self._nodes else None

    def _effective(self, name: str) -> VNode:
        node = self._nodes[name]
        for key in sorted(self._on_node.get(name, ())):
            given = self._given[key]
            node = vnpu.with_pod(node, given.pod, given.cores)
        return node

    def given(self, key: str) -> GivenVnpu | None:
        return self._given.get(key)

    def give(self, key: str, given: GivenVnpu) -> None:
        self.drop(key)
        self._given[key] = given
        self._on_node.setdefault(given.node, set()).add(key)

    def drop(self, key: str) -> GivenVnpu | None:
        given = self._given.pop(key, None)
        if given is not None:
            keys = self._on_node[given.node]
            keys.discard(key)
            if not keys:
                del self._on_node[given.node]
        return given

    def settle(self, key: str, pod: PodView | None) -> None:
        """Forget what was given to ``key`` once its node's view counts it, or it is gone."""
        given = self._given.get(key)
        if given is None:
            return
        node = self._nodes.get(given.node)
        shown = node is not None and key in node.pods
        if pod is None or pod.uid != given.uid or shown:
            self.drop(key)

    def expire(self, now: float) -> None:
        for key in [k for k, g in self._given.items() if now - g.since > self._ttl]:
            self.drop(key)

    def free_cores(self) -> int:
        return sum(c.cores for n in self._nodes for c in self._effective(n).chips)

    # ---- decisions --------------------------------------------------------------------

    def verdicts(self, task: VnpuTask, names: Iterable[str]) -> dict[str, vnpu.Verdict]:
        """The predicate on each vNPU node named (others are left out); VnpuInvalid when the
        task itself is refused. A 310P task is validated once (``ascend310p/vnpu``); a 910B /
        A3 task by each node's chip type (``ascend910/vnpu/job.go``, where upstream takes
        the chip type of the session's first vNPU node), a refusal final for that node."""
        is_310p = task.kind is ASCEND310P
        if is_310p:
            vnpu.validate_cores(task.spec, task.cores, task.labels)
        found: dict[str, vnpu.Verdict] = {}
        for name in names:
            node = self.node(name)
            if node is not None:
                found[name] = self._verdict(task, node, is_310p)
        return found

    @staticmethod
    def _verdict(task: VnpuTask, node: VNode, is_310p: bool) -> vnpu.Verdict:
        if node.is_310p != is_310p:
            return vnpu.Verdict(
                None,
                reason=f"{node.name} cuts {'Ascend310P' if node.is_310p else 'Ascend910'} "
                f"chips; {task.name}'s {RING_CONTROLLER_LABEL} asks for {task.kind.name} vNPUs",
                final=True,
            )
        try:
            if not is_310p:
                vnpu.validate_910(task.name, task.cores, task.labels, node.chip_type)
            want = vnpu.task_resource(
                task.cores,
                task.labels,
                node.cores_per_chip,
                node.cpus_per_chip,
                chip_type=node.chip_type,
                task=task.name,
            )
        except VnpuInvalid as invalid:
            return vnpu.Verdict(None, reason=str(invalid), final=True)
        return vnpu.check(node, task.name, want)

    def scores(self, task: VnpuTask, names: Iterable[str]) -> dict[str, float]:
        """``ScoreBestNPUNodes`` over the nodes that pass: 8 for the fewest idle AI cores
        (16 past the nodes where the task is downgraded)."""
        try:
            verdicts = self.verdicts(task, names)
        except VnpuInvalid:
            return {}
        passing = {n: v for n, v in verdicts.items() if v.resource is not None}
        idle = {n: self._effective(n).idle for n in passing}
        return vnpu.scores(idle, (n for n, v in passing.items() if v.downgraded))

    def take(self, task: VnpuTask, key: str, uid: str, name: str, now: float) -> CoreChoice | str:
        """Choose the pod's vNPU (or whole chips) on node ``name`` and count it as given;
        or why there is none."""
        try:
            verdict = self.verdicts(task, [name]).get(name)
        except VnpuInvalid as invalid:
            return str(invalid)
        node = self.node(name)
        if verdict is None or node is None:
            return f"{name} is not a dynamic vNPU ({NPU_CORE_RESOURCE}) node"
        if verdict.resource is None:
            return verdict.reason
        choice = vnpu.choose(node, verdict.resource)
        if choice is None:
            return NOT_FOUND.format(cores=verdict.resource.cores)
        pod = VPod(key, choice, created=False)
        self.give(key, GivenVnpu(uid, name, pod, task.cores, now))
        return choice
