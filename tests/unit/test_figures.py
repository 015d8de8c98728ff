"""The figures the docs show exist, and redraw from the benchmarks' committed results."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from benchmarks import figures
from benchmarks.figures import (
    FIGURES,
    FigureDataError,
    PlacementResult,
    ReplayRun,
    TimelineEvent,
    TimelineSample,
    deltas,
    draw_all,
    fault_spans,
    gaps,
    leader_spans,
    load_replay,
)
from benchmarks.replay import QueueMode, replay
from benchmarks.trace_replay import DATA as ITP
from benchmarks.trace_replay import PLACEMENTS, load, quantiles

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
SVG = "{http://www.w3.org/2000/svg}"


def images() -> list[tuple[Path, Path]]:
    """(page, image) for every image a page shows from the repository."""
    return [
        (page, (page.parent / target).resolve())
        for page in PAGES
        for target in IMAGE.findall(page.read_text())
        if not re.match(r"^[a-z]+:", target)
    ]


def texts(svg: Path) -> list[str]:
    """The words an SVG shows (its figures keep text as text)."""
    root = ET.parse(svg).getroot()
    assert root.tag == f"{SVG}svg"
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def test_every_image_the_docs_show_exists() -> None:
    shown = images()
    assert shown
    missing = [f"{p.name}: {i}" for p, i in shown if not i.is_file() or i.stat().st_size == 0]
    assert missing == []


def test_every_figure_drawn_is_committed_and_shown() -> None:
    shown = {image for _, image in images()}
    for name in FIGURES:
        assert (figures.OUT / name).resolve() in shown, f"{name} is shown on no page"


def test_the_figures_redraw_from_the_committed_data_and_say_what_the_committed_ones_say(
    tmp_path: Path,
) -> None:
    written = draw_all(figures.DATA, tmp_path)
    assert sorted(p.name for p in written) == sorted(FIGURES)
    for path in written:
        drawn = texts(path)
        assert drawn, f"{path.name} shows no text"
        # A figure redrawn from the same data says the same: a stale committed one does not.
        assert drawn == texts(figures.OUT / path.name), f"{path.name} is not redrawn"


def test_the_committed_replay_results_are_what_the_replay_gives() -> None:
    run = next(
        r
        for r in load_replay(figures.DATA / "trace_replay.json")
        if (r.trace, r.nodes, r.mode) == ("cluster07", 40, "backfill")
    )
    result = replay(
        load(ITP / "npu_jobs_cluster07.csv"), 40, PLACEMENTS["huawei"], QueueMode.BACKFILL
    )
    committed = run.placements["huawei"]
    assert committed.mean_s == round(result.overall.mean, 1)
    assert committed.blocked == result.fragmentation_blocked
    assert list(committed.wait_quantiles_s) == quantiles(result.waits)


def test_the_deltas_are_against_huawei() -> None:
    def result(mean_s: float, blocked: int) -> PlacementResult:
        return PlacementResult(mean_s, 0.0, blocked, ())

    run = ReplayRun(
        "t", 8, "fifo", {"huawei": result(200, 10), "binpack": result(190, 14), "x": result(230, 7)}
    )
    assert deltas(run) == {"binpack": (-5.0, 4), "x": (15.0, -3)}


def test_fault_spans_pair_each_end_with_its_fault_and_leaders_cover_the_run() -> None:
    events = [
        TimelineEvent(0.5, "leader", "replica-0"),
        TimelineEvent(2.0, "fault", "api-down"),
        TimelineEvent(3.0, "fault", "api-down"),
        TimelineEvent(3.5, "fault", "watches-cut"),  # ends nothing: no span
        TimelineEvent(5.0, "ended", "api-down"),
        TimelineEvent(6.0, "leader", ""),
        TimelineEvent(7.0, "ended", "api-down"),
        TimelineEvent(9.0, "leader", "replica-1"),
    ]
    assert fault_spans(events) == {"api-down": [(2.0, 5.0), (3.0, 7.0)]}
    assert leader_spans(events, 12.0) == [
        ("replica-0", 0.5, 6.0),
        ("", 6.0, 9.0),
        ("replica-1", 9.0, 12.0),
    ]


def test_the_timeline_shows_where_no_check_ran() -> None:
    samples = [TimelineSample(t, 0, 0, 0) for t in (0.0, 1.0, 2.1, 9.0, 10.0, 12.4)]
    assert gaps(samples) == [(2.1, 9.0)]


def test_missing_or_malformed_data_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "trace_replay.json").write_text('{"runs": [{"trace": "x"}]}')
    with pytest.raises(FigureDataError, match="not what trace_replay --json writes"):
        load_replay(tmp_path / "trace_replay.json")
    monkeypatch.setattr(
        sys, "argv", ["figures", "--data", str(tmp_path / "none"), "--out", str(tmp_path)]
    )
    with pytest.raises(SystemExit) as exited:
        figures.main()
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("error: ") and error.count("\n") == 1
