"""``python -m dra_driver.host_paths``: which of the host paths the DRA driver's CDI specs may
name the host has (``dra_driver.cdi.HostPaths.scan``: the driver's libraries and tools, the
HCCL files, the manager devices, ``dvpp_cmdlist``, the nodes of ``/dev/uburma`` and
``/dev/ummu``), checked once under ``--host-root`` and written to ``--out`` for
``python -m dra_driver serve --host-paths``.

The chart runs it as the DRA driver pod's init container, the only container given the host's
``/`` (read-only): it checks and exits, and the long-running driver reads the set written to
an emptyDir, never the host's files. Exit status 2 for a bad flag or a path not checkable.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from dra_driver.cdi import HostPaths
from dra_driver.files import write_atomically
from infra.cli import add_version
from infra.config import CommandParser

EXIT_BAD_INPUT = 2


def build_parser() -> CommandParser:
    parser = CommandParser(prog="python -m dra_driver.host_paths", description=__doc__)
    add_version(parser)
    parser.add_argument(
        "--host-root", type=Path, required=True, help="where the host's / is mounted"
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="the file written (for serve --host-paths)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        found = HostPaths.scan(args.host_root)
    except OSError as failed:
        print(f"error: --host-root: {failed.filename}: {failed.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        write_atomically(args.out, found.dump())
    except OSError as failed:
        print(f"error: --out: {args.out}: {failed.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{len(found.found)} host paths found: {', '.join(sorted(found.found)) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
