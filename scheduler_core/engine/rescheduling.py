"""Fault rescheduling of multi-node jobs (Volcano plugin v5
``internal/rescheduling``). Pure.

A running job labelled ``fault-scheduling: grace|force`` whose pod sits on a failed chip
(``-Unhealthy`` or, the job being distributed, ``-NetworkUnhealthy``) or on a node that no
longer publishes a valid DeviceInfo is a *fault job*. Like upstream, a pod's chips come only
from its ``huawei.com/AscendReal`` annotation. Every pod of the job is deleted so the job
restarts: ``force`` at once (grace 0, UID precondition); ``grace`` with each pod's own grace
period, then at once if pods remain ``grace-over-time`` (900 s) after the fault was seen.
When the job's pods come back, healthy ranks return to their nodes and the faulty ones move
(the extender does that with ``FaultJob.previous``).

The record ``volcano-system/vcjob-fault-npu-cm`` and the job's ``fault-config-<job>``
carry a ``checkCode``: SHA-256 of the Go JSON of the rest of the content.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from contract.annotations import FAULT_RECORD, FAULT_RETRY_LABEL
from contract.chip_names import InvalidInput
from contract.go_json import go_json

GRACE, FORCE = "grace", "force"
GRACE_OVER_TIME = 900.0
MAX_RETRIES = 1000
RETRIES_KEY = "remain-retry-times"


@dataclass(frozen=True, slots=True)
class JobPod:
    namespace: str
    name: str
    uid: str
    node: str
    rank: int
    chips: tuple[int, ...]
    terminating: bool = False  # deleted already, its grace period running


@dataclass(frozen=True, slots=True)
class FaultJob:
    job: str  # namespace/name
    mode: str  # grace or force
    pods: tuple[JobPod, ...]
    nodes: tuple[str, ...]  # nodes with a failed chip or no valid DeviceInfo
    rank_ids: tuple[int, ...]  # failed chips as upstream's FaultRankIds

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
    failed_chips: Mapping[str, frozenset[int]],
    down: Collection[str],
) -> list[FaultJob]:
    """The fault jobs among running jobs (job → (fault-scheduling mode, its pods)): a pod
    fails with a chip its node reports unhealthy (``failed_chips``), or with all its chips
    when the node is ``down``; a node in neither is judged at the next view."""
    faults = []
    for job, (mode, pods) in sorted(jobs.items()):
        if mode not in (GRACE, FORCE):
            continue
        members = tuple(sorted(pods, key=lambda p: p.rank))
        bad_nodes: list[str] = []
        rank_ids: list[int] = []
        for pod in members:
            if pod.node in down:
                failed = set(pod.chips)
            elif pod.node in failed_chips:
                failed = set(pod.chips) & failed_chips[pod.node]
            else:
                continue
            if failed:
                bad_nodes.append(pod.node)
                rank_ids += fault_rank_ids(pod, failed)
        if bad_nodes:
            faults.append(FaultJob(job, mode, members, tuple(bad_nodes), tuple(rank_ids)))
    return faults


def fault_rank_ids(pod: JobPod, failed: Collection[int]) -> list[int]:
    """Upstream's FaultRankIds of a pod's failed chips: a chip's place among the pod's own
    chips (sorted) plus the pod's rank × its chip count, so a 16-chip A3 pod's ranks do not
    overlap (Ascend/mind-cluster 7934f67c ``component/ascend-for-volcano/internal/
    rescheduling/reschedule.go`` getJobRankIdsFromTasks, getTaskUsedFaultCards; master's
    ``rescheduling/task.go`` initFaultRankIndex counts ranks the same way)."""
    chips = sorted(pod.chips)
    return sorted(chips.index(c) + len(chips) * pod.rank for c in failed)


def deletions(fault: FaultJob, seen: float, now: float, grace_over: float) -> list[Deletion]:
    """The deletions that restart the job: every pod not yet deleted, and once the grace is
    over (or at once for ``force``) every pod still there."""
    at_once = fault.mode == FORCE or now - seen >= grace_over
    why = (
        f"fault job {fault.job} ({fault.mode}): failed chips on {', '.join(fault.nodes)}; "
        "every pod of the job is deleted so that it restarts"
    )
    return [
        Deletion(p.namespace, p.name, p.uid, 0 if at_once else None, why)
        for p in fault.pods
        if at_once or not p.terminating
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
