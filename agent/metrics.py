"""The agent's Prometheus metrics and health endpoints (``--metrics-listen HOST:PORT``).

``/metrics``: allocations, allocation failures by reason, chips by health, Kubernetes API
errors, and an Allocate latency histogram. ``/healthz``: the process answers. ``/readyz``:
registered with the kubelet.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.allocation.base import FailureReason
from infra.histogram import Histogram


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
        self._server: ThreadingHTTPServer | None = None

    def start(self, host: str, port: int) -> str:
        metrics, ready = self._metrics, self._ready

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                """Scrapes every few seconds: not worth a log line each."""

            def do_GET(self) -> None:
                if self.path == "/metrics":
                    code, body, kind = 200, metrics.text(), "text/plain; version=0.0.4"
                elif self.path == "/healthz":
                    code, body, kind = 200, "ok\n", "text/plain"
                elif self.path == "/readyz":
                    code = 200 if ready() else 503
                    body, kind = ("ready\n" if code == 200 else "not registered\n"), "text/plain"
                else:
                    code, body, kind = 404, "not found\n", "text/plain"
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer((host, port), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://{host}:{server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
