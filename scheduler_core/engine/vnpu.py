"""Dynamic vNPU (``huawei.com/npu-core``) on 310P, 910B and A3: template resolution, the node
model, the predicate, the score and the chip choice of Volcano's ``internal/vnpu``,
``ascend310p/vnpu.go`` (``vnpu-and-inference.md`` §5.2–5.6) and MindCluster's
``ascend910/vnpu/job.go``. Pure: values in, values out.

A node's *chip type* picks its templates and rules: ``Ascend310P``, or a 910B chip name
(``910B3``) or an A3 ``servertype`` (``Ascend910A3-20``), as Ascend/mind-cluster
component/ascend-for-volcano ``internal/npu/vnpu/frame.go`` ``GetTaskResource`` keys them.

A node's chips each have AI cores and AI CPUs; a vNPU takes a template's share of one chip,
a whole-chip task takes whole chips. Where upstream draws among equal chips from a Go map,
the lowest chip id wins.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from contract.annotations import VNPU_DVPP_LABEL, VNPU_LEVEL_LABEL
from contract.vnpu import (
    DVPP_NO,
    DVPP_NULL,
    DVPP_YES,
    TEMPLATES_310P,
    TEMPLATES_910,
    CoreChoice,
    Template,
)

CHIP_310P = "Ascend310P"
# AI CPUs per chip by chip type and AI cores per chip (Ascend/mind-cluster
# component/ascend-for-volcano plugin/vnode.go ``initTemplate``).
AI_CPUS = {
    (CHIP_310P, 8): 7,
    (CHIP_310P, 10): 7,
    ("910B1", 25): 6,
    ("910B2C", 24): 6,
    ("910B2", 24): 6,
    ("910B3", 20): 6,
    ("910B4", 20): 6,
    ("910B4-1", 20): 6,
    ("Ascend910A3-20", 20): 6,
    ("Ascend910A3-24", 24): 6,
}
# The AI-core requests a 910B / A3 chip type takes: two vNPU sizes or whole chips of its
# cores (``ascend910/vnpu/job.go`` ``checkDyJobRequireMap``).
REQUESTS_910 = {
    "910B1": (6, 12, 25),
    "910B2C": (6, 12, 24),
    "910B2": (6, 12, 24),
    "910B3": (5, 10, 20),
    "910B4": (5, 10, 20),
    "910B4-1": (5, 10, 20),
    "Ascend910A3-20": (5, 10, 20),
    "Ascend910A3-24": (6, 12, 24),
}
# B4 with 10 AI cores is the one 910 request that may name a CPU level and a DVPP.
B4, B4_DVPP_CORES = "910B4", 10
NOT_ENOUGH = "dynamic vnpu task<{task}> CheckNodeNPUByDyTask node {node} resource not enough"
IN_FLIGHT = "{task} is using {node}, and not rewrite"
BIG_VGROUPS, MANY_VGROUPS = 3, 4  # a segmented 310P chip: no ≥ 4 cores at 3, no ≥ 2 at 4


class VnpuInvalid(ValueError):
    """A vNPU task or node upstream refuses; the message is upstream's."""


@dataclass(frozen=True, slots=True, order=True)
class Resource:
    cores: int
    cpus: int
    dvpp: str = DVPP_NULL


def validate_cores(spec: str, cores: int, labels: Mapping[str, str]) -> None:
    """``ascend310p/vnpu/job.go`` validDyVNPUJob: 1, 2, 4 or a multiple of 8 or of 10 AI
    cores (whole chips of 310P's 8 or 10: a size a node's chips cannot take is refused there,
    ``task_resource``), and no DVPP label on 1 or 2 cores; in the words of its
    ``TaskValidateHelper`` (``common/util/job.go`` TaskValidResult), naming the task by its
    ``volcano.sh/task-spec`` (``spec``), as upstream does."""
    if cores not in (1, 2, 4) and (cores <= 0 or (cores % 8 and cores % 10)):
        raise VnpuInvalid(
            f"expected: task req npu should be [1,2,4,8,10], actual: task<{spec}> req npu: "
            f"{cores}, "
        )
    dvpp = labels.get(VNPU_DVPP_LABEL, DVPP_NULL)
    if cores in (1, 2) and dvpp != DVPP_NULL:
        raise VnpuInvalid(
            f"expected: , actual: task<{spec}> has error: {spec} req {cores} ai-core, but "
            f"dvpp label is:{dvpp}, "
        )


def validate_910(task: str, cores: int, labels: Mapping[str, str], chip_type: str) -> None:
    """``ascend910/vnpu/job.go`` ``ValidDyVNPUJob`` for a node of ``chip_type``: the request
    size its chip type takes, then a low CPU level and no DVPP label (B4 with 10 cores
    excepted). The labels are read raw, as upstream does: ``vnpu-level: middle`` is refused."""
    small, large, whole = REQUESTS_910.get(chip_type, (0, 0, 0))
    if not whole or (cores not in (small, large) and (cores <= 0 or cores % whole)):
        raise VnpuInvalid(f"{task} req err {cores}")
    if chip_type == B4 and cores == B4_DVPP_CORES:
        return
    level = labels.get(VNPU_LEVEL_LABEL, "low")
    if level != "low":
        raise VnpuInvalid(
            f"{task} req {cores} ai-core and npu is {chip_type}, but cpu level is:{level}"
        )
    dvpp = labels.get(VNPU_DVPP_LABEL, DVPP_NULL)
    if dvpp != DVPP_NULL:
        raise VnpuInvalid(
            f"{task} req {cores} ai-core and npu is {chip_type}, but dvpp label is:{dvpp}"
        )


def validate_static(task: str, resource: str, count: int) -> None:
    """A pre-created vNPU type (``huawei.com/Ascend310P-2c``): one per pod, as upstream's
    static handler and the agent's Allocate both insist."""
    if count != 1:
        raise VnpuInvalid(f"{task} req {count} not 1 ({resource} is a pre-created vNPU type)")


def task_resource(
    cores: int,
    labels: Mapping[str, str],
    cores_per_chip: int,
    cpus_per_chip: int,
    *,
    chip_type: str = CHIP_310P,
    task: str = "",
) -> Resource:
    """The resource a task of ``cores`` AI cores asks for (``GetTaskResource``)."""
    if cores % cores_per_chip == 0:
        return Resource(cores, cores * cpus_per_chip // cores_per_chip)
    high = labels.get(VNPU_LEVEL_LABEL, "low") == "high"
    dvpp = labels.get(VNPU_DVPP_LABEL, DVPP_NULL)
    if dvpp not in (DVPP_YES, DVPP_NO, DVPP_NULL):
        raise VnpuInvalid(f"err dvpp value:{dvpp}")
    if chip_type != CHIP_310P:
        name = template_910(cores, dvpp, chip_type)
        if name is None:
            raise VnpuInvalid(f"task<{task}> get virTemplate is null")
        t = TEMPLATES_910[chip_type][name]
        return Resource(t.cores, t.cpus, t.dvpp)
    if cores == 1:
        return _of("vir01")
    if cores == 2:
        return _of("vir02" if high else "vir02_1c")
    if cores == 4:
        if dvpp == DVPP_YES:
            return _of("vir04_4c_dvpp")
        if dvpp == DVPP_NO:
            return _of("vir04_3c_ndvpp")
        return _of("vir04" if high else "vir04_3c")
    # v26.1.0 frame.go GetTaskResource (VOL-v5 made it a zero resource, which passed the
    # predicate and was bound without a chip).
    raise VnpuInvalid(f"task<{task}> get virTemplate is null")


def template_910(cores: int, dvpp: str, chip_type: str) -> str | None:
    """The template of a 910B / A3 vNPU of ``cores`` AI cores (``frame.go``
    ``getResTemplateFromTaskSettingAndChipType`` / ``…ForA3``): the chip type's template of
    that size, on B4 with 10 cores the one its DVPP label names."""
    if chip_type == B4 and cores == B4_DVPP_CORES:
        return {DVPP_YES: "vir10_4c_16g_m", DVPP_NO: "vir10_3c_16g_nm"}.get(dvpp, "vir10_3c_16g")
    sized = [t.name for t in TEMPLATES_910.get(chip_type, {}).values() if t.cores == cores]
    return sized[0] if sized else None


def templates(chip_type: str) -> Mapping[str, Template]:
    """A chip type's templates (empty for one upstream does not know)."""
    return TEMPLATES_310P if chip_type == CHIP_310P else TEMPLATES_910.get(chip_type, {})


def _of(template: str) -> Resource:
    t = TEMPLATES_310P[template]
    return Resource(t.cores, t.cpus, t.dvpp)


def template_of(resource: Resource, chip_type: str = CHIP_310P) -> str | None:
    for t in templates(chip_type).values():
        if (t.cores, t.cpus, t.dvpp) == (resource.cores, resource.cpus, resource.dvpp):
            return t.name
    return None


def downgrade(resource: Resource) -> Resource | None:
    """``vnpu-level=high`` asked for more AI CPUs than a node has: the low template."""
    if (resource.cores, resource.cpus, resource.dvpp) == (2, 2, DVPP_NULL):
        return _of("vir02_1c")
    if (resource.cores, resource.cpus) == (4, 4) and resource.dvpp != DVPP_YES:
        return _of("vir04_3c")
    return None


@dataclass(frozen=True, slots=True)
class VPod:
    """A pod's share of a vNPU node, as the node model replays it."""

    key: str
    choice: CoreChoice
    created: bool = True  # its AscendReal is written: the vNPU exists
    vgroup: int | None = None


@dataclass(frozen=True, slots=True)
class VChip:
    id: int
    cores: int  # free
    cpus: int
    dvpp: str = DVPP_YES  # what of the media engine is free: yes, null (shared), no
    segmented: bool = False
    stable: bool = True
    vgroups: frozenset[int] = frozenset()

    def free(self) -> Resource:
        return Resource(self.cores, self.cpus, self.dvpp)


@dataclass(frozen=True, slots=True)
class VNode:
    name: str
    cores_per_chip: int
    cpus_per_chip: int
    chips: tuple[VChip, ...]
    idle: int  # Volcano's Idle[npu-core]: allocatable minus what its pods request
    in_flight: frozenset[str] = frozenset()  # templates given and not yet created
    pods: frozenset[str] = frozenset()  # the pods replayed
    chip_type: str = CHIP_310P  # what picks its templates: Ascend310P, 910B3, Ascend910A3-20

    @property
    def is_310p(self) -> bool:
        return self.chip_type == CHIP_310P


def cpus_per_chip(chip_type: str, cores_per_chip: int) -> int:
    cpus = AI_CPUS.get((chip_type, cores_per_chip))
    if cpus is None:
        raise VnpuInvalid(f"no AI CPU count known for {chip_type} with {cores_per_chip} AI cores")
    return cpus


def node_model(
    name: str,
    *,
    chip_type: str,
    cores_per_chip: int,
    capacity: int,
    allocatable: int,
    free: Iterable[int],
    unhealthy: Iterable[int],
    pods: Sequence[VPod],
    requested: int,
) -> VNode:
    """``setNodeVNPUInfo``: every free chip fully free, then every pod replayed onto its
    chip (a chip only pods name joins the model; unhealthy ones are left out). The chips come
    from ``capacity``; the idle AI cores the score reads are Volcano's ``Idle``:
    ``allocatable`` less what the node's pods request (``internal/npu/vnpu/node.go``
    orderVNodesByFreeResource)."""
    per_chip_cpus = cpus_per_chip(chip_type, cores_per_chip)
    if capacity <= 0 or capacity % cores_per_chip:
        raise VnpuInvalid(f"{name}: npu-core {capacity} is not whole chips of {cores_per_chip}")
    sick = frozenset(unhealthy)
    base = VNode(
        name,
        cores_per_chip,
        per_chip_cpus,
        tuple(VChip(c, cores_per_chip, per_chip_cpus) for c in sorted(set(free) - sick)),
        max(allocatable - requested, 0),
        chip_type=chip_type,
    )
    return _replay(base, pods, sick)


def _replay(node: VNode, pods: Sequence[VPod], sick: frozenset[int] = frozenset()) -> VNode:
    """``node`` with ``pods`` counted on their chips."""
    chips = {c.id: c for c in node.chips}
    in_flight = set(node.in_flight)
    for pod in pods:
        choice = pod.choice
        if choice.template is None:
            for c in choice.chips:
                if c not in sick:
                    chips[c] = VChip(c, 0, 0, DVPP_NO, stable=pod.created)
            continue
        t = templates(node.chip_type).get(choice.template)
        if t is None or choice.chips[0] in sick:
            continue
        chip = chips.get(choice.chips[0]) or VChip(
            choice.chips[0], node.cores_per_chip, node.cpus_per_chip
        )
        if not pod.created:
            in_flight.add(t.name)
        chips[chip.id] = dataclasses.replace(
            chip,
            cores=max(chip.cores - t.cores, 0),
            cpus=max(chip.cpus - t.cpus, 0),
            # The template's media engine, not the pod's label (plugin/vnode.go
            # addNPUResourceVNPUCard: UpdateDVPP(podVResource.DVPP)).
            dvpp=_dvpp_after(chip.dvpp, t.dvpp),
            segmented=True,
            stable=chip.stable and pod.created,
            vgroups=chip.vgroups | ({pod.vgroup} if pod.vgroup is not None else set()),
        )
    return dataclasses.replace(
        node,
        chips=tuple(chips[c] for c in sorted(chips)),
        in_flight=frozenset(in_flight),
        pods=node.pods | {p.key for p in pods},
    )


def _dvpp_after(free: str, pod: str) -> str:
    if pod == DVPP_YES:
        return DVPP_NO
    if pod == DVPP_NULL and free != DVPP_NO:
        return DVPP_NULL
    return free


def _chip_fits(chip: VChip, want: Resource, is_310p: bool = True) -> bool:
    if not chip.stable or chip.cores < want.cores or chip.cpus < want.cpus:
        return False
    if want.dvpp == DVPP_YES and chip.dvpp != DVPP_YES:
        return False
    if want.dvpp == DVPP_NULL and chip.dvpp == DVPP_NO:
        return False
    if not is_310p:  # vGroups limit 310P chips only (vnode.go ``isChipVGroupValid``)
        return True
    groups = len(chip.vgroups) if chip.segmented else 0
    too_many = groups >= MANY_VGROUPS and want.cores >= 2
    return not (too_many or (groups >= BIG_VGROUPS and want.cores >= 4))


def _whole(node: VNode) -> list[VChip]:
    """Chips free as a whole: no vNPU on them, nothing given."""
    full = node.cores_per_chip
    return [c for c in node.chips if not c.segmented and c.stable and c.cores == full]


def _meets(node: VNode, want: Resource) -> bool:
    if sum(c.cores for c in node.chips) < want.cores:
        return False
    if want.cores % node.cores_per_chip == 0:
        return len(_whole(node)) >= want.cores // node.cores_per_chip
    return any(_chip_fits(c, want, node.is_310p) for c in node.chips)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A node's answer for a task: the resource it gets there (downgraded or not), or why
    it cannot."""

    resource: Resource | None
    downgraded: bool = False
    reason: str = ""
    final: bool = False  # the node can never take the task (its chips' rules refuse it)


def check(node: VNode, task: str, want: Resource) -> Verdict:
    """``CheckNodeNPUByDyTask``: the resources, downgrading a ``high`` request once, then the
    in-flight rule on what the node would give (``internal/npu/vnpu/vdynamic.go``)."""
    given, downgraded = want, False
    if not _meets(node, want):
        lower = downgrade(want) if node.is_310p else None  # 310P only, as upstream
        if lower is None or not _meets(node, lower):
            return Verdict(None, reason=NOT_ENOUGH.format(task=task, node=node.name))
        given, downgraded = lower, True
    if node.in_flight:  # IsNodeHasDifferentUnFinishedTask
        template = template_of(given, node.chip_type)
        if template is None:
            return Verdict(
                None,
                reason=f"util.VResource{{Aicore:{given.cores}, Aicpu:{given.cpus}, "
                f'DVPP:"{given.dvpp}"}} not get template',
            )
        if node.in_flight != {template}:
            return Verdict(None, reason=IN_FLIGHT.format(task=task, node=node.name))
    return Verdict(given, downgraded=downgraded)


def scores(idle: Mapping[str, int], downgraded: Iterable[str]) -> dict[str, float]:
    """``ScoreBestNPUNodes`` over the nodes that passed: by idle AI cores, fewest first (ties
    by name); the first gets 8, or with downgrades every downgraded node before the first
    other gets 8 and that one 16."""
    order = sorted(idle, key=lambda n: (idle[n], n))
    lowered = set(downgraded)
    result = dict.fromkeys(order, 0.0)
    if not order:
        return result
    if not lowered:
        result[order[0]] = 8.0
        return result
    for name in order:
        if name in lowered:
            result[name] = 8.0
        else:
            result[name] = 16.0
            break
    return result


def choose(node: VNode, want: Resource) -> CoreChoice | None:
    """``UseAnnotation``: a vNPU on the best-fitting chip (fewest free, lowest id), or the
    first whole free chips."""
    if want.cores % node.cores_per_chip == 0:
        whole = _whole(node)[: want.cores // node.cores_per_chip]
        if len(whole) * node.cores_per_chip != want.cores:
            return None
        return CoreChoice(tuple(c.id for c in whole))
    template = template_of(want, node.chip_type)
    if template is None:
        return None
    for chip in sorted(node.chips, key=lambda c: (c.cores, c.cpus, c.id)):
        if _chip_fits(chip, want, node.is_310p):
            return CoreChoice((chip.id,), template)
    return None


def with_pod(node: VNode, pod: VPod, cores: int) -> VNode:
    """The node once a pod of ``cores`` AI cores it does not know yet is counted (a bind
    the view does not show yet)."""
    if pod.key in node.pods:
        return node
    return dataclasses.replace(_replay(node, [pod]), idle=max(node.idle - cores, 0))
