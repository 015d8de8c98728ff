"""The scheduler service's Prometheus metrics.

Counted as calls go (requests, errors, latency, decision latency by the handler kind), and
read from the extender's state at each scrape (``ClusterReadings``, ``cluster_families``):
the leader gauge, chips per node by state and product, fragmentation per product, waiting
gangs by reason class and the oldest wait, nodes left out by reason class, restarts by kind.
A scrape copies the node list under the state's lock (references, O(nodes)) and formats it
outside: at 5,000 nodes ``benchmarks/metrics_series.py`` measures its size and time.
Only the leader's view is meaningful; every replica exposes ``ascend_scheduler_leader`` so
a query can select it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from chip_topology.products import fits, mask_of
from chip_topology.routing import product_by_name
from infra.metrics import (
    LATENCY_BUCKETS,
    Counter,
    Family,
    Histogram,
    build_info,
    exposition,
    owned,
    registry,
)
from scheduler_core.service.state.extender_state import ExtenderState
from scheduler_core.service.state.fault_restarts import GANG_RESTART, RESTART_KINDS, VNPU

COMPONENT = "scheduler"
CHIP_STATES = ("free", "held", "unhealthy")
# Why an NPU node is left out, as a bounded class (``ascend_scheduler_nodes_excluded``).
EXCLUSION_CLASSES = (
    "deviceinfo_stale",
    "deviceinfo_malformed",
    "noded",
    "unready",
    "other",
)


@dataclass(frozen=True, slots=True)
class NpuNode:
    """One NPU node's chips as the scheduler sees them: ``usable`` may be offered now,
    ``unhealthy`` are reported unhealthy."""

    name: str
    product: str
    usable: tuple[int, ...]
    unhealthy: frozenset[int]


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What one scrape reads of the extender's state, taken under its lock."""

    leader: bool
    nodes: Sequence[NpuNode]
    left_out: Mapping[str, str]  # node → why it is left out
    waiting: Mapping[str, int]  # gangs waiting by reason class
    oldest_wait: float  # seconds the longest-waiting gang has waited (0: none)
    restarts: Mapping[str, int]  # restarts begun since start, by kind (vNPU's excepted)


def read_cluster(state: ExtenderState, leader: bool) -> ClusterView:
    """What a scrape reports of the state: references copied under its lock, O(nodes).
    ``leader`` is read by the caller first: the election's lock is not taken under the
    state's."""
    with state.lock:
        session = state.session
        nodes = [
            NpuNode(name, node.product, session.usable(name), node.unhealthy)
            for name, node in session.nodes.items()
        ]
        left_out = dict(state.left_out)
        waiting, oldest = state.gangs.wait_classes(state.clock())
        restarts = {**state.faults.restarts.restarted, GANG_RESTART: state.gangs.restarted}
    return ClusterView(leader, nodes, left_out, waiting, oldest, restarts)


def exclusion_class(reason: str) -> str:
    """The class of a reason ``cluster_view.node_view`` leaves a node out for."""
    if "NodeD" in reason:
        return "noded"
    if "DeviceInfo ignored" in reason or "DeviceInfo lists" in reason:
        return "deviceinfo_malformed"
    if "ConfigMap" in reason or "DeviceInfo is stale" in reason or "in the future" in reason:
        return "deviceinfo_stale"
    if "not stable" in reason:
        return "unready"
    return "other"


def largest_request(product: str) -> int:
    """The most chips one pod of the product may ask on one node."""
    known = product_by_name(product)
    return max(r for r in known.single_task_requests if r not in known.invalid_requests)


def cluster_families(view: ClusterView, gang_ttl: float) -> Iterable[Family]:
    """The series read from the state: pure, so the tests and the benchmark call it as is."""
    yield Family(
        "ascend_scheduler_leader",
        "gauge",
        "1 on the replica that leads (decides), 0 on the others.",
        [("", (), float(view.leader))],
    )
    chips: list[tuple[str, tuple[tuple[str, str], ...], float]] = []
    free: dict[str, int] = {}
    stranded: dict[str, int] = {}
    fitting: dict[tuple[str, int], bool] = {}  # (product, usable mask) → the largest fits
    for node in view.nodes:
        product = product_by_name(node.product)
        held = max(product.capacity - len(node.usable) - len(node.unhealthy), 0)
        for state, count in zip(
            CHIP_STATES, (len(node.usable), held, len(node.unhealthy)), strict=True
        ):
            labels = (("node", node.name), ("product", node.product), ("state", state))
            chips.append(("", labels, float(count)))
        mask = mask_of(node.usable)
        key = (node.product, mask)
        if key not in fitting:
            fitting[key] = fits(product, mask, largest_request(node.product), False)
        free[node.product] = free.get(node.product, 0) + len(node.usable)
        if not fitting[key]:
            stranded[node.product] = stranded.get(node.product, 0) + len(node.usable)
    yield Family(
        "ascend_scheduler_node_chips",
        "gauge",
        "Chips of each NPU node offered now: free (may be given now), held (neither free nor "
        "unhealthy: held by pods, assumed binds or gang reservations), unhealthy.",
        chips,
    )
    yield Family(
        "ascend_scheduler_fragmentation_ratio",
        "gauge",
        "Free chips on nodes where the product's largest one-node request does not fit, over "
        "all its free chips (0 when none is free).",
        [
            ("", (("product", p),), stranded.get(p, 0) / total if total else 0.0)
            for p, total in sorted(free.items())
        ],
    )
    yield Family(
        "ascend_scheduler_waiting_gangs",
        "gauge",
        "Gangs waiting for their reservation now, by reason class.",
        [("", (("reason", r),), float(n)) for r, n in view.waiting.items()],
    )
    yield Family(
        "ascend_scheduler_oldest_gang_wait_seconds",
        "gauge",
        "Seconds the longest-waiting gang has waited (0 when none waits).",
        [("", (), view.oldest_wait)],
    )
    yield Family(
        "ascend_scheduler_gang_ttl_seconds",
        "gauge",
        "The gang TTL configured: a reservation expires, a partly running gang restarts, after it.",
        [("", (), gang_ttl)],
    )
    excluded = dict.fromkeys(EXCLUSION_CLASSES, 0)
    for reason in view.left_out.values():
        excluded[exclusion_class(reason)] += 1
    yield Family(
        "ascend_scheduler_nodes_excluded",
        "gauge",
        "NPU nodes left out now, by reason class.",
        [("", (("reason", r),), float(n)) for r, n in excluded.items()],
    )


class Metrics:
    """The service's metrics; verbs are label values only when they are known verbs."""

    def __init__(self, binds: Callable[[], int], nodes: Callable[[], int]) -> None:
        self.registry = registry()
        build_info(self.registry, COMPONENT)
        # Values the extender and the refresh own, read at each scrape.
        self.registry.register(
            owned(
                "ascend_scheduler_binds", "counter", "Pods given chips (bound or annotated).", binds
            )
        )
        self.registry.register(
            owned("ascend_scheduler_npu_nodes", "gauge", "NPU nodes offered now.", nodes)
        )
        self._calls = Counter(
            "ascend_scheduler_requests",
            "Extender calls by verb.",
            ["verb"],
            registry=self.registry,
        )
        self._errors = Counter(
            "ascend_scheduler_request_errors",
            "Extender calls that answered an error, by verb.",
            ["verb"],
            registry=self.registry,
        )
        self._latency = Histogram(
            "ascend_scheduler_request_seconds",
            "Time to answer an extender call, by verb.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._decisions = Histogram(
            "ascend_scheduler_decision_seconds",
            "Time to decide an extender call, by verb and the kind of handler the pod chose "
            "(chips, gang, vnpu_static, vnpu_dynamic, no_npu; none when it chose none).",
            ["verb", "kind"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._malformed = Counter(
            "ascend_scheduler_malformed_objects",
            "Objects left out because they break the wire contract, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self._refresh_errors = Counter(
            "ascend_scheduler_refresh_errors",
            "Whole reads of the cluster or maintenance passes that failed.",
            registry=self.registry,
        )
        self._watch_errors = Counter(
            "ascend_scheduler_watch_errors",
            "Lists and watches the API server failed (each retried after a backoff).",
            registry=self.registry,
        )
        self._refusals = Counter(
            "ascend_scheduler_auth_refusals",
            "Calls refused for their credentials, by reason (no_credentials, bad_token, "
            "name_not_allowed, verb_not_allowed).",
            ["reason"],
            registry=self.registry,
        )
        self._loop_errors = Counter(
            "ascend_scheduler_loop_errors",
            "Unexpected failures a watch loop survived, by loop.",
            ["loop"],
            registry=self.registry,
        )
        self._vnpu_restarts = 0

    def read(self, view: Callable[[], ClusterView], gang_ttl: float) -> None:
        """Report the series read from the state at each scrape."""

        def collect() -> Iterable[Family]:
            now = view()  # one pass under the state's lock per scrape
            yield from cluster_families(now, gang_ttl)
            yield self._restarts(now.restarts)

        self.registry.register(collect)

    def _restarts(self, counted: Mapping[str, int]) -> Family:
        values = {**dict.fromkeys(RESTART_KINDS, 0), **counted, VNPU: self._vnpu_restarts}
        return Family(
            "ascend_scheduler_fault_restarts",
            "counter",
            "Restarts begun, by kind: a fault job found (fault_scheduling), a failure of a "
            "fault-retry-times job (fault_retry), a gang partly running past the TTL "
            "(gang_restart), a pod whose vNPU could not be made deleted (vnpu).",
            [("_total", (("kind", k),), float(values[k])) for k in RESTART_KINDS],
        )

    @property
    def refresh_errors(self) -> int:
        return int(self.registry.value("ascend_scheduler_refresh_errors_total") or 0)

    def malformed(self, kind: str) -> None:
        self._malformed.labels(kind).inc()

    def refresh_failed(self) -> None:
        self._refresh_errors.inc()

    def watch_failed(self) -> None:
        self._watch_errors.inc()

    def refused(self, reason: str) -> None:
        self._refusals.labels(reason).inc()

    def loop_failed(self, loop: str) -> None:
        self._loop_errors.labels(loop).inc()

    def vnpu_restarted(self) -> None:
        self._vnpu_restarts += 1

    def record(self, verb: str, seconds: float, failed: bool, kind: str) -> None:
        self._calls.labels(verb).inc()
        if failed:
            self._errors.labels(verb).inc()
        self._latency.labels(verb).observe(seconds)
        self._decisions.labels(verb, kind).observe(seconds)

    def text(self) -> str:
        return exposition(self.registry)
