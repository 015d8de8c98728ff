"""The agent's Prometheus metrics and health endpoints (``--metrics-listen HOST:PORT``).

``/metrics``: allocations, allocation failures by reason, chips by health, Kubernetes API
errors, and an Allocate latency histogram. ``/healthz``: the process answers. ``/readyz``:
registered with the kubelet.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from agent.allocation.base import FailureReason
from infra.histogram import Histogram
from infra.http import PROMETHEUS_TEXT, HttpServer, Response


class AgentMetrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.allocations = 0
        self.failures: dict[str, int] = {}
        self.api_errors = 0
        self._latency = Histogram("ascend_agent_allocate_seconds")
        self._chips: dict[str, int] = {}

    def allocated(self, seconds: float) -> None:
        with self._lock:
            self.allocations += 1
            self._observe(seconds)

    def failed(self, reason: FailureReason, seconds: float) -> None:
        with self._lock:
            self.failures[reason.value] = self.failures.get(reason.value, 0) + 1
            self._observe(seconds)

    def chips_changed(self, healthy: int, unhealthy: int) -> None:
        with self._lock:
            self._chips = {"Healthy": healthy, "Unhealthy": unhealthy}

    def api_error(self) -> None:
        with self._lock:
            self.api_errors += 1

    def _observe(self, seconds: float) -> None:
        self._latency.observe(seconds)

    def text(self) -> str:
        with self._lock:
            lines = [
                "# TYPE ascend_agent_allocations_total counter",
                f"ascend_agent_allocations_total {self.allocations}",
                "# TYPE ascend_agent_allocation_failures_total counter",
            ]
            lines += [
                f'ascend_agent_allocation_failures_total{{reason="{r}"}} {n}'
                for r, n in sorted(self.failures.items())
            ]
            lines += [
                "# TYPE ascend_agent_api_errors_total counter",
                f"ascend_agent_api_errors_total {self.api_errors}",
                "# TYPE ascend_agent_allocate_seconds histogram",
            ]
            lines += self._latency.lines()
            lines.append("# TYPE ascend_agent_chips gauge")
            lines += [
                f'ascend_agent_chips{{health="{h}"}} {n}' for h, n in sorted(self._chips.items())
            ]
        return "\n".join(lines) + "\n"


class MetricsServer:
    def __init__(self, metrics: AgentMetrics, ready: Callable[[], bool]) -> None:
        self._metrics = metrics
        self._ready = ready
        self._server = HttpServer(self._get)

    def _get(self, path: str) -> Response:
        if path == "/metrics":
            return Response.text(200, self._metrics.text(), PROMETHEUS_TEXT)
        if path == "/healthz":
            return Response.text(200, "ok\n")
        if path == "/readyz":
            ready = self._ready()
            return Response.text(200 if ready else 503, "ready\n" if ready else "not registered\n")
        return Response.text(404, "not found\n")

    def start(self, host: str, port: int) -> str:
        return self._server.start(host, port)

    def stop(self) -> None:
        self._server.stop()
