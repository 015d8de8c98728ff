"""The 310, 310P and 300I Duo handlers: the reference's worked cases (``vnpu-and-inference.md``
§7, cases 1–4) and the rules of §2–3, through the engine's session."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chip_topology.products import PRODUCTS
from scheduler_core.engine.model import Job, NodeState, Task
from scheduler_core.engine.policies import POLICIES
from scheduler_core.engine.session import Session


def node(name: str, free: list[int], product: str = "chip310x4") -> NodeState:
    return NodeState(name, product, tuple(free), allocatable=len(free))


def job(product: str, *sizes: int) -> Job:
    return Job("j", product, tuple(Task(f"t{i}", n) for i, n in enumerate(sizes)))


def chips(free: list[int], product: str, req: int) -> tuple[int, ...]:
    decision = Session([node("n", free)]).place(job(product, req))
    assert decision.feasible, decision.reason
    return decision.placements[0].chips


def test_card310x4_scores_a_card_by_how_well_the_request_fills_it() -> None:
    nodes = [
        node("n1", [0]),
        node("n2", [0, 1]),
        node("n3", [0, 1, 2]),
        node("n4", [0, 1, 2, 3]),
        node("n7", [4]),
    ]
    scores = Session(nodes).score(job("card310x4", 1), 1)
    assert scores == {"n1": 32, "n2": 16, "n3": 24, "n4": 8, "n7": 32}


def test_card310x4_takes_the_card_first_on_its_priority_list() -> None:
    assert chips([0, 1, 4, 5, 6], "card310x4", 1) == (4,)  # a 3-free card before a 2-free
    assert chips([0, 1, 4, 5, 6, 7], "card310x4", 1) == (0,)  # then the 2-free card
    session = Session([node("n", [0, 1, 4, 5, 6])])
    session.place(job("card310x4", 1))
    assert session.usable("n") == (0, 1, 5, 6)


def test_card310x4_never_splits_a_task_across_cards() -> None:
    session = Session([node("n", [0, 1, 4, 5])])
    decision = session.place(job("card310x4", 3))
    assert not decision.feasible
    status = session.filter(job("card310x4", 3), 3)["n"]
    assert status.reason == (  # the framework's prefix names the node, two spaces included
        "checkNodeNPUByTask  n : checkNodeNPUByTask the npus on this node don't satisfy the "
        "schedulable topology : req npu(3) illegal not meet node top<[0 1 4 5]>"
    )


def test_chip310x4_takes_fragments_first() -> None:
    assert chips([0, 4, 5], "chip310x4", 1) == (0,)
    assert chips([0, 1, 4, 5, 6], "chip310x4", 1) == (0,)
    assert chips([0, 1, 2, 4, 5, 6, 7], "chip310x4", 1) == (0,)
    # The 1-chip card, then one chip of the 2-chip card.
    assert chips([0, 1, 2, 3, 5, 6, 9], "chip310x4", 2) == (9, 5)


def test_chip310x4_refuses_a_node_with_too_few_chips_with_upstreams_reason() -> None:
    status = Session([node("n", [0, 1])]).filter(job("chip310x4", 3), 3)["n"]
    assert status.reason == (
        "checkNodeNPUByTask  n : "
        "judgeNodeAndTaskNPU node don't have enough resource, req<3>, idle<2>"
    )


def test_request_sizes_are_validated_per_handler() -> None:
    session = Session([node("n", list(range(8)))])
    assert session.place(job("card310x4", 5)).reason == "task t0 req npu 5 is invalid"
    assert (
        session.place(job("chip310x4", 65)).reason == "taskt0 req npu num65 is invalid"
    )  # upstream: task<name>


def test_a_310_task_never_lands_on_a_910_or_310p_node() -> None:
    nodes = [
        NodeState("train", "module910x8", tuple(range(8)), 8),
        node("p", list(range(4)), "ascend310p"),
    ]
    statuses = Session(nodes).filter(job("chip310x4", 1), 1)
    assert statuses["train"].reason == (
        "node train has huawei.com/Ascend910 chips, the task asks for huawei.com/Ascend310"
    )
    assert not statuses["p"].ok
    assert not Session(nodes).place(job("chip310x4", 1)).feasible


def test_310p_whole_chips_are_the_first_free_by_id_whatever_the_listed_order() -> None:
    # MindCluster's base handler sorts the node's usable chips (Ascend/mind-cluster
    # component/ascend-for-volcano/internal/npu/base/node.go GetUsableTopFromNode); VOL-v5's
    # took them as listed, which chose 3 and 0 here.
    session = Session([node("p", [3, 0, 2], "ascend310p")])
    decision = session.place(job("ascend310p", 2))
    assert decision.placements[0].chips == (0, 2)


def test_duo_chip_handler_takes_half_used_cards_first_and_only_on_duo_nodes() -> None:
    duo = node("duo", [0, 1, 3, 4, 5], "chip310px2")
    plain = node("plain", [0, 1, 3], "ascend310p")
    session = Session([duo, plain])
    statuses = session.filter(job("chip310px2", 2), 2)
    assert statuses["plain"].reason.startswith(
        "checkNodeNPUByTask  plain : judgeNodeLabel node card label not right, is "
    )
    assert session.place(job("chip310px2", 2)).placements[0].chips == (3, 0)


def test_duo_card_handler_scores_and_picks_a_card() -> None:
    nodes = [node("a", [0, 1], "chip310px2"), node("b", [0, 2, 3], "chip310px2")]
    scores = Session(nodes).score(job("card310px2", 1), 1)
    assert scores == {"a": 8.0, "b": 16.0}  # b has a card with exactly one free chip
    assert Session(nodes).place(job("card310px2", 1)).placements[0].chips == (0,)


def test_duo_distributed_pod_takes_whole_cards_and_one_half_card_chip_when_odd() -> None:
    duo = node("duo", [1, 2, 3, 4, 5], "chip310px2")  # card 0 half used, cards 1-2 full
    session = Session([duo])
    decision = session.place(job("chip310px2-distributed", 3))
    assert decision.placements[0].chips == (1, 2, 3)
    # Free 5 with a half-used card, 3 asked: OddSingle[3][5] = 3 → 8 × (16 − 3).
    assert Session([duo]).score(job("chip310px2-distributed", 3), 3) == {"duo": 104.0}
    assert not Session([duo]).place(job("chip310px2-distributed", 2, 2)).feasible


INFERENCE = ["card310x4", "chip310x4", "ascend310p", "card310px2", "chip310px2"]
NODE_PRODUCT = {"card310x4": "chip310x4", "card310px2": "ascend310p"}


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(INFERENCE),
    st.lists(st.lists(st.integers(0, 15), unique=True, max_size=16), min_size=1, max_size=4),
    st.lists(st.integers(1, 6), min_size=1, max_size=10),
    st.sampled_from(sorted(POLICIES)),
)
def test_no_chip_is_given_twice_and_every_card_task_stays_on_one_card(
    product: str, frees: list[list[int]], sizes: list[int], policy: str
) -> None:
    handler = PRODUCTS[product]
    on_node = NODE_PRODUCT.get(product, product)
    nodes = [node(f"n{i}", free, on_node) for i, free in enumerate(frees)]
    session = Session(nodes, POLICIES[policy])
    given: dict[str, set[int]] = {n.name: set() for n in nodes}
    for k, size in enumerate(sizes):
        decision = session.place(Job(f"j{k}", product, (Task("t", size),)))
        for placement in decision.placements:
            taken = set(placement.chips)
            assert len(taken) == size
            assert taken <= set(frees[int(placement.node[1:])])
            assert not taken & given[placement.node], "a chip given twice"
            given[placement.node] |= taken
            if handler.rule.value == "card":
                assert len({c // handler.group_size for c in taken}) == 1


def test_each_refused_node_is_named_with_its_own_label_though_their_verdict_is_shared() -> None:
    # Two 310P nodes alike in chips share one cached verdict; upstream's words name each node
    # and print its infer-card-type label as it is (empty when it has none).
    pro = NodeState("pro", "ascend310p", (0, 1), 2, card_type="card-300i-pro")
    bare = NodeState("bare", "ascend310p", (0, 1), 2)
    statuses = Session([pro, bare]).filter(job("chip310px2", 1), 1)
    assert statuses["pro"].reason == (
        "checkNodeNPUByTask  pro : judgeNodeLabel node card label not right, is card-300i-pro"
    )
    assert statuses["bare"].reason == (
        "checkNodeNPUByTask  bare : judgeNodeLabel node card label not right, is "
    )


def test_310_chips_are_picked_from_the_lowest_ids_whatever_the_listed_order() -> None:
    # MindCluster's handlers sort the usable chips first (Ascend/mind-cluster
    # component/ascend-for-volcano/internal/npu/base/node.go GetUsableTopFromNode).
    assert chips([5, 6, 4], "chip310x4", 2) == (4, 5)
    assert chips([7, 6, 5, 4, 2, 1], "card310x4", 2) == (1, 2)
