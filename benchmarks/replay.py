"""Replay a job trace through the engine: arrivals, a queue, placements and departures.

Pure: jobs in, measurements out. It is how a placement policy is judged on real workloads
(queueing delay per size class, jobs blocked by fragmentation) while every placement is
re-checked against the topology rules, so a policy that wins by cheating shows up as a
violation instead of a gain. The replayed servers and the handler of its jobs are read as the
scheduler reads a cluster's: the nodes' labels and the jobs' annotations through the one routing
table (``chip_topology.routing``), a handler refused where it does not serve the nodes.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType

from chip_topology.products import Product
from chip_topology.routing import product_for_resource, product_of_node, serves
from contract.chip_names import ASCEND910, KIND_OF_RESOURCE, InvalidInput
from scheduler_core.engine.model import Decision, Job, NodeState, Task
from scheduler_core.engine.policies import Policy
from scheduler_core.engine.session import Session


class QueueMode(Enum):
    FIFO = "fifo"  # the head of the queue blocks everyone behind it
    BACKFILL = "backfill"  # any queued job that fits may start


NONE: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Fleet:
    """The replayed servers and how the trace's jobs ask for them: the nodes' labels (their
    ``accelerator-type``), every job's annotations (``huawei.com/schedule_policy``) and the
    resource its pods ask. The default: Atlas 800 910 servers, jobs of ``module910x8``."""

    node_labels: Mapping[str, str] = field(default_factory=lambda: NONE)
    job_annotations: Mapping[str, str] = field(default_factory=lambda: NONE)
    resource: str = ASCEND910.resource

    def products(self) -> tuple[Product, Product]:
        """The nodes' product and the jobs' handler, routed as the scheduler routes them;
        InvalidInput naming what no handler takes, or a handler that does not serve the
        nodes."""
        kind = KIND_OF_RESOURCE.get(self.resource)
        if kind is None:
            raise InvalidInput(f"{self.resource} is not a whole-chip NPU resource")
        node = product_of_node(kind, self.node_labels)
        job = product_for_resource(self.resource, NONE, self.job_annotations, NONE)
        if not serves(node, job):
            raise InvalidInput(f"the jobs' handler {job.name} does not serve {node.name} nodes")
        return node, job


@dataclass(frozen=True, slots=True)
class TraceJob:
    idx: int
    submit: float
    duration: float
    chips_per_pod: int
    pods: int

    @property
    def chips(self) -> int:
        return self.chips_per_pod * self.pods

    @property
    def size_class(self) -> str:
        return f"{self.chips_per_pod}" if self.pods == 1 else "8N"


@dataclass(frozen=True, slots=True)
class Waits:
    count: int
    mean: float
    p50: float
    p95: float
    p99: float

    @staticmethod
    def of(values: Sequence[float]) -> Waits:
        if not values:
            return Waits(0, 0.0, 0.0, 0.0, 0.0)
        ordered = sorted(values)
        q = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else []

        def pct(p: int) -> float:
            return q[p - 1] if q else ordered[0]

        return Waits(len(ordered), statistics.fmean(ordered), pct(50), pct(95), pct(99))


@dataclass(frozen=True, slots=True)
class ReplayResult:
    policy: str
    nodes: int
    mode: QueueMode
    overall: Waits
    by_class: dict[str, Waits]
    fragmentation_blocked: int
    violations: int
    unfinished: int
    makespan: float
    waits: tuple[float, ...]  # every started job's wait (s), ascending: the distribution


@dataclass
class _State:
    session: Session
    queue: list[TraceJob] = field(default_factory=list)
    free_chips: int = 0
    waits: dict[int, float] = field(default_factory=dict)
    blocked: set[int] = field(default_factory=set)
    violations: int = 0


def _job_of(trace_job: TraceJob, product: Product) -> Job:
    tasks = tuple(Task(f"p{k}", trace_job.chips_per_pod) for k in range(trace_job.pods))
    return Job(f"j{trace_job.idx}", product.name, tasks)


def count_violations(decision: Decision, product: Product) -> int:
    """Placements that break a topology rule (must always be 0)."""
    bad = 0
    nodes = [p.node for p in decision.placements]
    if len(set(nodes)) != len(nodes) and len(nodes) > 1:
        bad += 1
    for placement in decision.placements:
        chips = placement.chips
        if len(chips) <= product.group_size and len({product.group_of(c) for c in chips}) != 1:
            bad += 1
        if len(chips) == product.capacity and sorted(chips) != list(range(product.capacity)):
            bad += 1
    return bad


def replay(
    jobs: Iterable[TraceJob],
    nodes: int,
    policy: Policy,
    mode: QueueMode = QueueMode.BACKFILL,
    fleet: Fleet = Fleet(),
) -> ReplayResult:
    product, handler = fleet.products()
    pending = sorted(jobs, key=lambda j: (j.submit, j.idx))
    cluster = [
        NodeState(f"node-{i:04d}", product.name, tuple(range(product.capacity)), product.capacity)
        for i in range(nodes)
    ]
    state = _State(Session(cluster, policy), free_chips=nodes * product.capacity)
    by_idx = {j.idx: j for j in pending}
    running: list[tuple[float, int]] = []
    now, arrival = 0.0, 0
    while arrival < len(pending) or running:
        next_arrival = pending[arrival].submit if arrival < len(pending) else float("inf")
        next_end = running[0][0] if running else float("inf")
        now = min(next_arrival, next_end)
        freed = False
        while running and running[0][0] <= now:
            _, idx = heapq.heappop(running)
            state.session.release_job(f"default/j{idx}")
            state.free_chips += by_idx[idx].chips
            freed = True
        fresh = []
        while arrival < len(pending) and pending[arrival].submit <= now:
            fresh.append(pending[arrival])
            arrival += 1
        if freed:
            state.queue.extend(fresh)
            candidates = state.queue
        elif mode is QueueMode.BACKFILL or not state.queue:
            # Nothing was freed: jobs that failed before still fail; try only newcomers.
            state.queue.extend(fresh)
            candidates = fresh
        else:
            state.queue.extend(fresh)
            candidates = []
        for started in _pass(state, candidates, mode, (product, handler), now):
            heapq.heappush(running, (now + started.duration, started.idx))
        if not running and arrival >= len(pending):
            break
    per_class: dict[str, list[float]] = {}
    for idx, wait in state.waits.items():
        per_class.setdefault(by_idx[idx].size_class, []).append(wait)
    return ReplayResult(
        policy=policy.name,
        nodes=nodes,
        mode=mode,
        overall=Waits.of(list(state.waits.values())),
        by_class={k: Waits.of(v) for k, v in sorted(per_class.items())},
        fragmentation_blocked=len(state.blocked),
        violations=state.violations,
        unfinished=len(state.queue),
        makespan=now,
        waits=tuple(sorted(state.waits.values())),
    )


def _pass(
    state: _State,
    candidates: list[TraceJob],
    mode: QueueMode,
    products: tuple[Product, Product],
    now: float,
) -> list[TraceJob]:
    """One scheduling pass (``products``: the nodes', the jobs' handler). Feasibility only
    shrinks during a pass, so once a k-chip pod fails every pod of k or more chips (and
    every gang) is skipped without asking the engine, and once an N-node gang fails so is
    every gang of N or more."""
    product, handler = products
    started: list[TraceJob] = []
    smallest_failed_pod = product.capacity + 1
    smallest_failed_gang = 1 << 30
    for trace_job in list(candidates):
        gang = trace_job.pods > 1
        if trace_job.chips_per_pod >= smallest_failed_pod or (
            gang and trace_job.pods >= smallest_failed_gang
        ):
            decision = None
        else:
            decision = state.session.place(_job_of(trace_job, handler))
        if decision is not None and decision.feasible:
            state.violations += count_violations(decision, product)
            state.queue.remove(trace_job)
            state.free_chips -= trace_job.chips
            state.waits[trace_job.idx] = now - trace_job.submit
            started.append(trace_job)
            continue
        if state.free_chips >= trace_job.chips:
            state.blocked.add(trace_job.idx)
        if gang:
            smallest_failed_gang = min(smallest_failed_gang, trace_job.pods)
        else:
            smallest_failed_pod = min(smallest_failed_pod, trace_job.chips_per_pod)
        if mode is QueueMode.FIFO:
            break
    return started
