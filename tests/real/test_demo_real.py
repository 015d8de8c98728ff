"""``python -m simulation --real``: the demo on the real control plane, as a user runs it."""

from __future__ import annotations

import subprocess
import sys


def test_the_demo_runs_on_the_real_control_plane() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "simulation", "--real"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "8 pods running, 0 mismatches or chips given twice"
    gang = [line.split() for line in lines if line.startswith("gang16-")]
    assert len({fields[1] for fields in gang}) == 2, "the 16-chip gang on two whole nodes"
