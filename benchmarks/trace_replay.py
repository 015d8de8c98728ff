"""Replay the public ITP trace (NPU-shaped) under each placement and compare queueing delay.

Run: ``.venv/bin/python -m benchmarks.trace_replay`` (``--trace``, ``--nodes``, ``--mode``;
``--grid`` for the twelve settings of docs/results.md; ``--json FILE`` writes the results, which
``benchmarks/figures.py`` draws). Defaults: cluster04 on 80 nodes of 8 chips (offered load ≈
0.77) and cluster07 on 40 nodes, FIFO with backfill. The placements: the extender's ``huawei`` and
``binpack``, and the stock DRA allocator's ``dra-first-fit`` and ``dra-ladder``
(``benchmarks/dra_models.py``). ``--accelerator-type`` labels the nodes and
``--schedule-policy`` annotates every job, read through the scheduler's routing table
(``chip_topology.routing``): by default Atlas 800 910 servers and ``module910x8`` jobs.
Data: ``benchmarks/data/itp/`` (MIT, see SOURCE.md there).
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

from benchmarks.dra_models import DRA_MODELS
from benchmarks.replay import Fleet, QueueMode, ReplayResult, TraceJob, replay
from contract.annotations import ACCELERATOR_TYPE_LABEL, SCHEDULE_POLICY_ANNOTATION
from contract.chip_names import InvalidInput
from scheduler_core.engine.policies import POLICIES

PLACEMENTS = {**POLICIES, **DRA_MODELS}

DATA = Path(__file__).parent / "data" / "itp"
DEFAULT_RUNS = (("npu_jobs_cluster04.csv", 80), ("npu_jobs_cluster07.csv", 40))
# docs/results.md's table: each trace at three loads (high, the default's, low), both queues.
GRID = tuple(
    (trace, nodes, mode)
    for mode in QueueMode
    for trace, sizes in (
        ("npu_jobs_cluster04.csv", (64, 80, 128)),
        ("npu_jobs_cluster07.csv", (32, 40, 48)),
    )
    for nodes in sizes
)
QUANTILES = 200  # the wait distribution is kept at every 0.5 %


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
    parser.add_argument("--nodes", type=int, help="nodes in the cluster")
    parser.add_argument("--mode", choices=[m.value for m in QueueMode], default="backfill")
    parser.add_argument("--grid", action="store_true", help="docs/results.md's twelve settings")
    parser.add_argument("--json", type=Path, help="write the results here (benchmarks/figures.py)")
    parser.add_argument("--accelerator-type", help="the nodes' accelerator-type label")
    parser.add_argument("--schedule-policy", help="every job's huawei.com/schedule_policy")
    args = parser.parse_args()
    mode = QueueMode(args.mode)
    fleet = Fleet(
        {ACCELERATOR_TYPE_LABEL: args.accelerator_type} if args.accelerator_type else {},
        {SCHEDULE_POLICY_ANNOTATION: args.schedule_policy} if args.schedule_policy else {},
    )
    try:
        product, handler = fleet.products()
    except InvalidInput as bad:
        parser.error(str(bad))
    if args.grid:
        runs = list(GRID)
    elif args.trace:
        runs = [(args.trace, args.nodes or 80, mode)]
    else:
        runs = [(trace, nodes, mode) for trace, nodes in DEFAULT_RUNS]
    every: list[tuple[str, int, QueueMode, dict[str, ReplayResult]]] = []
    for trace, nodes, queue in runs:
        jobs = load(DATA / trace)
        print(
            f"{trace}: {len(jobs)} jobs of {handler.name} on {nodes} {product.name} nodes x "
            f"{product.capacity} chips, queue {queue.value}"
        )
        results: dict[str, ReplayResult] = {}
        for name, policy in PLACEMENTS.items():
            start = time.perf_counter()
            results[name] = replay(jobs, nodes, policy, queue, fleet)
            show(results[name], time.perf_counter() - start)
        huawei = results["huawei"].overall.mean
        for other in ("binpack", "dra-first-fit", "dra-ladder"):
            base = results[other].overall.mean
            print(f"  huawei's mean wait is {100 * (huawei - base) / base:+.1f} % vs {other}")
        every.append((trace, nodes, queue, results))
    if args.json is not None:
        args.json.write_text(json.dumps(summary(every), separators=(",", ":")) + "\n")
        print(f"results: {args.json}")


def quantiles(waits: tuple[float, ...]) -> list[int]:
    """The waits (s) at 0, 0.5, ..., 100 % of the jobs (nearest rank), for a CDF."""
    if not waits:
        return []
    last = len(waits) - 1
    return [round(waits[round(last * k / QUANTILES)]) for k in range(QUANTILES + 1)]


def summary(
    every: list[tuple[str, int, QueueMode, dict[str, ReplayResult]]],
) -> dict[str, object]:
    """What ``--json`` writes: per setting and placement, the waits' figures and quantiles."""
    return {
        "command": "python -m benchmarks.trace_replay --grid --json FILE",
        "runs": [
            {
                "trace": trace.removeprefix("npu_jobs_").removesuffix(".csv"),
                "nodes": nodes,
                "mode": queue.value,
                "placements": {
                    name: {
                        "mean_s": round(r.overall.mean, 1),
                        "p95_s": round(r.overall.p95, 1),
                        "blocked": r.fragmentation_blocked,
                        "violations": r.violations,
                        "unfinished": r.unfinished,
                        "wait_quantiles_s": quantiles(r.waits),
                    }
                    for name, r in results.items()
                },
            }
            for trace, nodes, queue, results in every
        ],
    }


if __name__ == "__main__":
    main()
