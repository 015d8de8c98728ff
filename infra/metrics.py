"""Prometheus metrics on ``prometheus_client``: one registry per component instance (a test
process runs many), with the process collector, exposed as the text format."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


def registry() -> CollectorRegistry:
    """A registry with the process metrics (CPU, memory, open files, start time)."""
    fresh = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=fresh)
    return fresh


def exposition(of: CollectorRegistry) -> str:
    return generate_latest(of).decode()
