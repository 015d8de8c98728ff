"""Fault rescheduling of multi-node jobs (Volcano plugin v5
``internal/rescheduling``). Pure.

A running job labelled ``fault-scheduling: grace|force`` whose pod sits on a failed chip
(``-Unhealthy``: ``chip_faults``) or on a node that no longer publishes a valid DeviceInfo is
a *fault job*. Like upstream, a pod's chips come only
from its ``huawei.com/AscendReal`` annotation. Every pod of the job is deleted so the job
restarts: ``force`` at once (grace 0, UID precondition); ``grace`` with each pod's own grace
period, then at once if pods remain ``grace-over-time`` (900 s) after the fault was seen.
When the job's pods come back, healthy ranks return to their nodes and the faulty ones move
(the extender does that with ``FaultJob.previous``).

Pod-level rescheduling (``pod-rescheduling: "on"``) and process-level recovery
(``process-recover-enable: on``) narrow what is deleted to the pods on failed chips
(``scope``), as Ascend/mind-cluster ``component/ascend-for-volcano/internal/rescheduling/
job.go`` isNormalTaskCanBeDelete: the surviving pods keep their UIDs, ranks and nodes, and
only the missing ranks are placed again beside them.

The record ``volcano-system/vcjob-fault-npu-cm`` and the job's ``fault-config-<job>``
carry a ``checkCode``: SHA-256 of the Go JSON of the rest of the content.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from contract.annotations import (
    FAULT_RECORD,
    FAULT_RETRY_LABEL,
    RA_BLOCK_ANNOTATION,
    RECOVER_POLICY_PATH_ANNOTATION,
    SP_BLOCK_ANNOTATION,
    WAIT_RESCHEDULE_ANNOTATION,
)
from contract.chip_names import InvalidInput
from contract.go_json import go_json
from scheduler_core.engine import racks
from scheduler_core.engine.locality import network_rules

GRACE, FORCE = "grace", "force"
GRACE_OVER_TIME = 900.0
MAX_RETRIES = 1000
RETRIES_KEY = "remain-retry-times"

# Job settings of pod- and process-level recovery (Ascend/mind-cluster component/
# ascend-common/api/consts.go PodScheduleLabel, ProcessScheduleLabel, RecoverStrategyKey;
# component/ascend-for-volcano/common/util/constants.go RecoverPolicyPathKey;
# component/clusterd/pkg/common/constant/const.go WaitRescheduleTimeoutKey).
POD_RESCHEDULING_LABEL = "pod-rescheduling"
PROCESS_RECOVER_LABEL = "process-recover-enable"
ON, PAUSE = "on", "pause"
# subHealthyStrategy (PodGroup label; ascend-for-volcano common/util/type.go): ``ignore``,
# the code's default (plugin/job.go setJobSubHealthyStrategy), only places sub-healthy nodes
# last; the others make a pod on a sub-healthy node a fault.
SUB_HEALTHY_LABEL = "subHealthyStrategy"
IGNORE, GRACE_EXIT_STRATEGY, FORCE_EXIT, HOT_SWITCH = (
    "ignore",
    "graceExit",
    "forceExit",
    "hotSwitch",
)
SUB_HEALTHY_STRATEGIES = (IGNORE, GRACE_EXIT_STRATEGY, FORCE_EXIT, HOT_SWITCH)
# The hot-switch flow: ClusterD marks the sub-healthy pod (inHotSwitchFlow, needOperatorOpe:
# create), Ascend Operator starts its backup pod (podType: backup) and names it on the old pod
# (backupNewPodName), ClusterD then asks the scheduler to delete the old pod (needVolcanoOpe:
# delete) (component/clusterd/pkg/application/recover/hot_switch_controller.go,
# component/ascend-operator/pkg/controllers/v1/pod.go, ascend-for-volcano
# internal/rescheduling/task.go getTaskHealthStateBySubHealth).
NEED_VOLCANO_OPE_ANNOTATION = "needVolcanoOpe"
BACKUP_POD_ANNOTATION = "backupNewPodName"
OPE_DELETE = "delete"
POD_ONLY = "pod"  # recover_policy_path value: never widen past the faulty pods
# ClusterD waits this long (30..270 s, default 270) for the faulty pod to be placed again
# before it falls back (recover/controller.go l.1668-1677).
WAIT_RESCHEDULE_RANGE = (30, 270)
# Volcano counts the sessions a pod-level fault job stays pending (reschedule.go
# singlePodReschedulingUpgrade): at 6 (SpPendingTimes) a SuperPoD job widens to the
# virtual SuperPoD of its faulty pods, at 12 (PendingTimes) every job to the whole job. A
# session is Volcano's schedule period, 1 s by default; here the stages are the seconds the
# job has waited since its faulty pods were deleted. An Atlas 950 SuperPoD job with an
# ``ra-block`` widens first, at 3 (tpPendingTimes), to the ra-blocks of its faulty pods, and
# so does its process-level recovery, which goes no further (rescheduling/reschedule_v2.go
# singlePodReschedulingUpgradeFor910A5, processPendingRules; job_v2.go).
SESSION_SECONDS = 1.0
RA_BLOCK_STAGE = 3 * SESSION_SECONDS
SUPER_POD_STAGE = 6 * SESSION_SECONDS
JOB_STAGE = 12 * SESSION_SECONDS


@dataclass(frozen=True, slots=True)
class Recovery:
    """How a job recovers from a fault: the whole job (the default), or only its faulty pods
    (``pod_level``, ``process``), widening by stages unless ``pod_only``."""

    pod_level: bool = False  # pod-rescheduling: "on"
    process: bool = False  # process-recover-enable: on (ClusterD drives the recovery)
    pod_only: bool = False  # huawei.com/recover_policy_path: pod
    block: int = 0  # a SuperPoD job's pods per virtual SuperPoD (0: not a SuperPoD job)
    # An Atlas 950 SuperPoD job's pods per ra-block (its ``ra-block`` NPUs; 1 without one,
    # 0: no such job, upstream's 910A5 path).
    ra_block: int = 0
    wait: float = float(WAIT_RESCHEDULE_RANGE[1])  # wait-reschedule-timeout, seconds
    sub_healthy: str = IGNORE  # subHealthyStrategy


def recovery_of(
    labels: Mapping[str, str], annotations: Mapping[str, str], npu: int = 0
) -> tuple[Recovery, str]:
    """A job's Recovery from its labels and annotations (``npu``: each pod's NPUs, which
    turn ``sp-block`` and ``ra-block`` into pods), and a warning when
    ``wait-reschedule-timeout`` is malformed (then 270 s, as ClusterD falls back)."""
    low, high = WAIT_RESCHEDULE_RANGE
    text = annotations.get(WAIT_RESCHEDULE_ANNOTATION)
    wait, warning = float(high), ""
    if text is not None:
        if text.isascii() and text.isdigit() and low <= int(text) <= high:
            wait = float(text)
        else:
            warning = (
                f"{WAIT_RESCHEDULE_ANNOTATION} {text!r} is not a number of seconds in "
                f"{low}..{high}; {high} is used"
            )
    recovery = Recovery(
        pod_level=labels.get(POD_RESCHEDULING_LABEL) == ON,
        process=labels.get(PROCESS_RECOVER_LABEL) == ON,
        pod_only=annotations.get(RECOVER_POLICY_PATH_ANNOTATION) == POD_ONLY,
        block=_pods_in(annotations.get(SP_BLOCK_ANNOTATION), npu),
        ra_block=max(1, _pods_in(annotations.get(RA_BLOCK_ANNOTATION), npu))
        if network_rules(annotations).ra_blocks
        else 0,
        wait=wait,
        # An unknown value is ``ignore``, as upstream falls back.
        sub_healthy=strategy
        if (strategy := labels.get(SUB_HEALTHY_LABEL)) in SUB_HEALTHY_STRATEGIES
        else IGNORE,
    )
    return recovery, warning


@dataclass(frozen=True, slots=True)
class JobPod:
    namespace: str
    name: str
    uid: str
    node: str
    rank: int
    chips: tuple[int, ...]
    terminating: bool = False  # deleted already, its grace period running
    switched: bool = False  # hot switch: its backup runs, ClusterD asks for its deletion
    # Labelled ``training.kubeflow.org/replica-type: worker``: not the master even at rank 0
    # (ascend-for-volcano ``rescheduling/job.go`` isMasterRank).
    worker: bool = False

    @property
    def master(self) -> bool:
        return self.rank == 0 and not self.worker


@dataclass(frozen=True, slots=True)
class FaultJob:
    job: str  # namespace/name
    mode: str  # grace or force
    pods: tuple[JobPod, ...]
    nodes: tuple[str, ...]  # nodes with a failed chip or no valid DeviceInfo
    rank_ids: tuple[int, ...]  # failed chips as upstream's FaultRankIds
    failed: tuple[int, ...] = ()  # ranks of the pods on failed chips
    recovery: Recovery = Recovery()
    # The ranks being placed again (None: the whole job), as ``scope`` last said.
    moving: frozenset[int] | None = None
    sub_health: bool = False  # its pods fail by sub-health alone (``subHealthyStrategy``)

    @property
    def previous(self) -> dict[int, str]:
        """Rank → node of the run that failed."""
        return {p.rank: p.node for p in self.pods}


FAULT_RESTART_REASON = "NPUFaultRestart"  # a fault job's pod deleted so the job restarts
GANG_RESTART_REASON = "NPUGangRestart"  # a gang partly running too long, restarted whole


@dataclass(frozen=True, slots=True)
class Deletion:
    namespace: str
    name: str
    uid: str
    grace_seconds: int | None  # None: the pod's own grace period
    why: str = field(default="", compare=False)  # for the pod's Event
    reason: str = field(default=FAULT_RESTART_REASON, compare=False)  # the Event's reason


def find_faults(
    jobs: Mapping[str, tuple[str, Iterable[JobPod]]],
    failed_for: Callable[[str], Mapping[str, frozenset[int]]],
    down: Collection[str],
    recoveries: Mapping[str, Recovery] | None = None,
    sub_healthy: Collection[str] = (),
) -> list[FaultJob]:
    """The fault jobs among running jobs (job → (fault-scheduling mode, its pods)): a pod
    fails with a chip its node reports failed for its job (``failed_for(job)``: node →
    chips), or with all its chips when the node is ``down``; a node in neither is judged at
    the next view. ``recoveries``: each job's Recovery (default: the whole job). A job with
    no such fault whose ``subHealthyStrategy`` is not ``ignore`` fails with its pods on
    ``sub_healthy`` nodes (``sub_health_faults``)."""
    faults = []
    for job, (labelled, pods) in sorted(jobs.items()):
        if labelled not in (GRACE, FORCE):
            continue
        failed_chips = failed_for(job)
        members = tuple(sorted(pods, key=lambda p: p.rank))
        mode = labelled
        recovery = (recoveries or {}).get(job, Recovery())
        bad: list[tuple[JobPod, Collection[int]]] = []
        for pod in members:
            if pod.node in down:
                failed = set(pod.chips)
            elif pod.node in failed_chips:
                failed = set(pod.chips) & failed_chips[pod.node]
            else:
                continue
            if failed:
                bad.append((pod, failed))
        sub_health = not bad
        if sub_health:
            bad = [(p, p.chips) for p in sub_health_faults(members, recovery, sub_healthy)]
            # Volcano deletes a sub-healthy job's pods at once (forceExit, hotSwitch) or
            # gracefully (graceExit) whatever its fault-scheduling (rescheduling/job.go
            # deleteJobWithSubHealthyLabels).
            mode = GRACE if recovery.sub_healthy == GRACE_EXIT_STRATEGY else FORCE
        if bad:
            fault = FaultJob(
                job,
                mode,
                members,
                tuple(p.node for p, _ in bad),
                tuple(r for p, chips in bad for r in fault_rank_ids(p, chips)),
                tuple(p.rank for p, _ in bad),
                recovery,
                sub_health=sub_health,
            )
            faults.append(dataclasses.replace(fault, moving=scope(fault, 0.0)))
    return faults


def _pods_in(npu_text: str | None, npu: int) -> int:
    """The pods of ``npu_text`` NPUs (a block annotation), 0 when unreadable; a block is
    validated where the job is placed, here it only groups ranks."""
    if npu_text is None or not (npu_text.isascii() and npu_text.isdigit()) or npu <= 0:
        return 0
    return 0 if len(npu_text) > 9 else -(-int(npu_text) // npu)


def _same_blocks(fault: FaultJob, ranks: frozenset[int], size: int) -> frozenset[int]:
    """Every rank of the job in a block of ``size`` ranks holding one of ``ranks``."""
    blocks = {r // size for r in ranks}
    return ranks | {p.rank for p in fault.pods if p.rank // size in blocks}


def sub_health_faults(
    pods: Iterable[JobPod], recovery: Recovery, sub_healthy: Collection[str]
) -> list[JobPod]:
    """The pods a job's ``subHealthyStrategy`` counts as faulty on sub-healthy nodes:
    ``graceExit`` and ``forceExit`` every one; ``hotSwitch`` only one ClusterD asked to
    delete once its backup pod started (``task.go`` getTaskHealthStateBySubHealth);
    ``ignore`` none."""
    if recovery.sub_healthy == IGNORE:
        return []
    on = [p for p in pods if p.node in sub_healthy]
    return [p for p in on if p.switched] if recovery.sub_healthy == HOT_SWITCH else on


def scope(fault: FaultJob, waited: float) -> frozenset[int] | None:
    """The ranks to delete and place again (None: the whole job) after the job has waited
    ``waited`` seconds since its faulty pods were deleted, as Ascend/mind-cluster
    ``component/ascend-for-volcano/internal/rescheduling/job.go`` isNormalTaskCanBeDelete:
    ``recover_policy_path: pod`` keeps to the faulty pods; the master failing (rank 0 unless
    labelled a Kubeflow worker, ``isMasterFault``) restarts the whole job; process-level
    recovery keeps to the faulty pods (ClusterD recovers the rest); pod-level widens to the
    faulty pods' virtual SuperPoDs (SuperPoD jobs, ``SUPER_POD_STAGE``) and then to the whole
    job (``JOB_STAGE``; ``IsJobSingleRescheduling`` ends at PendingTimes)."""
    recovery, failed = fault.recovery, frozenset(fault.failed)
    # The 950 path takes rank 0 as the master whatever its labels (judgeJobIsMasterFault).
    masters = {p.rank for p in fault.pods if (p.rank == 0 if recovery.ra_block else p.master)}
    if recovery.pod_only and (recovery.pod_level or recovery.process):
        return failed
    if not (recovery.pod_level or recovery.process) or failed & masters:
        return None
    widened = failed
    # A process-level job widens to its ra-blocks; a pod-level one only as a SuperPoD job.
    if recovery.ra_block > 1 and (recovery.process or recovery.block) and waited >= RA_BLOCK_STAGE:
        widened = _same_blocks(fault, failed, recovery.ra_block)
    if recovery.process:
        return None if widened & masters else widened
    if waited >= JOB_STAGE:
        return None
    if recovery.block and waited >= SUPER_POD_STAGE:
        widened = _same_blocks(fault, failed, recovery.block)
    # The master in a widened block deleted: the whole job (isMasterFaultWithSuperPodJob).
    return None if widened & masters else widened


def refill_stage(recovery: Recovery, waited: float) -> str | None:
    """Where an Atlas 950 job's faulty ranks go again after it has waited ``waited`` seconds
    (``chip8node8ra64sp/reschedule.go`` selectNodesForFaultJob, ``const.go`` stages 3 and 6):
    into their old racks, then each ra-block into one rack; None (not such a job, or a
    pod-level one past the SuperPoD stage): as any job's missing ranks. A process-level job
    never reaches the SuperPoD stage (its count turns back at 6, processPendingRules)."""
    if not recovery.ra_block:
        return None
    if waited < RA_BLOCK_STAGE:
        return racks.SAME_RACK
    if recovery.process or waited < SUPER_POD_STAGE:
        return racks.WHOLE_RACK
    return None


def fault_rank_ids(pod: JobPod, failed: Collection[int]) -> list[int]:
    """Upstream's FaultRankIds of a pod's failed chips: a chip's place among the pod's own
    chips (sorted) plus the pod's rank × its chip count, so a 16-chip A3 pod's ranks do not
    overlap (Ascend/mind-cluster 7934f67c ``component/ascend-for-volcano/internal/
    rescheduling/reschedule.go`` getJobRankIdsFromTasks, getTaskUsedFaultCards; master's
    ``rescheduling/task.go`` initFaultRankIndex counts ranks the same way)."""
    chips = sorted(pod.chips)
    return sorted(chips.index(c) + len(chips) * pod.rank for c in failed)


def deletions(fault: FaultJob, seen: float, now: float, grace_over: float) -> list[Deletion]:
    """The deletions that restart the job, or only the pods ``scope`` names: each pod not
    yet deleted, and once the grace is over (or at once for ``force``) each still there."""
    at_once = fault.mode == FORCE or now - seen >= grace_over
    ranks = scope(fault, now - seen)
    if ranks is None:
        what = "every pod of the job is deleted so that it restarts"
    else:
        what = f"only rank(s) {', '.join(map(str, sorted(ranks)))} are placed again"
    why = f"fault job {fault.job} ({fault.mode}): failed chips on {', '.join(fault.nodes)}; {what}"
    return [
        Deletion(p.namespace, p.name, p.uid, 0 if at_once else None, why)
        for p in fault.pods
        if (at_once or not p.terminating) and (ranks is None or p.rank in ranks)
    ]


def _with_check_code(data: dict[str, str]) -> dict[str, str]:
    return {**data, "checkCode": hashlib.sha256(go_json(data).encode()).hexdigest()}


def retry_limit(labels: Mapping[str, str]) -> int | None:
    """The job's ``fault-retry-times`` (None without the label); InvalidInput names a value
    that is not a number of restarts."""
    text = labels.get(FAULT_RETRY_LABEL)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit() and int(text) <= MAX_RETRIES):
        raise InvalidInput(f"{FAULT_RETRY_LABEL} {text!r} is not a number in 0..{MAX_RETRIES}")
    return int(text)


def record(
    faults: Iterable[tuple[FaultJob, float]], retries: Mapping[str, int] | None = None
) -> dict[str, str]:
    """``vcjob-fault-npu-cm`` data: the fault nodes, the 8-chip fault jobs and the restarts
    each ``fault-retry-times`` job has left (job → ``{"Times": n}``), with checkCode."""
    faults = list(faults)
    nodes = sorted({n for f, _ in faults for n in f.nodes})
    jobs = [
        {
            "JobName": f.job,
            "FaultNodes": list(f.nodes),
            "FaultRankIds": [str(r) for r in f.rank_ids],
            "FaultStrategy": f.mode,
            "RankNodes": {str(r): n for r, n in f.previous.items()},
            "UpdateTime": int(seen),
        }
        for f, seen in faults
    ]
    data = {"fault-node": go_json(nodes), "fault-job-910x8": go_json(jobs)}
    if retries:
        data[RETRIES_KEY] = go_json({job: {"Times": n} for job, n in retries.items()})
    return _with_check_code(data)


def restore_retries(data: Mapping[str, str]) -> dict[str, int]:
    """The restarts left per job in a verified ``vcjob-fault-npu-cm``; InvalidInput says
    what is wrong."""
    try:
        raw = json.loads(data.get(RETRIES_KEY, "{}"))
        retries = {str(job): int(entry["Times"]) for job, entry in raw.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as bad:
        raise InvalidInput(f"{FAULT_RECORD[1]} {RETRIES_KEY} is malformed: {bad!r}") from None
    if any(not 0 <= n <= MAX_RETRIES for n in retries.values()):
        raise InvalidInput(f"{FAULT_RECORD[1]} {RETRIES_KEY}: a count is not in 0..{MAX_RETRIES}")
    return retries


def restore(data: Mapping[str, str]) -> list[tuple[FaultJob, float]]:
    """The fault jobs of a ``vcjob-fault-npu-cm`` this scheduler wrote before it restarted
    (when each was seen); InvalidInput names what is wrong with it."""
    if not verify(data):
        raise InvalidInput(f"{FAULT_RECORD[1]}: checkCode does not match the content")
    try:
        faults = []
        for entry in json.loads(data.get("fault-job-910x8", "[]")):
            namespace, _ = str(entry["JobName"]).split("/", 1)
            pods = tuple(
                JobPod(namespace, "", "", str(node), int(rank), ())
                for rank, node in sorted(entry["RankNodes"].items(), key=lambda i: int(i[0]))
            )
            fault = FaultJob(
                str(entry["JobName"]),
                str(entry["FaultStrategy"]),
                pods,
                tuple(str(n) for n in entry["FaultNodes"]),
                tuple(int(r) for r in entry["FaultRankIds"]),
            )
            faults.append((fault, float(entry["UpdateTime"])))
    except (ValueError, KeyError, TypeError, AttributeError) as bad:
        raise InvalidInput(f"{FAULT_RECORD[1]} fault-job-910x8 is malformed: {bad!r}") from None
    return faults


def fault_config(fault: FaultJob, created: float) -> dict[str, str]:
    """``fault-config-<job>`` data in the job's namespace: ``fault-npus`` and checkCode."""
    # Struct field order of upstream (FaultRankIds, CreatTime): written by hand.
    npus = (
        '{"FaultRankIds":'
        + go_json([str(r) for r in fault.rank_ids])
        + ',"CreatTime":'
        + str(int(created))
        + "}"
    )
    return {"fault-npus": npus, "checkCode": hashlib.sha256(npus.encode()).hexdigest()}


def verify(data: Mapping[str, str]) -> bool:
    """True when a ``vcjob-fault-npu-cm`` content matches its checkCode."""
    rest = {k: v for k, v in data.items() if k != "checkCode"}
    return data.get("checkCode") == _with_check_code(rest)["checkCode"]


# ``reset-config-<job>``: the user creates it with the job (label ``reset=true``, key
# ``reset.json``); the device plugin, ClusterD and Volcano update it, and TaskD / the elastic
# agent in the job's containers read it (Ascend/mind-cluster component/ascend-for-volcano/
# plugin/type.go TaskResetInfo, ResetInfoCMNamePrefix, ResetInfoCMDataKey, ResetInfoTypeKey).
RESET_CONFIG_PREFIX = "reset-config-"
RESET_DATA_KEY = "reset.json"
RESET_TYPE_KEY = "restartType"
POD_RESCHEDULE = "podReschedule"
GRACE_EXIT = 1  # plugin/const.go GraceExitValue


def _go_bool(value: object) -> str:
    return "true" if value else "false"


def _go_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{RESET_DATA_KEY}: {what} {value!r} is not a whole number")
    return value


def _rank_entry(entry: object) -> str:
    """One ``TaskDevInfo`` in Go's field order (RankId, then DevFaultInfo's fields)."""
    if not isinstance(entry, dict):
        raise InvalidInput(f"{RESET_DATA_KEY}: a RankList entry is not an object")
    codes = entry.get("ErrorCode")
    if codes is not None and not isinstance(codes, list):
        raise InvalidInput(f"{RESET_DATA_KEY}: ErrorCode is not a list")
    error_code = "null" if codes is None else go_json([_go_int(c, "ErrorCode") for c in codes])
    return (
        f'{{"RankId":{_go_int(entry.get("RankId", 0), "RankId")},'
        f'"LogicId":{_go_int(entry.get("LogicId", 0), "LogicId")},'
        f'"Status":{go_json(str(entry.get("Status", "")))},'
        f'"Policy":{go_json(str(entry.get("Policy", "")))},'
        f'"InitialPolicy":{go_json(str(entry.get("InitialPolicy", "")))},'
        f'"ErrorCode":{error_code},'
        f'"ErrorCodeHex":{go_json(str(entry.get("ErrorCodeHex", "")))}}}'
    )


def reset_config(
    data: Mapping[str, str],
    now: float,
    *,
    pod_level: bool | None = None,
    graceful_exit: int | None = None,
) -> dict[str, str]:
    """The data of a ``reset-config-<job>`` after Volcano's update, from its current data;
    InvalidInput when ``reset.json`` is missing or malformed (then nothing is written, as
    upstream). ``pod_level`` (the job was placed again): ``plugin/job.go`` updateResetCm
    (``RankList`` emptied, ``UpdateTime`` now, ``RetryTime`` + 1 when only its faulty pods
    were placed, else 0; ``restartType: podReschedule``). ``graceful_exit``: ``rescheduling/
    reschedule.go`` updateResetConfigMapWithGraceExit (``GracefulExit`` set, no
    restartType). Like Go's ``json.Unmarshal`` into ``TaskResetInfo``, fields it does not
    know are dropped; ``checkCode`` is the SHA-256 of the new ``reset.json``."""
    text = data.get(RESET_DATA_KEY)
    if text is None:
        raise InvalidInput(f"no {RESET_DATA_KEY} key")
    try:
        raw = json.loads(text)
    except ValueError as bad:
        raise InvalidInput(f"{RESET_DATA_KEY} is not JSON: {bad}") from None
    if not isinstance(raw, dict):
        raise InvalidInput(f"{RESET_DATA_KEY} is not an object")
    # Go matches field names without regard to case.
    fields = {str(k).lower(): v for k, v in raw.items()}
    ranks = fields.get("ranklist")  # null or absent: Go's nil slice, written null
    if ranks is not None and not isinstance(ranks, list):
        raise InvalidInput(f"{RESET_DATA_KEY}: RankList is not a list")
    update = _go_int(fields.get("updatetime", 0), "UpdateTime")
    retry = _go_int(fields.get("retrytime", 0), "RetryTime")
    grace = _go_int(fields.get("gracefulexit", 0), "GracefulExit")
    rank_list = "null" if ranks is None else "[" + ",".join(map(_rank_entry, ranks)) + "]"
    if pod_level is not None:
        rank_list, update = "[]", int(now)
        retry = retry + 1 if pod_level else 0
    if graceful_exit is not None:
        grace = graceful_exit
    body = (
        f'{{"RankList":{rank_list},"UpdateTime":{update},"RetryTime":{retry},'
        f'"FaultFlushing":{_go_bool(fields.get("faultflushing"))},"GracefulExit":{grace},'
        f'"RestartFaultProcess":{_go_bool(fields.get("restartfaultprocess"))}}}'
    )
    out = {"checkCode": hashlib.sha256(body.encode()).hexdigest(), RESET_DATA_KEY: body}
    if pod_level is not None:
        out[RESET_TYPE_KEY] = POD_RESCHEDULE
    return out
