"""What the watches report that can make or end a fault job: the nodes' failed chips and
their fault codes, nodes down, the jobs' silencing (``huawei.com/schedule.filter.*``), jobs
of one pod labelled ``fault-scheduling``, failed pods of ``fault-retry-times`` jobs; and
the fault restarts found in them (``fault_restarts.FaultRestarts``), whose holds the verbs
read. Fault jobs are looked for again only when some of it changed (or a silenced fault
shows, or a restart is under way). Kept under the extender's state lock
(``extender_state.ExtenderState``), which feeds it and calls it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping, Set

from contract.annotations import FAULT_SCHEDULING_LABEL
from contract.pods import PodView
from scheduler_core.engine import chip_faults, rescheduling
from scheduler_core.engine.chip_faults import NodeFaults, Silence
from scheduler_core.engine.rescheduling import Deletion, JobPod
from scheduler_core.service.state.cluster_view import NodeView
from scheduler_core.service.state.fault_restarts import FaultRestarts
from scheduler_core.service.state.gang_pods import GangPods, job_pod
from scheduler_core.service.state.jobs import JobSettings

log = logging.getLogger(__name__)


class FaultWatch:
    def __init__(self, hold_limit: float, grace_over: float) -> None:
        self.restarts = FaultRestarts(hold_limit, grace_over)
        self._down: set[str] = set()
        self.failed: dict[str, frozenset[int]] = {}  # node → its chips that stop a pod
        self._node_faults: dict[str, NodeFaults] = {}  # the failed chips' fault codes
        # Jobs that silence some faults, and when the first fault silenced now shows: the
        # fault jobs are looked for again then.
        self._silences: dict[str, Silence] = {}
        self._silence_ends: float | None = None
        self.stale = True  # fault jobs are looked for again at the next check
        # One-pod jobs labelled fault-scheduling: pod key → (mode, the bound pod)
        self._one_pod: dict[str, tuple[str, list[JobPod]]] = {}
        self._failed_pods: dict[str, PodView] = {}  # failed pods of fault-retry-times jobs
        self._warned: set[str] = set()  # jobs whose malformed recovery settings were logged
        self._bad_silence: set[str] = set()  # jobs whose malformed silencing was logged

    def set_node(self, name: str, view: NodeView | None) -> None:
        """A node's view now (None: no longer an NPU node)."""
        before = (self.failed.get(name), name in self._down)
        self.failed.pop(name, None)
        self._node_faults.pop(name, None)
        self._down.discard(name)
        if view is not None:
            if view.failed is not None:
                self.failed[name] = view.failed
            if view.faults is not None and view.faults.codes:
                self._node_faults[name] = view.faults
            if view.down:
                self._down.add(name)
        self.stale |= before != (self.failed.get(name), name in self._down)

    def set_pod(self, key: str, pod: PodView | None, settings: JobSettings | None) -> None:
        """A pod outside any gang, labelled ``fault-scheduling``, is a fault job of its own
        (``settings``: its job's, None when the pod is gone)."""
        old = self._one_pod.pop(key, None)
        annotations: Mapping[str, str] = {}
        if pod is not None and settings is not None and settings.gang is None:
            annotations = settings.annotations
            mode = settings.pod_labels(pod).get(FAULT_SCHEDULING_LABEL)
            if mode in (rescheduling.GRACE, rescheduling.FORCE):
                member = job_pod(pod, 0)
                if member is not None:
                    self._one_pod[key] = (mode, [member])
        self.stale |= old != self._one_pod.get(key)
        self.set_silence(key, annotations)

    def set_silence(self, job: str, annotations: Mapping[str, str]) -> None:
        """The job's silencing (kept only when it silences something); a malformed one is
        logged once and silences nothing, as ClusterD reports every fault then."""
        silence = chip_faults.silence_of(annotations)
        if isinstance(silence, str):
            if job not in self._bad_silence:
                log.warning("job %s: %s; no fault is silenced for it", job, silence)
                self._bad_silence.add(job)
            silence = Silence()
        else:
            self._bad_silence.discard(job)
        old = self._silences.pop(job, None)
        if silence.codes or silence.levels:
            self._silences[job] = silence
        self.stale |= old != self._silences.get(job)

    def pods_failed(self, pods: Mapping[str, PodView | None]) -> None:
        """Pods of ``fault-retry-times`` jobs that failed (None: such a pod is gone)."""
        came = False
        for key, pod in pods.items():
            if pod is None:
                self._failed_pods.pop(key, None)
            else:
                self._failed_pods[key] = pod
                came = True
        self.stale |= came

    def _failed_for(self, now: float) -> Callable[[str], Mapping[str, frozenset[int]]]:
        """The failed chips as each job sees them: its silenced faults younger than their
        window left out (ClusterD's custom_filter_fault_processor.go); notes when the first
        of those shows, to look again then."""

        def failed_for(job: str) -> Mapping[str, frozenset[int]]:
            silence = self._silences.get(job)
            if silence is None or not self._node_faults:
                return self.failed
            faults = {n: f for n, f in self._node_faults.items() if n in self.failed}
            end = chip_faults.silence_ends(silence, faults.values(), now)
            if end is not None:
                self._silence_ends = min(end, self._silence_ends or end)
            return {**self.failed, **chip_faults.job_failed_chips(silence, faults, now)}

        return failed_for

    def deletions(
        self,
        pods: GangPods,
        left_out: Collection[str],
        sub_healthy: Set[str],
        job_of: Callable[[PodView], JobSettings],
        now: float,
    ) -> list[Deletion]:
        """Find fault jobs in the last view and say which pods to delete so they restart.
        A fault job's healthy nodes stay held for it until it is placed again."""
        shows = self._silence_ends is not None and now >= self._silence_ends
        if not self.stale and not self.restarts.active and not shows:
            return []  # nothing changed that could make or end a fault: no scan
        self.stale = False
        self._silence_ends = None
        running = pods.running | self._one_pod
        on_nodes = {p.node for _, members in running.values() for p in members}
        down = self._down | {n for n in on_nodes if n not in self.failed and n not in left_out}
        deletions = self.restarts.update(
            running,
            pods.pending,
            self.failed,
            down,
            now,
            one_pod=self._one_pod.keys(),
            recoveries={
                job: self._recovery(pods, job, job_of)
                for job in running
                if job not in self._one_pod
            },
            sub_healthy=sub_healthy,
            failed_for=self._failed_for(now),
        )
        return deletions + self.restarts.retry(
            self._failed_pods,
            lambda job: pods.members.get(job, []),
            now,
            lambda pod: job_of(pod).pod_labels(pod),
        )

    def _recovery(
        self, pods: GangPods, job: str, job_of: Callable[[PodView], JobSettings]
    ) -> rescheduling.Recovery:
        """How a gang recovers from a fault, from its job's settings (its pods' NPUs turn
        ``sp-block`` and ``ra-block`` into pods)."""
        members = pods.members.get(job, [])
        npu = next((p for p in members if p.npu_limit), None)
        if npu is None:
            return rescheduling.Recovery()
        settings = job_of(npu)
        recovery, warning = rescheduling.recovery_of(
            settings.labels, settings.annotations, npu.npu_limit
        )
        if warning and job not in self._warned:  # once per job, not at every check
            log.warning("job %s: %s", job, warning)
            self._warned.add(job)
        elif not warning:
            self._warned.discard(job)
        return recovery
