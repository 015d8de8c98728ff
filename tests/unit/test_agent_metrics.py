"""The agent's Prometheus text: counters, failure reasons, the latency histogram."""

from __future__ import annotations

from agent.allocation.base import FailureReason
from agent.metrics import AgentMetrics
from tests.unit.helpers import metric


def test_allocations_failures_and_the_histogram_are_counted() -> None:
    metrics = AgentMetrics()
    metrics.chips_changed(healthy=7, unhealthy=1)
    metrics.allocated(0.002)
    metrics.allocated(0.2)
    metrics.failed(FailureReason.NO_POD, 0.9)
    metrics.api_error()
    text = metrics.text()
    assert metric(text, "ascend_agent_allocations_total") == 2
    assert metric(text, "ascend_agent_allocation_failures_total", reason="no_pod") == 1
    assert metric(text, "ascend_agent_allocation_failures_total", reason="api_error") == 0
    assert metric(text, "ascend_agent_api_errors_total") == 1
    assert metric(text, "ascend_agent_allocate_seconds_bucket", le="0.0025") == 1
    assert metric(text, "ascend_agent_allocate_seconds_bucket", le="0.25") == 2
    assert metric(text, "ascend_agent_allocate_seconds_bucket", le="+Inf") == 3
    assert metric(text, "ascend_agent_allocate_seconds_count") == 3
    assert metric(text, "ascend_agent_chips", health="Unhealthy") == 1
    assert "# HELP ascend_agent_allocations_total Allocate calls answered." in text
    assert metric(text, "process_resident_memory_bytes") is not None


def test_each_failure_reason_has_its_own_metric_label_and_event_reason() -> None:
    metrics = AgentMetrics()
    for reason in FailureReason:
        metrics.failed(reason, 0.01)
    text = metrics.text()
    for label in ("invalid_request", "no_pod", "chips_refused", "api_error"):
        assert metric(text, "ascend_agent_allocation_failures_total", reason=label) == 1
    assert FailureReason.CHIPS_REFUSED.event_reason == "NPUChipsRefused"
    assert len({r.event_reason for r in FailureReason}) == len(FailureReason)
