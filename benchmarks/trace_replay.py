"""Replay the public ITP trace (NPU-shaped) under each placement and compare queueing delay.

Run: ``.venv/bin/python -m benchmarks.trace_replay`` (``--trace``, ``--nodes``, ``--mode``,
``--plot FILE.png``). Defaults: cluster04 on 80 nodes of 8 chips (offered load ≈ 0.77) and
cluster07 on 40 nodes, FIFO with backfill. The placements: the extender's ``huawei`` and
``binpack``, and the stock DRA allocator's ``dra-first-fit`` and ``dra-ladder``
(``benchmarks/dra_models.py``). Data: ``benchmarks/data/itp/`` (MIT, see SOURCE.md there).
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from benchmarks.dra_models import DRA_MODELS
from benchmarks.replay import QueueMode, ReplayResult, TraceJob, replay
from scheduler_core.engine.policies import POLICIES

PLACEMENTS = {**POLICIES, **DRA_MODELS}

DATA = Path(__file__).parent / "data" / "itp"
DEFAULT_RUNS = (("npu_jobs_cluster04.csv", 80), ("npu_jobs_cluster07.csv", 40))


def load(path: Path) -> list[TraceJob]:
    with path.open(newline="") as handle:
        return [
            TraceJob(
                idx=int(row["job_idx"]),
                submit=float(row["submit_s"]),
                duration=float(row["duration_s"]),
                chips_per_pod=int(row["chips_per_pod"]),
                pods=int(row["pods"]),
            )
            for row in csv.DictReader(handle)
        ]


def show(result: ReplayResult, seconds: float) -> None:
    o = result.overall
    print(
        f"  {result.policy:8} mean wait {o.mean / 60:8.1f} min  p95 {o.p95 / 3600:7.2f} h  "
        f"frag-blocked jobs {result.fragmentation_blocked:5}  violations {result.violations}  "
        f"unplaced {result.unfinished}  ({seconds:.1f} s)"
    )
    for size, waits in result.by_class.items():
        print(
            f"           {size:>3}-chip jobs {waits.count:6}: mean {waits.mean / 60:8.1f} min, "
            f"p95 {waits.p95 / 3600:7.2f} h"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", help="a CSV under benchmarks/data/itp/ (default: both)")
    parser.add_argument("--nodes", type=int, help="8-chip nodes in the cluster")
    parser.add_argument("--mode", choices=[m.value for m in QueueMode], default="backfill")
    parser.add_argument("--plot", type=Path, help="write the figures as a PNG")
    args = parser.parse_args()
    runs = [(args.trace, args.nodes or 80)] if args.trace else list(DEFAULT_RUNS)
    mode = QueueMode(args.mode)
    every: dict[str, dict[str, ReplayResult]] = {}
    for trace, nodes in runs:
        jobs = load(DATA / trace)
        print(f"{trace}: {len(jobs)} jobs on {nodes} nodes x 8 chips, queue {mode.value}")
        results = every[trace] = {}
        for name, policy in PLACEMENTS.items():
            start = time.perf_counter()
            results[name] = replay(jobs, nodes, policy, mode)
            show(results[name], time.perf_counter() - start)
        huawei = results["huawei"].overall.mean
        for other in ("binpack", "dra-first-fit", "dra-ladder"):
            base = results[other].overall.mean
            print(f"  huawei's mean wait is {100 * (huawei - base) / base:+.1f} % vs {other}")
    if args.plot is not None:
        plot(every, args.plot)
        print(f"figures: {args.plot}")


def plot(every: dict[str, dict[str, ReplayResult]], path: Path) -> None:
    """Mean wait and fragmentation-blocked jobs per placement, one row per trace."""
    import matplotlib  # noqa: PLC0415 (only when a plot is asked for)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(len(every), 2, figsize=(10, 3.2 * len(every)), squeeze=False)
    for row, (trace, results) in enumerate(every.items()):
        names = list(results)
        waits = [results[n].overall.mean / 60 for n in names]
        blocked = [results[n].fragmentation_blocked for n in names]
        for axis, values, label in (
            (axes[row][0], waits, "mean wait (min)"),
            (axes[row][1], blocked, "jobs blocked by fragmentation"),
        ):
            axis.bar(names, values, color=["#4c72b0", "#55a868", "#c44e52", "#dd8452"])
            axis.set_title(f"{trace.removesuffix('.csv')}: {label}", fontsize=9)
            axis.tick_params(axis="x", labelsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
