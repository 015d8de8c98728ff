"""Fault jobs being restarted: found in each view, their pods deleted, their healthy nodes
held until the job is placed again (or for at most ``hold_limit`` seconds), and recorded in
``vcjob-fault-npu-cm`` and ``fault-config-<job>`` so a restarted scheduler resumes them."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Iterable, Mapping

from contract.annotations import FAULT_CONFIG_PREFIX
from scheduler_core.engine import rescheduling
from scheduler_core.engine.rescheduling import Deletion, FaultJob, JobPod

log = logging.getLogger(__name__)


class FaultRestarts:
    def __init__(self, hold_limit: float, grace_over: float) -> None:
        self._hold_limit = hold_limit
        self._grace_over = grace_over
        self._faults: dict[str, tuple[FaultJob, float]] = {}  # job → fault, when seen

    @property
    def active(self) -> bool:
        """Some fault job is being restarted (its deletions and hold run on the clock)."""
        return bool(self._faults)

    def get(self, job: str) -> FaultJob | None:
        known = self._faults.get(job)
        return known[0] if known else None

    def placed(self, job: str) -> None:
        """The job has been placed again: its nodes are no longer held for it."""
        self._faults.pop(job, None)

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
    ) -> list[Deletion]:
        """Find fault jobs among the running gangs of a view and say which pods to delete so
        they restart; forget a fault job that did not come back within the hold limit."""
        for fault in rescheduling.find_faults(running, failed, down):
            known = self._faults.get(fault.job)
            if known is not None and not any(p.uid for p in known[0].pods):
                self._faults[fault.job] = (fault, known[1])  # restored: now with its pods
            elif known is None:
                log.warning(
                    "fault job %s (%s): nodes %s, fault ranks %s",
                    fault.job,
                    fault.mode,
                    list(fault.nodes),
                    list(fault.rank_ids),
                )
                self._faults[fault.job] = (fault, now)
        for job, (_, seen) in list(self._faults.items()):
            gone = job not in pending and job not in running
            if gone and now - seen > self._hold_limit:
                log.warning("fault job %s did not come back; its nodes are free again", job)
                del self._faults[job]
        deletions = []
        for fault, seen in self._faults.values():
            _, members = running.get(fault.job, ("", []))
            still = {p.uid: p for p in members}  # the UIDs of the run that failed
            current = dataclasses.replace(
                fault, pods=tuple(still[p.uid] for p in fault.pods if p.uid in still)
            )
            deletions += rescheduling.deletions(current, seen, now, self._grace_over)
        return deletions

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
        return rescheduling.record(faults), configs
