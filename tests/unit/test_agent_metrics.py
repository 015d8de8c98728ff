"""The agent's Prometheus text: counters, failure reasons, the latency histogram."""

from __future__ import annotations

from agent.metrics import AgentMetrics, failure_reason


def test_allocations_failures_and_the_histogram_are_counted() -> None:
    metrics = AgentMetrics()
    metrics.chips_changed(healthy=7, unhealthy=1)
    metrics.allocated(0.002)
    metrics.allocated(0.2)
    metrics.failed("no_pod", 0.9)
    metrics.api_error()
    text = metrics.text()
    assert "ascend_agent_allocations_total 2" in text
    assert 'ascend_agent_allocation_failures_total{reason="no_pod"} 1' in text
    assert "ascend_agent_api_errors_total 1" in text
    assert 'ascend_agent_allocate_seconds_bucket{le="0.0025"} 1' in text
    assert 'ascend_agent_allocate_seconds_bucket{le="0.25"} 2' in text
    assert 'ascend_agent_allocate_seconds_bucket{le="+Inf"} 3' in text
    assert "ascend_agent_allocate_seconds_count 3" in text
    assert 'ascend_agent_chips{health="Unhealthy"} 1' in text


def test_failure_messages_map_to_a_few_stable_reasons() -> None:
    assert failure_reason("not get valid pod (kubelet asked 2 chips)") == "no_pod"
    assert failure_reason("API server: list pods: unreachable") == "api_error"
    assert failure_reason("ns/p: Ascend910-3 is held by ns/q") == "chips_refused"
    assert failure_reason("ns/p: Ascend910-7 is unhealthy") == "chips_refused"
