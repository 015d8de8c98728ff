"""Small builders so tests read like the rules they check."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from prometheus_client.parser import text_string_to_metric_families

from chip_topology.routing import product_by_name
from scheduler_core.engine.model import Decision, Job, NodeState, Task
from scheduler_core.engine.policies import DEFAULT_POLICY, Policy
from scheduler_core.engine.session import Session


def node(
    name: str,
    free: Iterable[int],
    *,
    product: str = "module910x8",
    allocatable: int | None = None,
    unhealthy: Iterable[int] = (),
    network_unhealthy: Iterable[int] = (),
) -> NodeState:
    bad = frozenset(unhealthy)
    capacity = product_by_name(product).capacity
    return NodeState(
        name=name,
        product=product,
        free=tuple(free),
        allocatable=capacity - len(bad) if allocatable is None else allocatable,
        unhealthy=bad,
        network_unhealthy=frozenset(network_unhealthy),
    )


def job(
    *requests: int,
    name: str = "job",
    product: str = "module910x8",
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    selector: dict[str, str] | None = None,
) -> Job:
    tasks = tuple(Task(f"{name}-{i}", n) for i, n in enumerate(requests))
    return Job(
        name=name,
        product=product,
        tasks=tasks,
        namespace=namespace,
        labels=labels or {},
        selector=selector or {},
    )


def place(
    nodes: Sequence[NodeState],
    *requests: int,
    policy: Policy = DEFAULT_POLICY,
    product: str = "module910x8",
) -> Decision:
    return Session(nodes, policy).place(job(*requests, product=product))


def chips_of(decision: Decision) -> list[tuple[str, tuple[int, ...]]]:
    assert decision.feasible, decision.reason
    return [(p.node, p.chips) for p in decision.placements]


def server_ip(tor: int, slot: int) -> str:
    """The address of the server at ``slot`` under ToR ``tor`` in ``tor_info``."""
    return f"10.{tor}.0.{slot}"


def tor_info(tors: int, per_tor: int = 4) -> str:
    """A ``basic-tor-node-cm`` ``tor_info``: ToR ``t`` has IP 1.0.0.<t> and servers
    ``server_ip(t, slot)`` at slices 0 … per_tor − 1."""
    return json.dumps(
        {
            "version": "1.0",
            "tor_count": per_tor,
            "server_list": [
                {
                    "tor_id": t,
                    "tor_ip": f"1.0.0.{t}",
                    "server": [
                        {"server_ip": server_ip(t, s), "npu_count": 8, "slice_id": s}
                        for s in range(per_tor)
                    ],
                }
                for t in range(tors)
            ],
        }
    )


def metric(text: str, name: str, **labels: str) -> float | None:
    """One sample of a Prometheus text exposition (None when absent), read with the
    client library's own parser, so a test fails on text Prometheus could not read."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None
