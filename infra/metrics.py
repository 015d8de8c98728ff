"""Prometheus metrics for both components: counters, gauges and histograms with labels, the
process metrics, one registry per component instance (a test process runs many), written in
the text exposition format 0.0.4.

Ours rather than ``prometheus_client``'s: importing that library (its exposition module
pulls in ``urllib.request``, ``wsgiref``, ``email`` and ``inspect``) cost the agent 2 MiB of
its 45 MiB budget (``benchmarks/agent_plugin``), for a dozen metrics. What is written is
checked by ``prometheus_client``'s own parser in the tests (``tests/unit/helpers.py``).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from infra.cli import version

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

Labels = tuple[tuple[str, str], ...]

# The longest label value written from a name others chose (a pod's, a namespace's): Kubernetes
# names are at most 253 characters (a DNS subdomain), and a value is cut there anyway, so no
# series carries unbounded tenant input.
LABEL_CAP = 253


def capped(value: str) -> str:
    """A label value from outside the component, cut to ``LABEL_CAP`` characters."""
    return value[:LABEL_CAP]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric as exposed: its samples are (name suffix, labels, value)."""

    name: str
    kind: str  # counter, gauge or histogram
    help: str
    samples: Sequence[tuple[str, Labels, float]] = field(default_factory=tuple)


Collect = Callable[[], Iterable[Family]]


class Registry:
    def __init__(self) -> None:
        self._collectors: list[Collect] = [_process_families]

    def register(self, collect: Collect) -> None:
        self._collectors.append(collect)

    def families(self) -> list[Family]:
        return [f for collect in self._collectors for f in collect()]

    def value(self, name: str, **labels: str) -> float | None:
        """The value of the sample ``name`` (suffix included) with these labels."""
        wanted = tuple(sorted(labels.items()))
        for family in self.families():
            for suffix, sample_labels, value in family.samples:
                if family.name + suffix == name and tuple(sorted(sample_labels)) == wanted:
                    return value
        return None


def registry() -> Registry:
    """A registry with the process metrics (CPU, memory, open files, start time)."""
    return Registry()


def exposition(of: Registry) -> str:
    lines: list[str] = []
    for family in of.families():
        # A counter's lines name it with its _total, as prometheus_client writes them.
        named = family.name + "_total" if family.kind == "counter" else family.name
        lines.append(f"# HELP {named} {_escape_help(family.help)}")
        lines.append(f"# TYPE {named} {family.kind}")
        for suffix, labels, value in family.samples:
            tags = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels)
            lines.append(
                f"{family.name}{suffix}{'{' + tags + '}' if tags else ''} {_number(value)}"
            )
    return "\n".join(lines) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class _Metric:
    """A metric and its children, one per label values; unlabelled, it is its own child."""

    kind = ""

    def __init__(
        self, name: str, help: str, labelnames: Sequence[str] = (), *, registry: Registry
    ) -> None:
        self.name = name
        self.help = help
        self._labelnames = tuple(labelnames)
        self._lock = threading.Lock()
        self._children: dict[tuple[str, ...], list[float]] = {}
        if not self._labelnames:
            self._children[()] = self._fresh()
        registry.register(self._collect)

    def _fresh(self) -> list[float]:
        return [0.0]

    def _child(self, values: tuple[str, ...]) -> list[float]:
        if len(values) != len(self._labelnames):
            raise ValueError(f"{self.name}: labels {self._labelnames}, got {values}")
        with self._lock:
            return self._children.setdefault(values, self._fresh())

    def _add(self, values: tuple[str, ...], index: int, amount: float) -> None:
        child = self._child(values)
        with self._lock:
            child[index] += amount

    def _collect(self) -> Iterable[Family]:
        with self._lock:
            children = {k: list(v) for k, v in self._children.items()}
        samples = [
            sample
            for values, state in children.items()
            for sample in self._samples(tuple(zip(self._labelnames, values, strict=True)), state)
        ]
        yield Family(self.name, self.kind, self.help, samples)

    def _samples(self, labels: Labels, state: list[float]) -> list[tuple[str, Labels, float]]:
        raise NotImplementedError


class _Counted:
    """A counter's or a gauge's child."""

    def __init__(self, metric: Counter | Gauge, values: tuple[str, ...]) -> None:
        self._metric = metric
        self._values = values
        metric._child(values)  # shown, at 0, from now on

    def inc(self, amount: float = 1.0) -> None:
        self._metric._add(self._values, 0, amount)


class Counter(_Metric):
    kind = "counter"

    def labels(self, *values: str) -> _Counted:
        return _Counted(self, values)

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"{self.name}: a counter only goes up")
        self._add((), 0, amount)

    def _samples(self, labels: Labels, state: list[float]) -> list[tuple[str, Labels, float]]:
        return [("_total", labels, state[0])]


class _GaugeChild(_Counted):
    def set(self, value: float) -> None:
        child = self._metric._child(self._values)
        with self._metric._lock:
            child[0] = float(value)


class Gauge(_Metric):
    kind = "gauge"

    def labels(self, *values: str) -> _GaugeChild:
        return _GaugeChild(self, values)

    def set(self, value: float) -> None:
        self.labels().set(value)

    def _samples(self, labels: Labels, state: list[float]) -> list[tuple[str, Labels, float]]:
        return [("", labels, state[0])]


class _Observed:
    def __init__(self, metric: Histogram, values: tuple[str, ...]) -> None:
        self._metric = metric
        self._values = values
        metric._child(values)

    def observe(self, value: float) -> None:
        self._metric._observe(self._values, value)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        help: str,
        labelnames: Sequence[str] = (),
        *,
        buckets: Sequence[float],
        registry: Registry,
    ) -> None:
        self._bounds = (*sorted(buckets), math.inf)
        super().__init__(name, help, labelnames, registry=registry)

    def _fresh(self) -> list[float]:
        return [0.0] * (len(self._bounds) + 2)  # per bucket (not cumulative), count, sum

    def labels(self, *values: str) -> _Observed:
        return _Observed(self, values)

    def observe(self, value: float) -> None:
        self._observe((), value)

    def _observe(self, values: tuple[str, ...], value: float) -> None:
        child = self._child(values)
        bucket = next(i for i, bound in enumerate(self._bounds) if value <= bound)
        with self._lock:
            child[bucket] += 1
            child[-2] += 1
            child[-1] += value

    def _samples(self, labels: Labels, state: list[float]) -> list[tuple[str, Labels, float]]:
        samples: list[tuple[str, Labels, float]] = []
        total = 0.0
        for bound, count in zip(self._bounds, state, strict=False):
            total += count
            samples.append(("_bucket", (*labels, ("le", _number(bound))), total))
        samples.append(("_count", labels, state[-2]))
        samples.append(("_sum", labels, state[-1]))
        return samples


def build_info(of: Registry, component: str) -> None:
    """``ascend_npu_build_info{component,version} 1``: which build runs, for every daemon (an
    info metric, as Prometheus's own ``prometheus_build_info``)."""
    Gauge(
        "ascend_npu_build_info",
        "The running build: always 1, its version and component as labels.",
        ["version", "component"],
        registry=of,
    ).labels(version(), component).set(1)


def sample_names(of: Registry) -> frozenset[str]:
    """The names a query can use of what ``of`` exposes: a counter's ``_total``, a histogram's
    ``_bucket``, ``_count`` and ``_sum``, a gauge's own name (whether it has samples now or
    not: a family with none yet is still named)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    return frozenset(
        family.name + suffix
        for family in of.families()
        for suffix in suffixes.get(family.kind, ("",))
    )


def owned(name: str, kind: str, help: str, read: Callable[[], float]) -> Collect:
    """A metric whose value its owner keeps, read at each scrape."""
    suffix = "_total" if kind == "counter" else ""

    def collect() -> Iterable[Family]:
        yield Family(name, kind, help, [(suffix, (), float(read()))])

    return collect


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _process_families() -> Iterable[Family]:
    """The standard process metrics, from ``/proc/self`` (none where there is no /proc)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open("/proc/stat", encoding="ascii") as system:
            boot = next(float(line.split()[1]) for line in system if line.startswith("btime"))
        open_fds = len(os.listdir("/proc/self/fd"))
    except (OSError, StopIteration, IndexError, ValueError):
        return
    cpu = (float(fields[11]) + float(fields[12])) / _TICKS
    start = boot + float(fields[19]) / _TICKS
    yield Family(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        [("", (), float(fields[20]))],
    )
    yield Family(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        [("", (), float(fields[21]) * _PAGE)],
    )
    yield Family(
        "process_start_time_seconds", "gauge", "Start time since the epoch.", [("", (), start)]
    )
    yield Family(
        "process_cpu_seconds", "counter", "User and system CPU time.", [("_total", (), cpu)]
    )
    yield Family(
        "process_open_fds", "gauge", "Number of open file descriptors.", [("", (), float(open_fds))]
    )
