"""The robustness run, short and seeded: faults of every kind over the whole simulated
cluster with two elected scheduler replicas, the invariants checked all along
(``simulation/robustness.py``; the long runs are ``benchmarks/robustness.py``)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from benchmarks.figures import load_timeline
from simulation import robustness, workload
from simulation.fault_schedule import FAULT_KINDS, Schedule
from simulation.robustness import describe, run_schedule, timeline
from simulation.workload import SHAPES


@pytest.mark.parametrize("seed", [11, 12])
def test_a_short_seeded_run_breaks_no_invariant(seed: int, tmp_path: Path) -> None:
    schedule = Schedule.draw(seed, 25, 3)
    report = run_schedule(schedule, tmp_path)
    assert report.violations == [], describe(report) + "\n" + schedule.dump()
    assert report.checks > 0
    # Each kind of job submitted ran, training jobs on the A3 SuperPoD servers among them (the
    # run says so too: a kind never placed is a violation).
    assert {k for k, n in report.submitted.items() if n} == set(SHAPES), describe(report)
    assert all(report.started[k] > 0 for k in SHAPES), describe(report)
    assert sum(report.faults.values()) == len(schedule.faults) >= 3
    # The timeline the robustness figure is drawn from: every fault as it struck, a leader
    # from the start, the pods about once a second; and it reads back as the figure reads it.
    struck = [e.detail for e in report.events if e.what == "fault"]
    assert sorted(struck) == sorted(f.kind for f in schedule.faults)
    assert report.events[0].what == "leader" and report.events[0].detail
    assert all(b.at - a.at >= 1.0 for a, b in pairwise(report.samples))
    assert len(report.samples) >= schedule.seconds / 4
    path = tmp_path / "timeline.json"
    path.write_text(timeline(report))
    assert len(load_timeline(path).events) == len(report.events)


REGRESSIONS = sorted((Path(__file__).parents[1] / "data" / "robustness").glob("*.json"))


@pytest.mark.parametrize("recorded", REGRESSIONS, ids=lambda p: p.stem)
def test_a_schedule_that_once_broke_an_invariant_breaks_none(
    recorded: Path, tmp_path: Path
) -> None:
    schedule = Schedule.load(recorded)
    report = run_schedule(schedule, tmp_path)
    assert report.violations == [], describe(report)


def test_a_schedule_is_written_and_read_back_whole(tmp_path: Path) -> None:
    schedule = Schedule.draw(5, 600, 6)
    assert {f.kind for f in schedule.faults} == set(FAULT_KINDS), "every kind is drawn"
    path = tmp_path / "schedule.json"
    path.write_text(schedule.dump())
    assert Schedule.load(path) == schedule
    assert Schedule.draw(5, 600, 6) == schedule, "the seed alone decides it"


def test_a_kind_of_job_never_placed_is_a_violation_naming_the_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workload as it was before it wrote what A3 SuperPoD jobs carry: its training jobs
    had no selector and no sp-block, and none was ever placed while the run said nothing."""
    monkeypatch.setattr(workload, "a3_super_pod_job", lambda shape, npu: ({}, {}))
    monkeypatch.setattr(workload, "BACKLOG", 4)  # the four kinds of training job at once
    monkeypatch.setattr(robustness, "DRAIN", 4.0)
    schedule = Schedule(seed=3, seconds=8, nodes=3, faults=(), inference_nodes=1, network=True)
    report = run_schedule(schedule, tmp_path)
    never = {v.evidence.split(":", 1)[0]: v for v in report.violations}
    assert set(never) == {"one", "gang", "tor-gang", "sp-gang"}, describe(report)
    assert {v.invariant for v in never.values()} == {"every kind of job submitted is placed"}
    # The evidence names what the scheduler answered: the 910 module handler refusing the
    # A3 SuperPoD servers, the A3 x16 SuperPoD handler asking 16 chips a task.
    assert "the job's handler module910x8 serves" in never["one"].evidence
    assert "should be equal to node npu(16)" in never["sp-gang"].evidence
    assert report.started["vnpu"] > 0
