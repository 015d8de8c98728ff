"""Replay the public ITP trace (NPU-shaped) under both policies and compare queueing delay.

Run: ``.venv/bin/python -m benchmarks.trace_replay`` (``--trace``, ``--nodes``, ``--mode``).
Defaults: cluster04 on 80 nodes of 8 chips (offered load ≈ 0.77) and cluster07 on 40 nodes,
FIFO with backfill. Data: ``benchmarks/data/itp/`` (MIT, see SOURCE.md there).
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from benchmarks.replay import QueueMode, ReplayResult, TraceJob, replay
from scheduler_core.engine.policies import POLICIES

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
    args = parser.parse_args()
    runs = [(args.trace, args.nodes or 80)] if args.trace else list(DEFAULT_RUNS)
    mode = QueueMode(args.mode)
    for trace, nodes in runs:
        jobs = load(DATA / trace)
        print(f"{trace}: {len(jobs)} jobs on {nodes} nodes x 8 chips, queue {mode.value}")
        results = {}
        for name in sorted(POLICIES):
            start = time.perf_counter()
            results[name] = replay(jobs, nodes, POLICIES[name], mode)
            show(results[name], time.perf_counter() - start)
        huawei, binpack = results["huawei"].overall.mean, results["binpack"].overall.mean
        print(f"  huawei's mean wait is {100 * (huawei - binpack) / binpack:+.1f} % vs binpack")


if __name__ == "__main__":
    main()
