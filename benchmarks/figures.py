"""Draw docs/figures/ from the benchmarks' committed results (no benchmark is run here).

Run: ``.venv/bin/python -m benchmarks.figures`` (``--data DIR``, ``--out DIR``). Each figure
reads one file under ``benchmarks/data/`` that a benchmark wrote:

- ``trace_replay.json`` (``benchmarks.trace_replay --grid --json``): each placement's mean wait
  and fragmentation-blocked jobs as the difference from ``huawei``'s (the default), and the
  distribution of the jobs' waits;
- ``placement_speed.json`` (``benchmarks.placement_speed --json``): the distribution of one
  pod's decision time;
- ``robustness-timeline.json`` (``benchmarks.robustness --timeline``): a run's faults, their
  ends, the leader, the jobs restarted and the pods over time;

and the architecture picture is drawn from the layout below. SVG, written byte for byte the
same on every run of one matplotlib version (no date, a fixed hash salt), text kept as text.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
OUT = ROOT / "docs" / "figures"
BASELINE = "huawei"  # the default placement: the others are drawn as differences from it
COLOURS = {
    "huawei": "#4c72b0",
    "binpack": "#55a868",
    "dra-first-fit": "#c44e52",
    "dra-ladder": "#dd8452",
}


class FigureDataError(ValueError):
    """A results file is missing or not what its benchmark writes."""


# ---- the data ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlacementResult:
    mean_s: float
    p95_s: float
    blocked: int
    wait_quantiles_s: tuple[float, ...]  # at 0, 0.5, ..., 100 % of the jobs


@dataclass(frozen=True, slots=True)
class ReplayRun:
    trace: str
    nodes: int
    mode: str
    placements: Mapping[str, PlacementResult]


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    at: float
    what: str
    detail: str


@dataclass(frozen=True, slots=True)
class TimelineSample:
    at: float
    placed: int
    running: int
    waiting: int


@dataclass(frozen=True, slots=True)
class Timeline:
    seed: int
    seconds: float
    last_fault: float
    summary: str
    events: tuple[TimelineEvent, ...]
    samples: tuple[TimelineSample, ...]


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as failed:
        raise FigureDataError(f"{path}: {failed}") from None


def load_replay(path: Path) -> list[ReplayRun]:
    data = _read(path)
    try:
        return [
            ReplayRun(
                str(run["trace"]),
                int(run["nodes"]),
                str(run["mode"]),
                {
                    name: PlacementResult(
                        float(p["mean_s"]),
                        float(p["p95_s"]),
                        int(p["blocked"]),
                        tuple(float(q) for q in p["wait_quantiles_s"]),
                    )
                    for name, p in run["placements"].items()
                },
            )
            for run in data["runs"]
        ]
    except (KeyError, TypeError, ValueError, AttributeError) as failed:
        raise FigureDataError(f"{path}: not what trace_replay --json writes ({failed!r})") from None


def load_speed(path: Path) -> dict[str, dict[int, list[float]]]:
    """Per policy, per node count: each pod's decision time (ms) in order."""
    data = _read(path)
    try:
        return {
            policy: {int(nodes): [float(t) for t in times] for nodes, times in counts.items()}
            for policy, counts in data["ms"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError) as failed:
        raise FigureDataError(
            f"{path}: not what placement_speed --json writes ({failed!r})"
        ) from None


def load_timeline(path: Path) -> Timeline:
    data = _read(path)
    try:
        faults = data["schedule"]["faults"]
        return Timeline(
            int(data["schedule"]["seed"]),
            float(data["schedule"]["seconds"]),
            max((float(f["at"]) for f in faults), default=0.0),
            str(data["summary"]),
            tuple(
                TimelineEvent(float(e["at"]), str(e["what"]), str(e["detail"]))
                for e in data["events"]
            ),
            tuple(
                TimelineSample(
                    float(s["at"]), int(s["placed"]), int(s["running"]), int(s["waiting"])
                )
                for s in data["samples"]
            ),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as failed:
        raise FigureDataError(
            f"{path}: not what robustness --timeline writes ({failed!r})"
        ) from None


# ---- what is drawn (pure) ------------------------------------------------------------------


def deltas(run: ReplayRun) -> dict[str, tuple[float, int]]:
    """Each placement but the baseline: (mean wait minus the baseline's, in % of the
    baseline's; fragmentation-blocked jobs minus the baseline's)."""
    base = run.placements[BASELINE]
    return {
        name: (100 * (r.mean_s - base.mean_s) / base.mean_s, r.blocked - base.blocked)
        for name, r in run.placements.items()
        if name != BASELINE
    }


def fault_spans(events: Sequence[TimelineEvent]) -> dict[str, list[tuple[float, float]]]:
    """Per fault kind, (struck, ended) for faults whose end the run records; a fault still
    open at the end of the events runs to the last event. Same-kind faults end in the order
    they struck (their durations are drawn from one range, and the figure is at seconds)."""
    open_: dict[str, list[float]] = {}
    spans: dict[str, list[tuple[float, float]]] = {}
    for event in events:
        if event.what == "fault":
            open_.setdefault(event.detail, []).append(event.at)
        elif event.what == "ended" and open_.get(event.detail):
            spans.setdefault(event.detail, []).append((open_[event.detail].pop(0), event.at))
    return spans


def leader_spans(events: Sequence[TimelineEvent], end: float) -> list[tuple[str, float, float]]:
    """(leader or "" for none, from, to) over the run."""
    changes = [(e.at, e.detail) for e in events if e.what == "leader"]
    return [
        (name, at, changes[i + 1][0] if i + 1 < len(changes) else end)
        for i, (at, name) in enumerate(changes)
    ]


def gaps(samples: Sequence[TimelineSample], longest: float = 2.5) -> list[tuple[float, float]]:
    """Where the run took no sample (one a second while it checks): the API server away, or
    the harness not stepping."""
    return [(a.at, b.at) for a, b in pairwise(samples) if b.at - a.at > longest]


def cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """(sorted values, share of values ≤ each)."""
    ordered = sorted(values)
    return ordered, [(i + 1) / len(ordered) for i in range(len(ordered))]


def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


# ---- drawing -------------------------------------------------------------------------------


def _pyplot() -> Any:
    import matplotlib  # noqa: PLC0415 (a test extra: only when figures are drawn)

    matplotlib.use("Agg")
    matplotlib.rcParams.update(
        {"svg.hashsalt": "ascend-npu", "svg.fonttype": "none", "font.size": 8}
    )
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _save(figure: Figure, path: Path) -> None:
    figure.savefig(path, format="svg", metadata={"Date": None})
    _pyplot().close(figure)


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:,.1f} min"


def draw_replay_deltas(runs: Sequence[ReplayRun], path: Path) -> None:
    """Per trace, per setting: each placement's mean wait and blocked jobs minus huawei's."""
    plt = _pyplot()
    traces = sorted({r.trace for r in runs})
    figure, axes = plt.subplots(len(traces), 2, figsize=(10, 3.6 * len(traces)), squeeze=False)
    for row, trace in enumerate(traces):
        settings = sorted(
            (r for r in runs if r.trace == trace), key=lambda r: (r.mode != "backfill", r.nodes)
        )
        names = [n for n in settings[0].placements if n != BASELINE]
        height = 0.8 / len(names)
        for column, (unit, title, fewer) in enumerate(
            (
                ("%", "mean wait", "less waiting"),
                ("jobs", "jobs blocked by fragmentation", "fewer blocked"),
            )
        ):
            axis: Axes = axes[row][column]
            for k, name in enumerate(names):
                ys = [i + (k - (len(names) - 1) / 2) * height for i in range(len(settings))]
                values = [deltas(run)[name][column] for run in settings]
                bars = axis.barh(ys, values, height, color=COLOURS.get(name), label=name)
                axis.bar_label(
                    bars,
                    [f"{v:+.1f} %" if unit == "%" else f"{v:+d}" for v in values],
                    padding=2,
                    fontsize=6.5,
                )
            axis.axvline(0, color="black", linewidth=0.8)
            axis.set_yticks(
                range(len(settings)),
                [
                    f"{r.nodes} nodes, {r.mode}\n{BASELINE}: "
                    + (
                        _minutes(r.placements[BASELINE].mean_s)
                        if column == 0
                        else f"{r.placements[BASELINE].blocked:,} jobs"
                    )
                    for r in settings
                ],
            )
            axis.invert_yaxis()
            axis.margins(x=0.18)
            axis.grid(axis="x", linewidth=0.3)
            axis.set_xlabel(f"difference from {BASELINE} ({unit}); left of 0: {fewer}")
            axis.set_title(f"{trace}: {title}", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper right", ncol=len(labels), fontsize=7)
    figure.suptitle(
        f"ITP trace replay: each placement against {BASELINE} (the default)",
        x=0.02,
        ha="left",
        fontsize=10,
    )
    figure.tight_layout(rect=(0, 0, 1, 0.97))
    _save(figure, path)


def draw_replay_waits(runs: Sequence[ReplayRun], path: Path) -> None:
    """The distribution of the jobs' waits, each backfill setting, every placement."""
    plt = _pyplot()
    shown = [r for r in runs if r.mode == "backfill"]
    traces = sorted({r.trace for r in shown})
    columns = max(sum(r.trace == t for r in shown) for t in traces)
    figure, axes = plt.subplots(
        len(traces), columns, figsize=(3.4 * columns, 3.0 * len(traces)), squeeze=False
    )
    for row, trace in enumerate(traces):
        for column, run in enumerate(r for r in shown if r.trace == trace):
            axis: Axes = axes[row][column]
            for name, result in run.placements.items():
                hours = [q / 3600 for q in result.wait_quantiles_s]
                shares = [k / (len(hours) - 1) for k in range(len(hours))]
                at_once = max((s for h, s in zip(hours, shares, strict=True) if h == 0), default=0)
                axis.step(
                    hours,
                    shares,
                    where="post",
                    color=COLOURS.get(name),
                    linewidth=1.1,
                    label=f"{name}: p95 {result.p95_s / 3600:.1f} h, {100 * at_once:.0f} % at once",
                )
            axis.set_xscale("log")
            axis.set_xlim(1 / 60, None)  # from a minute: most jobs start at once (wait 0)
            axis.set_ylim(min(0.5, axis.get_ylim()[0]), 1.0)
            axis.grid(linewidth=0.3)
            axis.set_title(f"{trace}, {run.nodes} nodes, backfill", fontsize=9)
            axis.set_xlabel("wait (h, log scale)")
            if column == 0:
                axis.set_ylabel("share of jobs that waited ≤ x")
            axis.legend(loc="lower right", fontsize=6)
    figure.suptitle("ITP trace replay: the distribution of queueing delay", fontsize=10)
    figure.tight_layout()
    _save(figure, path)


def draw_decision_latency(speed: Mapping[str, Mapping[int, Sequence[float]]], path: Path) -> None:
    """Each pod's decision time (filter + score + place), as a CDF per policy and size."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(7, 4.4))
    for policy, counts in sorted(speed.items()):
        for nodes, times in sorted(counts.items()):
            later = times[1:]  # the first pod fills the per-signature caches
            xs, ys = cdf(later)
            axis.step(
                xs,
                ys,
                where="post",
                color=COLOURS.get(policy),
                linestyle="-" if nodes >= 10_000 else "--",
                label=f"{policy}, {nodes:,} nodes: median {percentile(later, 0.5):.2f} ms, "
                f"p99 {percentile(later, 0.99):.2f} ms (first pod {times[0]:.1f} ms)",
            )
    axis.axvline(5, color="grey", linestyle=":", linewidth=1)
    axis.annotate("target: median ≤ 5 ms\nat 10,000 nodes", (5, 0.08), xytext=(6, 0.08), fontsize=7)
    axis.set_xscale("log")
    ticks = [0.2, 0.3, 0.5, 1, 2, 3, 5, 10, 20, 50, 100]
    axis.set_xticks(ticks, [f"{t:g}" for t in ticks])
    axis.minorticks_off()
    axis.set_xlabel("one pod's decision: filter over every node, score, place (ms, log scale)")
    axis.set_ylabel("share of pods decided in ≤ x")
    axis.grid(linewidth=0.3)
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, fontsize=6.5)
    axis.set_title("Decision time per pod, mixed-occupancy 910 nodes", fontsize=10)
    figure.tight_layout()
    _save(figure, path)


def draw_robustness_timeline(timeline: Timeline, path: Path) -> None:
    """Faults (struck ▼, lasting ▬), the leader, jobs restarted, pods over time."""
    plt = _pyplot()
    events = timeline.events
    end = max([timeline.seconds, *(e.at for e in events)])
    kinds = sorted({e.detail for e in events if e.what == "fault"})
    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(10, 2.2 + 0.28 * len(kinds)), sharex=True, height_ratios=(len(kinds) + 3, 5)
    )
    lanes = {kind: i for i, kind in enumerate(kinds)}
    spans = fault_spans(events)
    for kind, pairs in spans.items():
        top.broken_barh(
            [(a, b - a) for a, b in pairs], (lanes[kind] - 0.3, 0.6), color="#dd8452", alpha=0.7
        )
    struck = [e for e in events if e.what == "fault"]
    top.scatter(
        [e.at for e in struck],
        [lanes[e.detail] for e in struck],
        marker="v",
        s=14,
        color="#c44e52",
        zorder=3,
        label="a fault strikes (bar: until its end took effect)",
    )
    leader_row, restart_row = len(kinds), len(kinds) + 1
    palette = {"replica-0": "#4c72b0", "replica-1": "#55a868"}
    for name, start, stop in leader_spans(events, end):
        top.broken_barh(
            [(start, stop - start)],
            (leader_row - 0.3, 0.6),
            color=palette.get(name, "#eeeeee"),
            edgecolor="black" if not name else "none",
            linewidth=0.3,
        )
        if name and stop - start > end / 25:
            top.text(start + 0.5, leader_row, name, va="center", fontsize=6, color="white")
    restarts = [e.at for e in events if e.what == "restart"]
    top.scatter(
        restarts,
        [restart_row] * len(restarts),
        marker="o",
        s=14,
        color="#8172b3",
        label="a job restarted by the scheduler",
    )
    for k, violation in enumerate(e for e in events if e.what == "violation"):
        top.axvline(
            violation.at, color="red", linewidth=1, label="" if k else "an invariant violated"
        )
    top.set_yticks(
        [*lanes.values(), leader_row, restart_row],
        [*kinds, "leader (white: none)", "jobs restarted"],
    )
    top.invert_yaxis()
    top.grid(axis="x", linewidth=0.3)
    # Upper right: the faults are over by then, and the restarts row stays in view.
    top.legend(loc="upper right", fontsize=6.5)
    samples = timeline.samples
    holes = gaps(samples)
    times: list[float] = []
    counts: dict[str, list[float]] = {"running": [], "waiting": [], "placed": []}
    for sample in samples:
        if any(sample.at == stop for _, stop in holes):  # no line across a gap
            times.append(sample.at)
            for values in counts.values():
                values.append(float("nan"))
        times.append(sample.at)
        counts["running"].append(sample.running)
        counts["waiting"].append(sample.waiting)
        counts["placed"].append(sample.placed)
    bottom.plot(times, counts["running"], color="#55a868", label="pods running")
    bottom.plot(times, counts["waiting"], color="#c44e52", label="pods not bound")
    bottom.plot(times, counts["placed"], color="#4c72b0", linestyle="--", label="pods placed")
    for k, (start, stop) in enumerate(holes):
        bottom.axvspan(
            start,
            stop,
            facecolor="none",
            hatch="///",
            edgecolor="#bbbbbb",
            linewidth=0,
            label="" if k else "no check: API server away, or the harness not stepping",
        )
    for axis in (top, bottom):
        axis.axvspan(0, timeline.last_fault, color="#f2f2f2", zorder=0)
    bottom.annotate(
        "faults strike (grey)", (timeline.last_fault, 0), xytext=(4, 4),
        textcoords="offset points", fontsize=7,
    )  # fmt: skip
    bottom.set_xlabel("seconds into the run")
    bottom.set_ylabel("pods")
    bottom.grid(linewidth=0.3)
    bottom.legend(loc="upper left", fontsize=6.5)
    violations = sum(e.what == "violation" for e in events)
    top.set_title(
        f"Robustness run, seed {timeline.seed}: {len(struck)} faults, "
        f"jobs restarted: {len(restarts)}, invariant violations: {violations}",
        fontsize=10,
    )
    figure.tight_layout()
    _save(figure, path)


# The architecture: boxes (x, y, width, height in a 100 × 62 frame) and what flows between them.
@dataclass(frozen=True, slots=True)
class Box:
    label: str
    x: float
    y: float
    w: float
    h: float
    colour: str = "#dbe6f4"


@dataclass(frozen=True, slots=True)
class Flow:
    source: str
    target: str
    label: str
    bend: float = 0.0  # arc3 curvature
    dashed: bool = False  # the DRA path, or monitoring
    both: bool = False  # each way
    label_at: tuple[float, float] | None = None  # else where the arc bulges


BOXES = {
    "user": Box("user / CI\nkubectl apply", 1, 47, 12, 7, "#ffffff"),
    "kube-scheduler": Box("kube-scheduler\n(or Volcano)", 21, 47, 17, 7),
    "extender": Box(
        "ascend-npu-scheduler ×2\n(leader by Lease)\nengine · extender verbs ·\n/metrics · NPU map",
        57,
        43,
        24,
        13,
        "#c9e3c4",
    ),
    "apiserver": Box("kube-apiserver\n(etcd)", 34, 30, 20, 7, "#f4e1c1"),
    "prometheus": Box("Prometheus ·\nalert rules ·\nGrafana", 86, 47, 13, 9, "#ffffff"),
    "browser": Box("admin's\nbrowser", 88, 34, 11, 6, "#ffffff"),
    "kubelet": Box("kubelet", 7, 10, 13, 6),
    "agent": Box("ascend-npu-agent\n(device plugin; DaemonSet)", 30, 9, 20, 8, "#c9e3c4"),
    "dra": Box("ascend DRA driver\n(DaemonSet; on DRA\nnodes instead)", 60, 9, 20, 8, "#e6dcf0"),
    "driver": Box(
        "NPU driver: npu-smi, the chips and their health (or the fake driver)",
        30,
        2,
        50,
        3.5,
        "#ffffff",
    ),
}
FLOWS = (
    Flow("user", "apiserver", "pod asking\nhuawei.com/Ascend910", bend=0.2),
    Flow("kube-scheduler", "extender", "filter · prioritize · bind\n(/volcano/<verb>)"),
    Flow("extender", "apiserver", "Binding + chip annotations,\nLease", bend=-0.15),
    Flow("apiserver", "extender", "watch nodes, pods,\nDeviceInfo ConfigMaps", bend=-0.15),
    Flow("apiserver", "kube-scheduler", "watch pods, nodes", bend=0.15),
    Flow(
        "agent",
        "apiserver",
        "↓ watch its node's pods  ↑ patch pod (AscendReal,\nrank table), DeviceInfo ConfigMap",
        both=True,
        label_at=(37, 23.5),
    ),
    Flow(
        "kubelet",
        "agent",
        "ListAndWatch · Allocate\n(gRPC, device plugin)",
        both=True,
        label_at=(18, 7.5),
    ),
    Flow("agent", "driver", ""),
    Flow(
        "kubelet",
        "dra",
        "NodePrepareResources (gRPC)",
        bend=-0.25,
        dashed=True,
        both=True,
        label_at=(60, 19),
    ),
    Flow("dra", "apiserver", "ResourceSlices", bend=0.2, dashed=True),
    Flow("dra", "driver", "", dashed=True),
    Flow("prometheus", "extender", "scrape /metrics\n(also agent, DRA)", dashed=True),
    Flow("browser", "extender", "NPU map\n(read-only)", bend=0.2, dashed=True),
)


def _centre(box: Box) -> tuple[float, float]:
    return box.x + box.w / 2, box.y + box.h / 2


def draw_architecture(path: Path) -> None:
    """Components, their callers, the API server and what flows where."""
    from matplotlib import patches  # noqa: PLC0415 (a test extra)

    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(11, 6.8))
    axis.set_xlim(0, 100)
    axis.set_ylim(0, 62)
    axis.axis("off")
    for label, (x, y, w, h) in (
        ("control plane", (18, 27, 66, 33)),
        ("every Ascend node", (4, 0.8, 82, 19)),
    ):
        axis.add_patch(
            patches.FancyBboxPatch(
                (x, y), w, h, boxstyle="round,pad=0.3", fill=False, linestyle=":", linewidth=0.8
            )
        )
        axis.text(x + 0.8, y + h - 1.6, label, fontsize=8, style="italic", color="#555555")
    drawn: dict[str, Any] = {}
    for key, box in BOXES.items():
        drawn[key] = axis.add_patch(
            patches.FancyBboxPatch(
                (box.x, box.y),
                box.w,
                box.h,
                boxstyle="round,pad=0.4",
                facecolor=box.colour,
                edgecolor="#333333",
                linewidth=0.9,
            )
        )
        axis.text(*_centre(box), box.label, ha="center", va="center", fontsize=7.5)
    for flow in FLOWS:
        source, target = BOXES[flow.source], BOXES[flow.target]
        arrow = patches.FancyArrowPatch(
            _centre(source),
            _centre(target),
            patchA=drawn[flow.source],
            patchB=drawn[flow.target],
            connectionstyle=f"arc3,rad={flow.bend}",
            arrowstyle="<|-|>" if flow.both else "-|>",
            mutation_scale=10,
            linewidth=0.9,
            linestyle="--" if flow.dashed else "-",
            color="#7a5195" if flow.dashed else "#333333",
        )
        axis.add_patch(arrow)
        if flow.label:
            (sx, sy), (tx, ty) = _centre(source), _centre(target)
            # Where the arc bulges: arc3's control point is the midpoint pushed by bend along
            # the normal, and the curve passes halfway to it.
            mx, my = flow.label_at or (
                (sx + tx) / 2 + flow.bend * (ty - sy) / 2,
                (sy + ty) / 2 - flow.bend * (tx - sx) / 2,
            )
            axis.text(
                mx, my, flow.label, ha="center", va="center", fontsize=6.3,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 0.6},
            )  # fmt: skip
    axis.set_title(
        "Ascend NPUs on Kubernetes: components and what flows between them "
        "(dashed: the DRA path and monitoring)",
        fontsize=9,
    )
    figure.tight_layout()
    _save(figure, path)


# ---- every figure ----------------------------------------------------------------------------

FIGURES: dict[str, Callable[[Path, Path], None]] = {
    "trace-replay-deltas.svg": lambda data, out: draw_replay_deltas(
        load_replay(data / "trace_replay.json"), out
    ),
    "trace-replay-waits.svg": lambda data, out: draw_replay_waits(
        load_replay(data / "trace_replay.json"), out
    ),
    "decision-latency.svg": lambda data, out: draw_decision_latency(
        load_speed(data / "placement_speed.json"), out
    ),
    "robustness-timeline.svg": lambda data, out: draw_robustness_timeline(
        load_timeline(data / "robustness-timeline.json"), out
    ),
    "architecture.svg": lambda _data, out: draw_architecture(out),
}


def draw_all(data: Path, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in FIGURES.items():
        draw(data, out / name)
        written.append(out / name)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DATA, help="the benchmarks' results")
    parser.add_argument("--out", type=Path, default=OUT, help="where the figures go")
    args = parser.parse_args()
    try:
        for path in draw_all(args.data, args.out):
            print(f"figure: {path}")
    except FigureDataError as failed:
        parser.exit(2, f"error: {failed}\n")


if __name__ == "__main__":
    main()
