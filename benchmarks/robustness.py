"""A seeded robustness run of the whole simulated cluster (``simulation/robustness.py``).

Run: ``.venv/bin/python -m benchmarks.robustness --seed 7 --minutes 10 --nodes 6`` (faults
in the first 60 % of the run, the rest settles), or ``--replay FILE`` to run a schedule a
failed run wrote again; ``--workdir DIR`` keeps the replicas' logs; ``--timeline FILE``
writes the run's timeline (faults, their ends, leaders, restarts, pod counts) as JSON for
``benchmarks/figures.py``. Prints the figures; on a violation, writes the schedule to
``robustness-<seed>.json`` and exits 1.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from simulation.fault_schedule import Schedule
from simulation.robustness import describe, run_schedule, timeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=1.0)
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--replay", type=Path, help="a schedule written by a failed run")
    parser.add_argument(
        "--workdir", type=Path, help="keep the replicas' logs and state here (else a temporary one)"
    )
    parser.add_argument("--timeline", type=Path, help="write the run's timeline here (JSON)")
    args = parser.parse_args()
    if args.replay is not None:
        schedule = Schedule.load(args.replay)
    else:
        schedule = Schedule.draw(args.seed, args.minutes * 60, args.nodes)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        report = run_schedule(schedule, args.workdir)
    else:
        with tempfile.TemporaryDirectory() as workdir:
            report = run_schedule(schedule, Path(workdir))
    print(describe(report))
    if args.timeline is not None:
        args.timeline.write_text(timeline(report) + "\n")
    if report.violations:
        written = Path(f"robustness-{schedule.seed}.json")
        written.write_text(schedule.dump())
        print(f"the schedule that led to it: {written} (--replay {written})")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
