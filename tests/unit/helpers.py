"""Small builders so tests read like the rules they check."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scheduler_core import Decision, Job, NodeState, Session, Task
from scheduler_core.policies import DEFAULT_POLICY, Policy
from scheduler_core.products import product_by_name


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
