"""The trace replay: queueing, gangs, fragmentation accounting, and the shipped ITP data."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.replay import Fleet, QueueMode, TraceJob, replay
from benchmarks.trace_replay import load
from contract.chip_names import InvalidInput
from scheduler_core.engine.policies import BINPACK, HUAWEI, POLICIES, Policy

DATA = Path(__file__).parents[2] / "benchmarks" / "data" / "itp"


def tj(idx: int, submit: float, duration: float, chips: int) -> TraceJob:
    pods = chips // 8 if chips > 8 else 1
    return TraceJob(idx, submit, duration, min(chips, 8), pods)


@pytest.mark.parametrize("policy", [HUAWEI, BINPACK])
def test_a_second_whole_node_job_waits_for_the_first_to_end(policy: Policy) -> None:
    result = replay([tj(0, 0, 10, 8), tj(1, 0, 10, 8)], nodes=1, policy=policy)
    assert result.overall.mean == 5.0
    assert result.makespan == 20.0


def test_fifo_blocks_behind_the_head_and_backfill_lets_small_jobs_pass() -> None:
    jobs = [tj(0, 0, 10, 4), tj(1, 1, 10, 8), tj(2, 2, 1, 1)]
    fifo = replay(jobs, nodes=1, policy=HUAWEI, mode=QueueMode.FIFO)
    backfill = replay(jobs, nodes=1, policy=HUAWEI, mode=QueueMode.BACKFILL)
    # FIFO: the 8-chip job starts at 10, the 1-chip job behind it at 20 (waits 18).
    assert fifo.by_class["1"].mean == 18.0
    assert backfill.by_class["1"].mean == 0.0


def test_a_gang_starts_only_when_all_its_nodes_are_free() -> None:
    jobs = [tj(0, 0, 30, 1), tj(1, 1, 5, 16)]
    result = replay(jobs, nodes=2, policy=HUAWEI)
    assert result.by_class["8N"].mean == 29.0


def test_a_job_blocked_by_split_rings_counts_as_fragmentation_blocked() -> None:
    # Rings after t=5: ring 0 has chips 2,3 free, ring 1 has 6,7: four free, no ring of 4.
    jobs = [tj(0, 0, 100, 2), tj(1, 0, 5, 2), tj(2, 0, 100, 2), tj(3, 6, 10, 4)]
    result = replay(jobs, nodes=1, policy=HUAWEI)
    assert result.fragmentation_blocked == 1
    assert result.by_class["4"].mean == 94.0


def test_a_job_larger_than_the_cluster_stays_unplaced() -> None:
    result = replay([tj(0, 0, 5, 24)], nodes=2, policy=HUAWEI)
    assert result.unfinished == 1
    assert result.overall.count == 0


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_a_week_of_the_itp_trace_replays_with_no_rule_broken(policy: str) -> None:
    jobs = load(DATA / "npu_jobs_cluster04_first7d.csv")
    assert len(jobs) == 1823
    result = replay(jobs, nodes=80, policy=POLICIES[policy])
    assert result.violations == 0
    assert result.unfinished == 0
    assert result.overall.count == len(jobs)


POLICY = "huawei.com/schedule_policy"


def test_the_replay_routes_its_jobs_by_the_policy_onto_the_labelled_nodes() -> None:
    # chip8-node8 on module-910b-8 servers: the 910B handler takes 3 chips and 5 more beside
    # them on one node; 910 x8's rings (the replay's one product before) refuse 3.
    fleet = Fleet({"accelerator-type": "module-910b-8"}, {POLICY: "chip8-node8"})
    jobs = [TraceJob(0, 0, 10, 3, 1), TraceJob(1, 0, 10, 5, 1)]
    result = replay(jobs, nodes=1, policy=HUAWEI, fleet=fleet)
    assert result.unfinished == 0 and result.overall.mean == 0.0


@pytest.mark.parametrize(
    ("fleet", "error"),
    [
        (
            Fleet(job_annotations={POLICY: "chip9-node9"}),
            "'chip9-node9' names no MindCluster handler",
        ),
        (
            Fleet(job_annotations={POLICY: "chip8-node8"}),
            "module910bx8 does not serve module910x8 nodes",
        ),
        (Fleet(resource="huawei.com/npu"), "huawei.com/npu asks for a huawei.com/schedule_policy"),
    ],
)
def test_a_replay_no_handler_serves_is_refused_naming_why(fleet: Fleet, error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        replay([TraceJob(0, 0, 10, 1, 1)], nodes=1, policy=HUAWEI, fleet=fleet)
