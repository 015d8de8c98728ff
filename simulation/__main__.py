"""``python -m simulation``: the demo, a whole simulated cluster in one process."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from simulation.demo import run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation", description=__doc__)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--policy", choices=["huawei", "binpack"], default="huawei")
    parser.add_argument(
        "--real",
        action="store_true",
        help="on the test bed's real control plane (make testbed) instead of the embedded one",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.real:
        # Imported here: the real demo needs the test tools (`make demo` installs only the
        # runtime's dependencies).
        from testbed import demo as real_demo  # noqa: PLC0415

        return real_demo.run(args.nodes)
    return run(args.nodes, args.policy)


if __name__ == "__main__":
    sys.exit(main())
