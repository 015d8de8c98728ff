"""The robustness run, short and seeded: faults of every kind over the whole simulated
cluster with two elected scheduler replicas, the invariants checked all along
(``simulation/robustness.py``; the long runs are ``benchmarks/robustness.py``)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest

from benchmarks.figures import load_timeline
from simulation.fault_schedule import FAULT_KINDS, Schedule
from simulation.robustness import describe, run_schedule, timeline


@pytest.mark.parametrize("seed", [11, 12])
def test_a_short_seeded_run_breaks_no_invariant(seed: int, tmp_path: Path) -> None:
    schedule = Schedule.draw(seed, 25, 3)
    report = run_schedule(schedule, tmp_path)
    assert report.violations == [], describe(report) + "\n" + schedule.dump()
    assert report.placed > 0 and report.checks > 0
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
