"""A Prometheus latency histogram (cumulative buckets, sum, count) as text."""

from __future__ import annotations

import bisect
import threading

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class Histogram:
    def __init__(self, name: str, labels: str = "") -> None:
        self.name = name
        self.labels = labels  # e.g. 'verb="filter"'
        self._counts = [0] * (len(BUCKETS) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(BUCKETS, seconds)] += 1
            self._sum += seconds

    def lines(self) -> list[str]:
        extra = f"{self.labels}," if self.labels else ""
        with self._lock:
            lines, total = [], 0
            for bound, count in zip((*BUCKETS, float("inf")), self._counts, strict=True):
                total += count
                le = "+Inf" if bound == float("inf") else f"{bound}"
                lines.append(f'{self.name}_bucket{{{extra}le="{le}"}} {total}')
            suffix = f"{{{self.labels}}}" if self.labels else ""
            lines += [
                f"{self.name}_sum{suffix} {self._sum:.6f}",
                f"{self.name}_count{suffix} {total}",
            ]
        return lines
