"""Huawei's Volcano plugin beside our engine, case by case: seeded cases over every product both
serve (and Huawei's own job samples) run through ascend-for-volcano v26.1.0 in the real Volcano
v1.12.0 on the test bed's API server and through our engine, compared (``testbed/differential``).

Run: ``.venv/bin/python -m benchmarks.differential --seed 7 --cases 600`` (``make testbed``
first: it builds Volcano and Huawei's plugin). Prints a table per product (cases, agreements,
disagreements by kind) and the known differences met; writes every disagreement, with its
case and both sides' outcomes, to ``--out`` (JSON); ``--record FILE`` every case with Huawei's
outcome. ``--replay FILE`` runs the cases of such a file through Volcano again;
``--rejudge FILE`` compares its recorded outcomes with the engine as it is now, without
Volcano (seconds: for checking a change of the engine against Huawei's recorded decisions).
``--through ours`` runs the cases through our own side in the same Volcano instead (the
service and the in-process adapter, as the chart's ``volcano.adapter`` installs them) and
compares that with our engine: every disagreement is then the Volcano path deciding otherwise
than ``place``, and none is known. ``--faults`` runs the fault reactions instead
(``testbed/differential/faults.py``: a running job, a chip failed in DeviceInfo, which ranks
are deleted and where they go again): the fixed cases and ``--cases`` seeded ones, through
Huawei's plugin or ``--through ours``.
``--nslb 2.0`` runs switch affinity 2.0's ToR cases in a Volcano whose plugin is set so;
``--vnpu ["310P vNPU" | "910B vNPU"]`` one chip's dynamic vNPU cases (``huawei.com/npu-core``) in
one whose plugin cuts vNPUs (``presetVirtualDevice: "false"``), or ``--through ours``.
Exit status 1 when a disagreement no known difference explains was found.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager as ContextManager
from functools import partial
from pathlib import Path

from testbed.differential.cases import (
    GENERATORS,
    NSLB2_GROUP,
    VNPU_910B_GROUP,
    VNPU_GROUP,
    Case,
    case_from_json,
    generate,
)
from testbed.differential.faults import (
    FAULT_CASES,
    OUR_PASS,
    FaultCase,
    generate_faults,
    run_faults,
)
from testbed.differential.huawei import VolcanoCases, huawei_volcano, our_volcano
from testbed.differential.known import minimal_cases
from testbed.differential.run import (
    rejudge,
    run_cases,
    summary,
    write_disagreements,
    write_record,
)
from testbed.differential.samples import sample_cases


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cases", type=int, default=300, help="seeded cases (default 300)")
    parser.add_argument(
        "--groups", nargs="*", choices=sorted(GENERATORS), help="only these generators"
    )
    parser.add_argument("--no-samples", action="store_true", help="leave Huawei's samples out")
    parser.add_argument("--no-minimal", action="store_true", help="leave the known cases out")
    parser.add_argument("--replay", type=Path, help="the cases of a disagreements file")
    parser.add_argument("--batch", type=int, default=12, help="cases side by side per session")
    parser.add_argument(
        "--through",
        choices=("huawei", "ours"),
        default="huawei",
        help="what decides in Volcano: Huawei's plugin, or our adapter and service",
    )
    parser.add_argument(
        "--faults", action="store_true", help="the fault reactions instead of placements"
    )
    parser.add_argument(
        "--nslb",
        choices=("1.0", "2.0"),
        default="1.0",
        help="switch affinity's version: 2.0 runs only its own ToR cases, in a Volcano so set",
    )
    parser.add_argument(
        "--vnpu",
        nargs="?",
        const=VNPU_GROUP,
        choices=(VNPU_GROUP, VNPU_910B_GROUP),
        help="only one chip's dynamic vNPU cases, in a Volcano whose plugin cuts vNPUs "
        f"(default {VNPU_GROUP!r})",
    )
    parser.add_argument("--out", type=Path, help="disagreements JSON (differential-<seed>.json)")
    parser.add_argument("--record", type=Path, help="every case and Huawei's outcome (JSON)")
    parser.add_argument(
        "--rejudge", type=Path, help="a record or disagreements file, compared again, no Volcano"
    )
    return parser


def _faults(
    volcano: Callable[..., ContextManager[VolcanoCases]],
    faults: Sequence[FaultCase],
    through: str,
    batch: int,
) -> int:
    """The fault cases through ``volcano``'s runner, each printed; 1 when one differs."""
    with volcano(batch=batch) as runner:
        verdicts = run_faults(runner, faults, seconds=0.0 if through == "huawei" else OUR_PASS)
    for verdict in verdicts.values():
        print(f"{verdict.case}: {'agree' if verdict.agrees else 'DISAGREE'}: {verdict.detail}")
    agreed = sum(v.agrees for v in verdicts.values())
    print(f"\n{agreed} of {len(verdicts)} fault cases agree")
    return 0 if agreed == len(verdicts) else 1


def main() -> int:
    parser = _parser()
    args = parser.parse_args()
    out = args.out or Path(f"differential-{args.seed}.json")
    if args.rejudge:
        results = rejudge(args.rejudge)
        print(summary(results))
        count = write_disagreements(results, out)
        print(f"\n{len(results)} cases compared again; {count} disagreements written to {out}")
        return 1 if any(not r.verdict.agrees and r.known is None for r in results) else 0
    # SIGTERM ends the run through its context managers, which stop the processes it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    volcano = huawei_volcano if args.through == "huawei" else our_volcano
    if args.nslb == "2.0":
        if args.through != "huawei" or args.faults:
            parser.error("--nslb 2.0 is Huawei's plugin beside our engine, placements only")
        volcano = partial(huawei_volcano, nslb="2.0")
    own = args.nslb == "2.0" or args.vnpu  # a Volcano of their own, their own cases only
    if args.vnpu:
        if args.faults or args.nslb == "2.0":
            parser.error("--vnpu is placements only, under switch affinity 1.0")
        if args.through == "huawei":  # ours reads no presetVirtualDevice: each node's agent
            volcano = partial(huawei_volcano, preset=False)
    if args.faults:
        faults = [*FAULT_CASES, *generate_faults(args.seed, args.cases)]
        return _faults(volcano, faults, args.through, args.batch)
    cases: list[Case]
    if args.replay:
        cases = [case_from_json(r["case"]) for r in json.loads(args.replay.read_text())]
    else:
        groups = [NSLB2_GROUP] if args.nslb == "2.0" else [args.vnpu] if args.vnpu else args.groups
        cases = generate(args.seed, args.cases, groups)
        if not own and not args.no_samples:
            cases += sample_cases()
        if not own and not args.no_minimal:
            cases += minimal_cases()
    started = time.monotonic()
    with volcano(batch=args.batch) as runner:
        ready = time.monotonic()
        results = run_cases(runner, cases, known=args.through == "huawei")
    done = time.monotonic()
    print(summary(results))
    count = write_disagreements(results, out)
    if args.record:
        write_record(results, args.record)
    print(
        f"\n{len(cases)} cases in {done - ready:.0f} s (start-up {ready - started:.0f} s); "
        f"{count} disagreements written to {out}"
    )
    unknown = [r for r in results if not r.verdict.agrees and r.known is None]
    return 1 if unknown else 0


if __name__ == "__main__":
    sys.exit(main())
