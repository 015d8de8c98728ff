"""CPU time of the test bed's processes, read from ``/proc`` (Linux), for the benchmarks that
put a run's throughput beside what it cost each process."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process."""
    return {name: cpu_seconds(pid) for name, pid in pids.items()}
