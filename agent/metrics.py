"""The agent's Prometheus metrics and health endpoints (``--metrics-listen HOST:PORT``).

``/metrics``: allocations, allocation failures by reason, chips by health, Kubernetes API
errors, and an Allocate latency histogram. ``/healthz``: the process answers. ``/readyz``:
registered with the kubelet.
"""

from __future__ import annotations

from agent.allocation.base import FailureReason
from infra.metrics import LATENCY_BUCKETS, Counter, Gauge, Histogram, exposition, registry


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = registry()
        self._allocations = Counter(
            "ascend_agent_allocations", "Allocate calls answered.", registry=self.registry
        )
        self._failures = Counter(
            "ascend_agent_allocation_failures",
            "Allocate calls refused, by reason.",
            ["reason"],
            registry=self.registry,
        )
        for reason in FailureReason:  # every reason shows, at 0 until it happens
            self._failures.labels(reason.value)
        self._api_errors = Counter(
            "ascend_agent_api_errors",
            "Kubernetes API calls of the agent's loops that failed.",
            registry=self.registry,
        )
        self._loop_errors = Counter(
            "ascend_agent_loop_errors",
            "Unexpected failures a background loop survived, by loop.",
            ["loop"],
            registry=self.registry,
        )
        self._latency = Histogram(
            "ascend_agent_allocate_seconds",
            "Time to answer an Allocate call.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self._chips = Gauge(
            "ascend_agent_chips",
            "Chips of this node by health.",
            ["health"],
            registry=self.registry,
        )

    def allocated(self, seconds: float) -> None:
        self._allocations.inc()
        self._latency.observe(seconds)

    def failed(self, reason: FailureReason, seconds: float) -> None:
        self._failures.labels(reason.value).inc()
        self._latency.observe(seconds)

    def chips_changed(self, healthy: int, unhealthy: int) -> None:
        self._chips.labels("Healthy").set(healthy)
        self._chips.labels("Unhealthy").set(unhealthy)

    def api_error(self) -> None:
        self._api_errors.inc()

    def loop_error(self, loop: str) -> None:
        self._loop_errors.labels(loop).inc()

    def text(self) -> str:
        return exposition(self.registry)
