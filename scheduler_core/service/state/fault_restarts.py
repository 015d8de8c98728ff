"""Fault jobs being restarted: found in each view, their pods deleted, their healthy nodes
held until the job is placed again (or for at most ``hold_limit`` seconds), and recorded in
``vcjob-fault-npu-cm`` and ``fault-config-<job>`` so a restarted scheduler resumes them."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from contract.annotations import FAULT_CONFIG_PREFIX, FAULT_RETRY_LABEL
from contract.chip_names import InvalidInput
from contract.pods import PodView
from scheduler_core.engine import rescheduling
from scheduler_core.engine.rescheduling import Deletion, FaultJob, JobPod, Recovery
from scheduler_core.service.state.live_view import gang_of

log = logging.getLogger(__name__)
Labels = Mapping[str, str]
# Kinds of restart (``ascend_scheduler_fault_restarts_total{kind}``, with ``gangs``' and the
# service's vNPU recovery).
FAULT_SCHEDULING, FAULT_RETRY, GANG_RESTART, VNPU = (
    "fault_scheduling",
    "fault_retry",
    "gang_restart",
    "vnpu",
)
RESTART_KINDS = (FAULT_SCHEDULING, FAULT_RETRY, GANG_RESTART, VNPU)


class FaultRestarts:
    def __init__(self, hold_limit: float, grace_over: float) -> None:
        self._hold_limit = hold_limit
        self._grace_over = grace_over
        self._faults: dict[str, tuple[FaultJob, float]] = {}  # job → fault, when seen
        self._one_pod: set[str] = set()  # fault jobs of one pod: no node to hold for them
        self.retries: dict[str, int] = {}  # job → restarts left of its fault-retry-times
        self._retry_seen: dict[str, float] = {}  # job → when it last had a pod
        self._counted: set[str] = set()  # UIDs of failed pods already acted on
        # UIDs a restart deletes (its live pods too: one failing before its deletion lands
        # is the same failure), with when.
        self._deleting: dict[str, float] = {}
        # Restarts begun since start, by kind (``ascend_scheduler_fault_restarts_total``):
        # a fault job found (``fault_scheduling``), a failure of a fault-retry-times job.
        self.restarted = {FAULT_SCHEDULING: 0, FAULT_RETRY: 0}
        self.resets: dict[str, ResetUpdate] = {}  # reset-config-<job> updates due

    @property
    def active(self) -> bool:
        """Some fault job is being restarted (its deletions and hold run on the clock)."""
        return bool(self._faults)

    def get(self, job: str) -> FaultJob | None:
        known = self._faults.get(job)
        return known[0] if known else None

    def waited(self, job: str, now: float) -> float:
        """Seconds since the fault job's faulty pods were deleted (0: no fault job)."""
        known = self._faults.get(job)
        return now - known[1] if known else 0.0

    def placed(self, job: str, labels: Labels | None = None) -> None:
        """The job has been placed (again): its nodes are no longer held for it. A
        ``pod-rescheduling: "on"`` job without process-level recovery has its
        ``reset-config-<job>`` updated, as Volcano does once all its tasks are placed
        (ascend-for-volcano ``plugin/job.go`` updateResetConfigMap, called from
        ``plugin/factory.go`` BeforeCloseHandler)."""
        known = self._faults.pop(job, None)
        if labels is None:
            return
        recovery, _ = rescheduling.recovery_of(labels, {})
        fault = known[0] if known else None
        if fault is not None and _grace_exit(fault):
            # Placed off its sub-healthy nodes: GracefulExit back to 0 (reschedule.go
            # synCacheFaultJobWithSession, resetGraceExitCode).
            self.resets[job] = ResetUpdate(graceful_exit=0)
        if recovery.pod_level and not recovery.process:
            # Only its faulty pods were placed: RetryTime + 1; the whole job: 0.
            pod_level = fault is not None and fault.moving is not None
            self.resets[job] = dataclasses.replace(
                self.resets.get(job, ResetUpdate()), pod_level=pod_level
            )

    def take_resets(self) -> dict[str, ResetUpdate]:
        """The jobs whose ``reset-config-<job>`` update is due, once each."""
        resets, self.resets = self.resets, {}
        return resets

    def holds(self, now: float) -> dict[str, str]:
        """Healthy nodes of restarting fault jobs (node → job), within the hold limit."""
        return {
            node: job
            for job, (fault, seen) in self._faults.items()
            if now - seen <= self._hold_limit
            for node in fault.previous.values()
            if node not in fault.nodes
        }

    def update(
        self,
        running: Mapping[str, tuple[str, list[JobPod]]],
        pending: Collection[str],
        failed: Mapping[str, frozenset[int]],
        down: Collection[str],
        now: float,
        *,
        one_pod: Collection[str] = (),
        recoveries: Mapping[str, Recovery] | None = None,
        sub_healthy: Collection[str] = (),
        failed_for: Callable[[str], Mapping[str, frozenset[int]]] | None = None,
    ) -> list[Deletion]:
        """Find fault jobs among the running jobs of a view (``one_pod``: those that are a
        single pod, not a gang; ``recoveries``: how each job recovers) and say which pods to
        delete so they restart; forget a fault job that did not come back within the hold
        limit (a process-level one within its ``wait-reschedule-timeout``, after which
        ClusterD gives up on it), a one-pod job once its pod is gone."""
        # ``failed_for``: the failed chips as one job sees them (its silenced faults left
        # out); without it every job sees the snapshot's ``failed``.
        faults = rescheduling.find_faults(
            running, failed_for or (lambda _job: failed), down, recoveries, sub_healthy
        )
        for fault in faults:
            if fault.job in one_pod:
                self._one_pod.add(fault.job)
            known = self._faults.get(fault.job)
            if known is not None and not any(p.uid for p in known[0].pods):
                self._faults[fault.job] = (fault, known[1])  # restored: now with its pods
            elif known is None:
                log.warning(
                    "fault job %s (%s): nodes %s, fault ranks %s, placed again: %s",
                    fault.job,
                    fault.mode,
                    list(fault.nodes),
                    list(fault.rank_ids),
                    "all" if fault.moving is None else sorted(fault.moving),
                )
                self._faults[fault.job] = (fault, now)
                self.restarted[FAULT_SCHEDULING] += 1
                if _grace_exit(fault):
                    # Save a checkpoint and exit before the pods are deleted (job.go
                    # deleteJobWithSubHealthyLabels, updateResetConfigMapWithGraceExit).
                    self.resets[fault.job] = ResetUpdate(graceful_exit=rescheduling.GRACE_EXIT)
        for job, (fault, seen) in list(self._faults.items()):
            gone = job not in pending and job not in running
            limit = fault.recovery.wait if fault.recovery.process else self._hold_limit
            if gone and job in self._one_pod:
                del self._faults[job]
                self._one_pod.discard(job)
            elif (gone or fault.moving is not None) and now - seen > limit:
                log.warning("fault job %s did not come back; its nodes are free again", job)
                del self._faults[job]
        deletions = []
        for job, (stored, seen) in list(self._faults.items()):
            _, members = running.get(job, ("", []))
            still = {p.uid: p for p in members}  # the UIDs of the run that failed
            current = dataclasses.replace(
                stored, pods=tuple(still[p.uid] for p in stored.pods if p.uid in still)
            )
            fault = stored
            if members and not any(p.uid for p in stored.pods) and job in (recoveries or {}):
                fault = _resumed(stored, (recoveries or {})[job], members)
            # The ranks placed again widen by stages while the job waits (``scope``).
            moving = rescheduling.scope(fault, now - seen)
            if moving != stored.moving:
                log.warning(
                    "fault job %s waited %.0f s: placed again now %s",
                    job,
                    now - seen,
                    "all" if moving is None else sorted(moving),
                )
            if (updated := dataclasses.replace(fault, moving=moving)) != stored:
                self._faults[job] = (updated, seen)
            deletions += rescheduling.deletions(current, seen, now, self._grace_over)
        return deletions

    def retry(
        self,
        failed: Mapping[str, PodView],
        members: Callable[[str], Sequence[PodView]],
        now: float,
        labels_of: Callable[[PodView], Mapping[str, str]] = lambda pod: pod.labels,
    ) -> list[Deletion]:
        """Pods that failed (phase Failed) in jobs labelled ``fault-retry-times``: the job
        restarts (its pods, the failed ones included, deleted at once) while it has restarts
        left, the pods that failed together counted one restart; ``members`` gives a gang's
        live pods, ``labels_of`` a pod's labels with its job's settings
        (``fault-retry-times`` may be its PodGroup's). A job without pods for the hold limit
        is forgotten."""
        self._counted &= {p.uid for p in failed.values()}
        with_pods = {_job_of(p) for p in failed.values()}
        for job in self.retries:
            if job in with_pods or members(job):
                self._retry_seen[job] = now
            else:
                self._retry_seen.setdefault(job, now)
        for job, seen in list(self._retry_seen.items()):
            if now - seen > self._hold_limit:
                del self._retry_seen[job]
                self.retries.pop(job, None)
        # The pods that failed together are one failure of their job: one restart, every
        # one of them deleted with the job's live pods (a gang whose pods the kubelet all
        # refused had been counted a restart per pod, and only the first deleted).
        by_job: dict[str, list[PodView]] = {}
        for pod in sorted(failed.values(), key=lambda p: p.key):
            by_job.setdefault(_job_of(pod), []).append(pod)
        self._deleting = {u: t for u, t in self._deleting.items() if now - t <= self._hold_limit}
        deletions = []
        for job, pods in sorted(by_job.items()):
            fresh = [p for p in pods if p.uid not in self._counted | self._deleting.keys()]
            self._counted |= {p.uid for p in pods}
            if not fresh:
                continue
            live = [p for p in members(job) if p.live]
            restart = self._restart(job, [*pods, *live], fresh[0], now, labels_of(fresh[0]))
            self._deleting |= {d.uid: now for d in restart}
            deletions += restart
        return deletions

    def _restart(
        self, job: str, pods: list[PodView], first: PodView, now: float, labels: Labels
    ) -> list[Deletion]:
        """One failure of a job (``first`` the first pod of it newly failed; ``pods`` those
        failed and those live): its restart, while it has restarts left."""
        try:
            limit = rescheduling.retry_limit(labels)
        except InvalidInput as bad:
            log.warning("pod %s failed; not restarted: %s", first.key, bad)
            return []
        if limit is None:  # its job asks for no restarts
            return []
        left = self.retries.get(job, limit or 0)
        self._retry_seen[job] = now
        if left <= 0:
            log.warning("pod %s failed; job %s has no restarts left", first.key, job)
            self.retries[job] = 0
            return []
        self.retries[job] = left - 1
        self.restarted[FAULT_RETRY] += 1
        why = (
            f"pod {first.key} failed: job {job} restarts "
            f"({left - 1} of {FAULT_RETRY_LABEL} {limit} left)"
        )
        log.warning("%s", why)
        targets = {p.key: p for p in pods}
        return [Deletion(p.namespace, p.name, p.uid, 0, why) for _, p in sorted(targets.items())]

    def restore_retries(self, retries: Mapping[str, int]) -> None:
        for job, left in retries.items():
            self.retries.setdefault(job, left)

    def restore(self, faults: Iterable[tuple[FaultJob, float]]) -> None:
        """Fault jobs recorded before this scheduler restarted (``vcjob-fault-npu-cm``)."""
        for fault, seen in faults:
            self._faults.setdefault(fault.job, (fault, seen))

    def records(self) -> tuple[dict[str, str], dict[tuple[str, str], dict[str, str]]]:
        """``vcjob-fault-npu-cm`` data and each fault job's ``fault-config-<job>``."""
        faults = list(self._faults.values())
        configs = {}
        for fault, seen in faults:
            namespace, name = fault.job.split("/", 1)
            configs[(namespace, FAULT_CONFIG_PREFIX + name)] = rescheduling.fault_config(
                fault, seen
            )
        return rescheduling.record(faults, self.retries), configs


@dataclass(frozen=True, slots=True)
class ResetUpdate:
    """What this scheduler updates in a job's ``reset-config-<job>``
    (``rescheduling.reset_config``): None, nothing of that."""

    pod_level: bool | None = None  # the job placed: only its faulty pods (True) or whole
    graceful_exit: int | None = None  # GracefulExit (graceExit of sub-healthy pods)


def _resumed(fault: FaultJob, recovery: Recovery, members: Iterable[JobPod]) -> FaultJob:
    """A fault job read back from ``vcjob-fault-npu-cm`` (which keeps no settings) while some
    of its pods still run: under pod- or process-level recovery, the ranks not running are
    the ones being placed again."""
    alive = {p.rank for p in members}
    gone = tuple(sorted(r for r in fault.previous if r not in alive))
    return dataclasses.replace(fault, recovery=recovery, failed=gone)


def _grace_exit(fault: FaultJob) -> bool:
    """A fault of sub-health alone under ``graceExit``, in a job ClusterD does not recover
    (its reset-config then carries GracefulExit)."""
    recovery = fault.recovery
    return (
        fault.sub_health
        and recovery.sub_healthy == rescheduling.GRACE_EXIT_STRATEGY
        and not recovery.process
    )


def _job_of(pod: PodView) -> str:
    """A failed pod's job: its gang, or the pod itself."""
    return gang_of(pod) or pod.key
