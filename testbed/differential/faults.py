"""Fault reactions beside Huawei's plugin: a job running on its chips, then a chip of one of its
nodes listed failed in that node's DeviceInfo; which of its pods each side deletes.

Huawei's side: the job placed by its plugin in the real Volcano (``huawei.VolcanoCases``), its
pods then made to look as a kubelet and the device plugin leave them (phase ``Running``, the
chips in ``huawei.com/AscendReal``: ascend-for-volcano ``internal/rescheduling/task.go``
getUseCardName reads only that), the DeviceInfo of its nodes without the chips it took, then
the fault written with a later ``UpdateTime`` (the plugin copies a DeviceInfo only when that
grows: ``plugin/node.go`` updateNPUNodeDeviceInfos). The plugin reacts in the first session
that sees it (``rescheduling/frame.go`` Execute, from ``OnSessionOpen``); a pod deleted, or
being deleted (``grace``: Volcano's evictor leaves it Terminating with no kubelet), counts.

Ours: the engine's decision on the same running job and DeviceInfo (``chip_faults.node_faults``,
``rescheduling.find_faults``, ``deletions`` at the moment of the fault), as the service's fault
controller takes it (``scheduler_core/service/state/fault_restarts.py``).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from contract.annotations import (
    ACCELERATOR_TYPE_LABEL,
    RA_BLOCK_ANNOTATION,
    REAL_ANNOTATION,
    SP_BLOCK_ANNOTATION,
)
from contract.annotations import (
    SCHEDULE_POLICY_ANNOTATION as POLICY,
)
from contract.chip_names import ASCEND910, NPU
from contract.deviceinfo import DeviceInfo, chip_list
from contract.groups import KUBEFLOW_REPLICA_TYPE, VOLCANO_TASK_INDEX
from scheduler_core.engine import chip_faults, locality, rescheduling
from testbed.control_plane import wait_until
from testbed.differential.cases import HARDWARE, Case, JobSpec, NodeSpec, Obj, listed
from testbed.differential.huawei import DECIDE_SECONDS, Running, VolcanoCases
from testbed.differential.objects import (
    CASE_LABEL,
    CONFIGMAPS,
    PODGROUPS,
    PODS,
    job_objects,
    node_objects,
)
from testbed.differential.outcome import Outcome
from testbed.rest import RestError

FAULT_SCHEDULING = "fault-scheduling"
TASK_INDEX_ENV = "VC_TASK_INDEX"
WINDOW_SESSIONS = 5  # sessions watched after the fault (pod-level widens at 12: not reached)
# Our service acts in its maintenance pass (each second) after its DeviceInfo watch: watched
# this long too (its pod-level stages count seconds, 12 before the whole job: not reached).
OUR_PASS = 3.0


@dataclass(frozen=True, slots=True)
class FaultCase:
    """A job on all-free servers and, once it runs, chip ``chip`` of the node of rank ``rank``
    (``hccl/rankIndex``) listed ``-Unhealthy`` (``network``: ``-NetworkUnhealthy``); ``chip``
    None: the first chip that pod holds."""

    name: str
    hardware: str
    servers: int
    job: JobSpec
    rank: int = 0
    chip: int | None = None
    network: bool = False
    note: str = ""

    @property
    def case(self) -> Case:
        spec = HARDWARE[self.hardware]
        free = listed(range(spec.chips), spec.kind)
        super_pod = 0 if spec.super_pod else None
        rack = 0 if spec.racks else None
        nodes = tuple(NodeSpec(free, super_pod=super_pod, rack=rack) for _ in range(self.servers))
        return Case(self.name, self.hardware, nodes, self.job, note=self.note)


@dataclass(frozen=True, slots=True)
class FaultOutcome:
    """Where the job's pods ran (in pod order: node, chips), their ranks (``hccl/rankIndex``,
    which Huawei's plugin writes as it binds), the chip that failed, the ranks deleted."""

    placements: tuple[tuple[int, tuple[int, ...]], ...]
    ranks: tuple[int, ...]
    chip: int
    deleted: frozenset[int] = field(default_factory=frozenset)
    reason: str = ""  # why nothing was compared (the job was not placed)
    # Where the deleted pods went once made again (pod index → node; -1: not placed).
    moved: Mapping[int, int] = field(default_factory=dict)


def _job(
    pods: int,
    npu: int,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> JobSpec:
    resource = NPU.resource if annotations and POLICY in annotations else ASCEND910.resource
    return JobSpec(pods, npu, labels=labels or {}, annotations=annotations or {}, resource=resource)


FORCE_POD_LEVEL = {FAULT_SCHEDULING: "force", rescheduling.POD_RESCHEDULING_LABEL: "on"}


# The cases: the recovery modes a MindCluster user sets on a job, and faults its pods do and do
# not sit on (MindCluster ``docs``: fault-scheduling, pod-rescheduling; ascend-for-volcano
# ``rescheduling/job.go`` isNormalTaskCanBeDelete, isMasterRank).
FAULT_CASES: tuple[FaultCase, ...] = (
    FaultCase("force-job", "910 x8", 4, _job(2, 8, {FAULT_SCHEDULING: "force"}), rank=1),
    FaultCase("grace-job", "910 x8", 4, _job(2, 8, {FAULT_SCHEDULING: "grace"}), rank=1),
    FaultCase(
        "force-pod-level",
        "910B x8",
        3,
        _job(2, 8, FORCE_POD_LEVEL),
        rank=1,
    ),
    FaultCase(
        "force-pod-level-master",
        "910B x8",
        4,
        _job(2, 8, FORCE_POD_LEVEL),
        rank=0,
    ),
    FaultCase(
        "grace-pod-level",
        "910 x8",
        3,
        _job(2, 8, {**FORCE_POD_LEVEL, FAULT_SCHEDULING: "grace"}),
        rank=1,
    ),
    FaultCase(
        "force-pod-level-worker-rank-0",
        "910B x8",
        3,
        _job(2, 8, {**FORCE_POD_LEVEL, KUBEFLOW_REPLICA_TYPE: "worker"}),
        rank=0,
    ),
    FaultCase(
        "force-process-level",
        "910B x8",
        3,
        _job(2, 8, {FAULT_SCHEDULING: "force", rescheduling.PROCESS_RECOVER_LABEL: "on"}),
        rank=1,
    ),
    FaultCase(
        "force-a3-super-pod-pod-level",
        "A3 SuperPoD x16",
        3,
        _job(2, 16, FORCE_POD_LEVEL, {SP_BLOCK_ANNOTATION: "16"}),
        rank=1,
    ),
    FaultCase(
        "force-950-pod-level",
        "950 SuperPoD",
        3,
        _job(
            2,
            8,
            FORCE_POD_LEVEL,
            {POLICY: "chip8-node8-ra64-sp", SP_BLOCK_ANNOTATION: "16", RA_BLOCK_ANNOTATION: "8"},
        ),
        rank=1,
    ),
    FaultCase("unlabelled", "910 x8", 3, _job(2, 8), rank=1),
    FaultCase("off", "910 x8", 3, _job(2, 8, {FAULT_SCHEDULING: "off"}), rank=0),
    FaultCase("force-one-pod", "910B x8", 2, _job(1, 8, {FAULT_SCHEDULING: "force"})),
    FaultCase(
        "force-chip-not-held",
        "910B x8",
        1,
        _job(1, 4, {FAULT_SCHEDULING: "force"}),
        chip=7,  # the 4-chip pod takes 0-3
    ),
    FaultCase(
        "force-network-unhealthy",
        "910B x8",
        3,
        _job(2, 8, {FAULT_SCHEDULING: "force"}),
        rank=1,
        network=True,
    ),
)


# Hardware of whole-server gangs a seeded fault case may run on: (group, policy annotations).
_FAULT_HARDWARE: tuple[tuple[str, Mapping[str, str]], ...] = (
    ("910 x8", {}),
    ("910B x8", {}),
    ("910B x16", {}),
    ("A3 x16", {POLICY: "chip2-node16"}),
    ("850 x8", {}),
    ("350 x8", {POLICY: "chip1-node8"}),
    ("A3 SuperPoD x16", {SP_BLOCK_ANNOTATION: "16"}),
    ("950 SuperPoD", {POLICY: "chip8-node8-ra64-sp", SP_BLOCK_ANNOTATION: "8"}),
)


def generate_faults(seed: int, count: int) -> list[FaultCase]:
    """``count`` fault cases drawn from ``seed``: a gang of one to three pods of a whole server
    each (pods sharing a server restart together by upstream's rule and ours alike, but where
    they go again depends on the gang rule that differs: not drawn), one or two spare servers,
    a recovery mode (none, ``off``, ``force``, ``grace``; pod- or process-level; a Kubeflow
    worker at rank 0), and the fault: a chip of any rank's node (its first, or any),
    sometimes listed only network-unhealthy."""
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        group, routing = rng.choice(_FAULT_HARDWARE)
        spec = HARDWARE[group]
        pods = rng.choice((1, 2, 2, 3))
        labels: dict[str, str] = {}
        mode = rng.choice(("force", "force", "grace", "off", ""))
        if mode:
            labels[FAULT_SCHEDULING] = mode
        level = rng.choice(("job", "job", "pod", "process"))
        if level == "pod":
            labels[rescheduling.POD_RESCHEDULING_LABEL] = "on"
        elif level == "process":
            labels[rescheduling.PROCESS_RECOVER_LABEL] = "on"
        if rng.random() < 0.15:
            labels[KUBEFLOW_REPLICA_TYPE] = "worker"
        annotations = dict(routing)
        if group == "950 SuperPoD" and pods > 1:
            annotations[SP_BLOCK_ANNOTATION] = str(8 * pods)
        network = rng.random() < 0.15
        chip = rng.randrange(spec.chips) if rng.random() < 0.2 else None
        resource = NPU.resource if spec.kind is NPU else ASCEND910.resource
        # The servers' ``accelerator-type`` as the job's selector, as Huawei's samples select.
        selector = {k: v for k, v in spec.labels.items() if k == ACCELERATOR_TYPE_LABEL}
        job = JobSpec(
            pods,
            spec.chips,
            labels=labels,
            annotations=annotations,
            selector=selector,
            resource=resource,
        )
        rank = rng.randrange(pods)
        note = f"{pods} x {spec.chips}, {mode or 'unlabelled'} {level}-level, rank {rank}"
        cases.append(
            FaultCase(
                f"f{seed}-{i}",
                group,
                pods + rng.choice((1, 2)),
                job,
                rank=rank,
                chip=chip,
                network=network,
                note=note
                + (", network" if network else "")
                + ("" if chip is None else f", chip {chip}"),
            )
        )
    return cases


def _device_info(
    case: Case, key: str, i: int, node: NodeSpec, update_time: int
) -> tuple[str, dict[str, object]]:
    """The path and body of node ``i``'s DeviceInfo ConfigMap as ``node`` describes it."""
    _, configmap, _ = node_objects(case, key, i, node, update_time=update_time)
    return f"{CONFIGMAPS}/{configmap['metadata']['name']}", configmap


def run_fault(runner: VolcanoCases, fault: FaultCase, *, seconds: float = 0.0) -> FaultOutcome:
    """What decides in ``runner``'s Volcano does on the fault (module docstring): the ranks
    deleted within ``WINDOW_SESSIONS`` sessions and ``seconds``, and where those pods go once
    made again."""
    running_case = Running(fault.case, runner.key())
    key = running_case.key
    try:
        runner.set_up([running_case])
        podgroup, pods = job_objects(fault.case, key)
        # A controller's PodGroup: upstream keeps a restarted job's healthy ranks on their
        # nodes only for a job it can name (factory.go addPreferPreviousNodeScore).
        podgroup["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "name": key,
                "uid": str(uuid.uuid4()),
                "controller": True,
            }
        ]
        for i, pod in enumerate(pods):
            # The task index Volcano's job controller gives each pod (annotation
            # ``volcano.sh/task-index``; its env plugin's ``VC_TASK_INDEX``), which both sides
            # read as the pod's rank where no ``hccl/rankIndex`` is written yet (ascend-for-
            # volcano ``plugin/job.go``; contract/groups.py), so a pod made again keeps its rank.
            pod["metadata"]["annotations"][VOLCANO_TASK_INDEX] = str(i)
            pod["spec"]["containers"][0]["env"] = [{"name": TASK_INDEX_ENV, "value": str(i)}]
            runner.admin.create(PODS, pod)
        runner.admin.create(PODGROUPS, podgroup)
        deadline = time.monotonic() + DECIDE_SECONDS
        while running_case.outcome is None and time.monotonic() < deadline:
            runner.observe([running_case])
            time.sleep(0.05)
        placed = running_case.outcome or Outcome(False, reason="undecided")
        if not placed.placed:
            return FaultOutcome((), (), -1, reason=f"not placed: {placed.reason}"[:500])
        taken, stamp = _run(runner, running_case, placed.placements)
        ranks = placed.ranks if -1 not in placed.ranks else tuple(range(len(placed.placements)))
        node, chips = placed.placements[ranks.index(fault.rank)]
        chip = chips[0] if fault.chip is None else fault.chip
        spec = fault.case.nodes[node]
        # A network-unhealthy chip stays on the free list (the device plugin lists it there).
        gone = taken[node] if fault.network else taken[node] | {chip}
        failed = replace(
            spec,
            free=tuple(c for c in spec.free if c not in gone),
            unhealthy=() if fault.network else (chip,),
            network_unhealthy=(chip,) if fault.network else (),
        )
        path, body = _device_info(fault.case, key, node, failed, stamp + 1)
        runner.admin.request("PUT", path, body)
        if not fault.network:  # the kubelet's count drops with the device plugin's report
            healthy = str(fault.case.spec.chips - 1)
            allocatable = {"status": {"allocatable": {fault.case.spec.resource: healthy}}}
            runner.admin.patch(f"/api/v1/nodes/{key}-n{node}/status", allocatable)
        deleted = _deleted(runner, key, ranks, seconds)
        again = [i for i, rank in enumerate(ranks) if rank in deleted]
        moved = _placed_again(
            runner,
            running_case,
            placements=placed.placements,
            again=again,
            failed=(node, failed),
            pods=pods,
        )
        return FaultOutcome(placed.placements, ranks, chip, deleted, moved=moved)
    finally:
        runner.clean([key])


def _placed_again(
    runner: VolcanoCases,
    running_case: Running,
    *,
    placements: Sequence[tuple[int, Sequence[int]]],
    again: Sequence[int],
    failed: tuple[int, NodeSpec],
    pods: Sequence[Obj],
) -> dict[int, int]:
    """The pods ``again`` (indexes) gone as a kubelet ends them, their chips free again but
    the failed one, then made again as first created, as a job controller makes them: where
    each is bound (-1: not within ``DECIDE_SECONDS``)."""
    if not again:
        return {}
    case, key, admin = running_case.case, running_case.key, runner.admin
    names = {f"{key}-p{i}" for i in again}
    for name in names:
        try:
            admin.request("DELETE", f"{PODS}/{name}", query={"gracePeriodSeconds": "0"})
        except RestError as gone:
            if gone.status != 404:
                raise
    listed = f"{CASE_LABEL}={key}"

    def ended() -> bool:
        return not names & {
            p["metadata"]["name"] for p in admin.get(PODS, labelSelector=listed)["items"]
        }

    wait_until(ended, 30, f"the deleted pods of {case.name} gone")
    held: dict[int, set[int]] = {}
    for i, (node, chips) in enumerate(placements):
        if i not in again:
            held.setdefault(node, set()).update(chips)
    stamp = int(time.time()) + 10
    for node in {n for n, _ in placements}:
        spec = failed[1] if node == failed[0] else case.nodes[node]
        keep = held.get(node, set()) | set(spec.unhealthy)
        every = listed_chips(case)
        path, body = _device_info(
            case, key, node, replace(spec, free=tuple(c for c in every if c not in keep)), stamp
        )
        admin.request("PUT", path, body)
    for pod in pods:
        if pod["metadata"]["name"] in names:
            admin.create(PODS, pod)
    resource = case.spec.resource
    deadline = time.monotonic() + DECIDE_SECONDS
    where: dict[int, int] = {}
    while time.monotonic() < deadline and len(where) < len(again):
        for pod in admin.get(PODS, labelSelector=listed)["items"]:
            name = pod["metadata"]["name"]
            bound = pod["spec"].get("nodeName")
            if name in names and bound and resource in (pod["metadata"].get("annotations") or {}):
                where[int(name.rsplit("-p", 1)[1])] = int(bound.rsplit("-n", 1)[1])
        time.sleep(0.1)
    return {i: where.get(i, -1) for i in again}


def listed_chips(case: Case) -> tuple[int, ...]:
    """Every chip of a server of the case, as a DeviceInfo lists them."""
    return listed(range(case.spec.chips), case.spec.kind)


def _run(
    runner: VolcanoCases, running_case: Running, placements: Sequence[tuple[int, Sequence[int]]]
) -> tuple[dict[int, set[int]], int]:
    """The placed job made to run as a kubelet and the device plugin would leave it: its pods
    ``Running`` with their chips in ``AscendReal``, its chips off its nodes' free lists, its
    PodGroup ``Running`` (Volcano's own status, ``GetRunningJobs`` reads it). The chips taken
    by node, and the ``UpdateTime`` written."""
    case, key, admin = running_case.case, running_case.key, runner.admin
    for i, (_, chips) in enumerate(placements):
        pod = f"{PODS}/{key}-p{i}"
        real = {REAL_ANNOTATION: chip_list(chips, case.spec.kind)}
        admin.patch(pod, {"metadata": {"annotations": real}})
        admin.patch(f"{pod}/status", {"status": {"phase": "Running"}})
    stamp = int(time.time()) + 1
    taken: dict[int, set[int]] = {}
    for node, chips in placements:
        taken.setdefault(node, set()).update(chips)
    for node, held in taken.items():
        spec = case.nodes[node]
        left = replace(spec, free=tuple(c for c in spec.free if c not in held))
        path, body = _device_info(case, key, node, left, stamp)
        admin.request("PUT", path, body)

    def group_runs() -> bool:
        group = admin.get(f"{PODGROUPS}/{key}-pg")
        return (group.get("status") or {}).get("phase") == "Running"

    wait_until(group_runs, 30, f"the PodGroup of {case.name} Running")
    return taken, stamp


def _deleted(
    runner: VolcanoCases, key: str, ranks: Sequence[int], seconds: float
) -> frozenset[int]:
    """The ranks whose pods are gone or being deleted within ``WINDOW_SESSIONS`` sessions and
    ``seconds``."""
    start, until = runner.sessions(), time.monotonic() + seconds
    deleted: set[int] = set()
    while runner.sessions() < start + WINDOW_SESSIONS or time.monotonic() < until:
        found = runner.admin.get(PODS, labelSelector=f"{CASE_LABEL}={key}")["items"]
        pods = {p["metadata"]["name"]: p for p in found}
        for i, rank in enumerate(ranks):
            pod = pods.get(f"{key}-p{i}")
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                deleted.add(rank)
        time.sleep(0.1)
    return frozenset(deleted)


def our_deletions(fault: FaultCase, theirs: FaultOutcome) -> frozenset[int]:
    """The ranks our engine deletes for the same running job and fault."""
    case = fault.case
    spec = case.spec
    labels = dict(case.job.labels)
    worker = labels.get(KUBEFLOW_REPLICA_TYPE) == "worker"  # every pod carries the job's labels
    pods = tuple(
        rescheduling.JobPod(
            "differential", f"p{i}", f"u{i}", f"n{node}", rank, chips, worker=worker
        )
        for i, ((node, chips), rank) in enumerate(zip(theirs.placements, theirs.ranks, strict=True))
    )
    node, _ = theirs.placements[theirs.ranks.index(fault.rank)]
    listed_chip = frozenset({theirs.chip})
    info = DeviceInfo(
        frozenset(),
        frozenset() if fault.network else listed_chip,
        listed_chip if fault.network else frozenset(),
        kind=spec.kind,
    )
    failed = {f"n{node}": chip_faults.node_faults(info).failed}
    recovery, _ = rescheduling.recovery_of(labels, dict(case.job.annotations), case.job.npu)
    found = rescheduling.find_faults(
        {"job": (labels.get(FAULT_SCHEDULING, ""), pods)},
        lambda _job: failed,
        (),
        {"job": recovery},
    )
    ranks = {p.name: p.rank for p in pods}
    return frozenset(
        ranks[d.name] for f in found for d in rescheduling.deletions(f, 0.0, 0.0, 900.0)
    )


@dataclass(frozen=True, slots=True)
class FaultVerdict:
    case: str
    agrees: bool
    detail: str


def judge_fault(fault: FaultCase, seen: FaultOutcome) -> FaultVerdict:
    """``seen`` (what decided in Volcano) agrees with our engine: the same ranks deleted, and
    each pod made again on its old node unless that node failed under it, else on a node of
    none of the job's other pods and not the failed one (``locality._after_fault``: healthy
    ranks return, the faulty ones move to the best other node; nodes of equal score tie); a
    job its handler places afresh, on distinct nodes, none the failed one."""
    if seen.reason:
        return FaultVerdict(fault.name, False, seen.reason)
    ours = our_deletions(fault, seen)
    detail = f"deletes ranks {sorted(seen.deleted)}, ours {sorted(ours)}"
    if ours != seen.deleted:
        return FaultVerdict(fault.name, False, detail)
    failed_node = seen.placements[seen.ranks.index(fault.rank)][0]
    # A 950 SuperPoD job restarting whole is placed afresh by its rack strategies, on both
    # sides (``chip8node8ra64sp/reschedule.go`` selectNodesForFaultJob acts only under
    # pod-level rescheduling; ``locality._racks``): no rank is kept on its node.
    afresh = locality.network_rules(fault.job.annotations).whole is not None and len(
        seen.deleted
    ) == len(seen.ranks)
    placed_on = [n for n in seen.moved.values() if n >= 0]
    if afresh and len(set(placed_on)) != len(placed_on):
        return FaultVerdict(fault.name, False, f"{detail}; pods made again share a node")
    for i, node in sorted(seen.moved.items()):
        old = seen.placements[i][0]
        others = set() if afresh else {n for j, (n, _) in enumerate(seen.placements) if j != i}
        if node < 0:
            why = f"pod p{i} not placed again"
        elif old == failed_node or afresh:
            if node not in others | {failed_node}:
                continue
            why = f"pod p{i} (on n{old}, n{failed_node} failed) made again on n{node}"
        elif node != old:
            why = f"pod p{i} made again on n{node}, not on its healthy node n{old}"
        else:
            continue
        return FaultVerdict(fault.name, False, f"{detail}; {why}")
    moves = ", ".join(f"p{i}: n{seen.placements[i][0]}→n{n}" for i, n in sorted(seen.moved.items()))
    return FaultVerdict(fault.name, True, f"{detail}; again {moves or 'none'}")


def run_faults(
    runner: VolcanoCases, faults: Sequence[FaultCase] = FAULT_CASES, *, seconds: float = 0.0
) -> Mapping[str, FaultVerdict]:
    """Every case run in ``runner``'s Volcano and judged (``seconds``: ``run_fault``'s)."""
    return {f.name: judge_fault(f, run_fault(runner, f, seconds=seconds)) for f in faults}
