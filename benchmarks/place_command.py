"""How long ``python -m scheduler_core place`` takes on a request of many nodes (reading,
checking and placing; the command as a process).

Run: ``.venv/bin/python -m benchmarks.place_command [--nodes 100000]``. Target (issue 12):
linear in the node count, 100,000 nodes well under 10 s. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def request(nodes: int) -> str:
    free = [f"Ascend910-{c}" for c in range(8)]
    return json.dumps(
        {
            "nodes": [
                {"name": f"n{i}", "product": "module910x8", "allocatable": 8, "free": free}
                for i in range(nodes)
            ],
            "job": {"name": "j", "tasks": [{"name": "t", "npu": 2}]},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="*", default=[10_000, 100_000])
    args = parser.parse_args()
    for nodes in args.nodes:
        text = request(nodes)
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "scheduler_core", "place"],
            input=text,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - start
        print(
            f"{nodes:>7} nodes ({len(text) / 2**20:.1f} MiB of JSON): {seconds:.1f} s, "
            f"exit {done.returncode}"
        )


if __name__ == "__main__":
    main()
