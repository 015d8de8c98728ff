"""The scheduler service's Prometheus metrics."""

from __future__ import annotations

from collections.abc import Callable

from infra.metrics import LATENCY_BUCKETS, Counter, Histogram, exposition, owned, registry


class Metrics:
    """The service's metrics; verbs are label values only when they are known verbs."""

    def __init__(self, binds: Callable[[], int], nodes: Callable[[], int]) -> None:
        self.registry = registry()
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
            "name_not_allowed).",
            ["reason"],
            registry=self.registry,
        )
        self._loop_errors = Counter(
            "ascend_scheduler_loop_errors",
            "Unexpected failures a watch loop survived, by loop.",
            ["loop"],
            registry=self.registry,
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

    def record(self, verb: str, seconds: float, failed: bool) -> None:
        self._calls.labels(verb).inc()
        if failed:
            self._errors.labels(verb).inc()
        self._latency.labels(verb).observe(seconds)

    def text(self) -> str:
        return exposition(self.registry)
