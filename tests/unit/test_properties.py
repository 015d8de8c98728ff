"""Properties that hold for every cluster and every stream of jobs, under both policies."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from chip_topology.products import MODULE_910A3X16, Product, fits, mask_of
from chip_topology.products.a3 import dies
from chip_topology.routing import PRODUCTS
from scheduler_core.engine.model import Decision, Job, NodeState, Task
from scheduler_core.engine.policies import POLICIES
from scheduler_core.engine.session import Session


@dataclass(frozen=True)
class Scenario:
    product: Product
    nodes: tuple[NodeState, ...]
    jobs: tuple[Job, ...]
    policy: str


REQUESTS = {
    "module910x8": [1, 2, 4, 8, 8, 16, 24],
    "half910x4": [1, 2, 4],
    "card910x2": [1, 2, 3, 8],
    "module910bx8": [1, 2, 3, 5, 8, 16],
    "chip4-node8": [1, 2, 3, 4, 5, 8, 16],
    "atlas350-4px16": [1, 3, 4, 6, 8, 12, 16],
    "module910bx16": [1, 2, 4, 7, 8, 10, 12, 16],
}


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    product = PRODUCTS[draw(st.sampled_from(sorted(REQUESTS)))]
    chips = list(range(product.capacity))
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        unhealthy = draw(st.sets(st.sampled_from(chips), max_size=2))
        free = draw(st.permutations(chips))[: draw(st.integers(0, product.capacity))]
        # Some free lists still name unhealthy chips: the engine must not trust them.
        nodes.append(
            NodeState(
                name=f"node-{i:02d}",
                product=product.name,
                free=tuple(free),
                allocatable=product.capacity - len(unhealthy),
                unhealthy=frozenset(unhealthy),
                network_unhealthy=frozenset(draw(st.sets(st.sampled_from(chips), max_size=2))),
            )
        )
    jobs = []
    for j in range(draw(st.integers(1, 12))):
        total = draw(st.sampled_from(REQUESTS[product.name]))
        per_pod = product.capacity if total > product.capacity else total
        pods = total // per_pod
        if product.name != "module910x8" and pods == 1 and draw(st.booleans()):
            pods = draw(st.integers(2, 3))  # distributed jobs of partial nodes are legal here
        tasks = tuple(Task(f"t{k}", per_pod) for k in range(pods))
        jobs.append(Job(f"job-{j}", product.name, tasks))
    return Scenario(product, tuple(nodes), tuple(jobs), draw(st.sampled_from(sorted(POLICIES))))


def run(scenario: Scenario) -> list[Decision]:
    session = Session(scenario.nodes, POLICIES[scenario.policy])
    return [session.place(job) for job in scenario.jobs]


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_every_placement_obeys_the_topology_and_health_rules(scenario: Scenario) -> None:
    product = scenario.product
    nodes = {n.name: n for n in scenario.nodes}
    held: dict[str, set[int]] = {name: set() for name in nodes}
    for job, decision in zip(scenario.jobs, run(scenario), strict=True):
        if not decision.feasible:
            assert decision.placements == ()
            continue
        assert len(decision.placements) == len(job.npu_tasks), "a gang starts whole or not at all"
        gang_nodes = [p.node for p in decision.placements]
        for task, placement in zip(job.npu_tasks, decision.placements, strict=True):
            node, chips = nodes[placement.node], set(placement.chips)
            assert len(placement.chips) == len(chips) == task.npu
            assert chips <= set(node.free) - node.unhealthy, "only free, healthy chips"
            assert not chips & held[placement.node], "no chip is handed out twice"
            held[placement.node] |= chips
            if job.distributed and product.network_fault:  # base/node.go: not on card
                assert not chips & node.network_unhealthy
            if task.npu <= product.group_size:
                assert len({product.group_of(c) for c in chips}) == 1, "one HCCS ring"
            if task.npu == product.capacity:
                assert chips == set(range(product.capacity)), "a whole free node"
        if len(job.npu_tasks) > 1 and job.npu_tasks[0].npu == product.capacity:
            assert len(set(gang_nodes)) == len(gang_nodes), "8 x N takes N distinct nodes"


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_the_same_input_always_gives_the_same_decisions(scenario: Scenario) -> None:
    assert run(scenario) == run(scenario)
    shuffled = Scenario(scenario.product, scenario.nodes[::-1], scenario.jobs, scenario.policy)
    assert [d.placements for d in run(shuffled)] == [d.placements for d in run(scenario)]


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_a_job_is_refused_only_when_no_node_can_host_its_first_pod_or_the_gang(
    scenario: Scenario,
) -> None:
    session = Session(scenario.nodes, POLICIES[scenario.policy])
    for job in scenario.jobs:
        task = job.npu_tasks[0]
        passing = {n for n, s in session.filter(job, task.npu).items() if s.ok}
        decision = session.place(job)
        if decision.feasible:
            assert decision.placements[0].node in passing
        elif len(job.npu_tasks) == 1:
            assert not passing


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_huawei_always_takes_a_best_scored_node(scenario: Scenario) -> None:
    session = Session(scenario.nodes, POLICIES["huawei"])
    for job in scenario.jobs:
        if len(job.npu_tasks) != 1:
            continue
        scores = session.score(job, job.npu_tasks[0].npu)
        decision = session.place(job)
        if decision.feasible:
            assert scores[decision.placements[0].node] == max(scores.values())


@settings(max_examples=100, deadline=None)
@given(scenarios())
def test_releasing_every_job_restores_every_node(scenario: Scenario) -> None:
    session = Session(scenario.nodes, POLICIES[scenario.policy])
    before = {name: session.usable(name) for name in session.nodes}
    for job in scenario.jobs:
        session.place(job)
    for job in scenario.jobs:
        session.release_job(job.key)
    assert {name: session.usable(name) for name in session.nodes} == before


@given(st.integers(0, 2**16 - 1), st.integers(1, 16), st.sampled_from(sorted(POLICIES)))
def test_an_a3_mask_and_its_canonical_form_get_the_same_answers(
    mask: int, req: int, policy_name: str
) -> None:
    # The session caches A3 answers per canonical mask (dies.canonical): filter, score and
    # what a pick leaves must not tell the two apart.
    policy = POLICIES[policy_name]
    same = dies.canonical(mask)
    assert same.bit_count() == mask.bit_count()
    for distributed in (False, True):
        assert fits(MODULE_910A3X16, mask, req, distributed) == fits(
            MODULE_910A3X16, same, req, distributed
        )
        if not fits(MODULE_910A3X16, mask, req, distributed):
            continue
        assert policy.score(MODULE_910A3X16, mask, 16, req, distributed) == policy.score(
            MODULE_910A3X16, same, 16, req, distributed
        )
        left = []
        for m in (mask, same):
            usable = [c for c in range(16) if m >> c & 1]
            chosen = policy.select(MODULE_910A3X16, usable, req, distributed)
            rest = m & ~mask_of(chosen)
            left.append((len(chosen), dies.full_dies(rest), rest.bit_count()))
        assert left[0] == left[1]
