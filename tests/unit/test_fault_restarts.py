"""fault-retry-times restarts: one restart per failure of a job, however many of its pods
failed together, and every one of them deleted with the job's live pods."""

from __future__ import annotations

from contract.groups import KUEUE_GROUP_LABEL, KUEUE_TOTAL_ANNOTATION
from contract.pods import PodView, pod_view
from scheduler_core.engine import rescheduling
from scheduler_core.engine.rescheduling import FORCE, JobPod, Recovery
from scheduler_core.service.state.fault_restarts import FaultRestarts, ResetUpdate
from simulation.memory import pod_object

JOB = "work/gang"


def member(rank: int, phase: str, generation: int = 0, retries: str = "1") -> PodView:
    pod = pod_object(
        "work",
        f"gang-{rank}",
        f"node-{rank}",
        8,
        phase=phase,
        labels={KUEUE_GROUP_LABEL: "gang", "fault-retry-times": retries},
        annotations={KUEUE_TOTAL_ANNOTATION: "2"},
    )
    pod["metadata"]["uid"] = f"uid-{rank}-{generation}"
    return pod_view(pod)


def test_a_gang_whose_pods_fail_together_restarts_once_and_loses_them_all() -> None:
    restarts = FaultRestarts(hold_limit=60, grace_over=900)
    failed = {p.key: p for p in (member(0, "Failed"), member(1, "Failed"))}
    deletions = restarts.retry(failed, lambda job: [], now=1.0)
    assert sorted(d.name for d in deletions) == ["gang-0", "gang-1"]
    assert restarts.retries == {JOB: 0}, "one restart, not one per pod"


def test_a_live_pod_failing_before_its_restart_deletes_it_is_the_same_failure() -> None:
    restarts = FaultRestarts(hold_limit=60, grace_over=900)
    running = member(1, "Running", retries="2")
    failed = {"work/gang-0": member(0, "Failed", retries="2")}
    first = restarts.retry(failed, lambda job: [running], now=1.0)
    assert sorted(d.name for d in first) == ["gang-0", "gang-1"]
    late = {**failed, "work/gang-1": member(1, "Failed", retries="2")}
    assert restarts.retry(late, lambda job: [], now=2.0) == []
    assert restarts.retries == {JOB: 1}, "one restart used of two"
    again = {"work/gang-0": member(0, "Failed", generation=1, retries="2")}
    assert [d.name for d in restarts.retry(again, lambda job: [], now=3.0)] == ["gang-0"]
    assert restarts.retries == {JOB: 0}


def test_a_pod_level_fault_job_deletes_one_pod_and_is_reset_as_pod_level_once_placed() -> None:
    restarts = FaultRestarts(hold_limit=60, grace_over=900)
    members = [
        JobPod("work", f"gang-{r}", f"u{r}", f"node-{r}", r, tuple(range(8))) for r in range(4)
    ]
    running = {JOB: (FORCE, members)}
    recoveries = {JOB: Recovery(pod_level=True)}
    failed = {"node-1": frozenset({4})}
    deletions = restarts.update(running, (), failed, (), 1.0, recoveries=recoveries)
    assert [d.name for d in deletions] == ["gang-1"]
    fault = restarts.get(JOB)
    assert fault is not None and fault.moving == frozenset({1})
    # Placed again: the reset-config update is due, as a pod-level one (RetryTime + 1).
    restarts.placed(JOB, {"pod-rescheduling": "on"})
    assert restarts.take_resets() == {JOB: ResetUpdate(pod_level=True)}
    assert restarts.take_resets() == {}
    restarts.placed(JOB, {"pod-rescheduling": "on", "process-recover-enable": "on"})
    assert restarts.take_resets() == {}, "ClusterD owns a process-level job's reset-config"
    restarts.placed(JOB, {"pod-rescheduling": "on"})
    assert restarts.take_resets() == {JOB: ResetUpdate(pod_level=False)}, "RetryTime 0"


def test_a_scheduler_restarted_mid_pod_level_recovery_places_only_the_missing_rank() -> None:
    first = FaultRestarts(hold_limit=60, grace_over=900)
    members = [
        JobPod("work", f"gang-{r}", f"u{r}", f"node-{r}", r, tuple(range(8))) for r in range(4)
    ]
    recoveries = {JOB: Recovery(pod_level=True)}
    failed = {"node-2": frozenset({1})}
    first.update({JOB: (FORCE, members)}, (), failed, (), 1.0, recoveries=recoveries)

    record, _ = first.records()
    # A new leader reads the record back; rank 2's pod is gone, the three others run.
    second = FaultRestarts(hold_limit=60, grace_over=900)
    second.restore(rescheduling.restore(record))
    survivors = [m for m in members if m.rank != 2]
    assert second.update({JOB: (FORCE, survivors)}, [JOB], {}, (), 2.0, recoveries=recoveries) == []
    fault = second.get(JOB)
    assert fault is not None and fault.moving == frozenset({2})
