"""fault-retry-times restarts: one restart per failure of a job, however many of its pods
failed together, and every one of them deleted with the job's live pods."""

from __future__ import annotations

from contract.groups import KUEUE_GROUP_LABEL, KUEUE_TOTAL_ANNOTATION
from contract.pods import PodView, pod_view
from scheduler_core.service.fault_restarts import FaultRestarts
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
