"""The 310, 310P and 300I Duo handlers: the reference's worked cases (``vnpu-and-inference.md``
§7, cases 1–4) and the rules of §2–3, through the engine's session."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from chip_topology.routing import PRODUCTS
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
    # MindCluster's framework passes the handler's error on as it is (plugin/node.go
    # NodePredicate); VOL-v5 prefixed "checkNodeNPUByTask  <node> : ".
    assert status.reason == (
        "checkNodeNPUByTask the npus on this node don't satisfy the "
        "schedulable topology : req npu(3) illegal not meet node top<[0 1 4 5]>"
    )


def test_chip310x4_takes_fragments_first() -> None:
    assert chips([0, 4, 5], "chip310x4", 1) == (0,)
    assert chips([0, 1, 4, 5, 6], "chip310x4", 1) == (0,)
    assert chips([0, 1, 2, 4, 5, 6, 7], "chip310x4", 1) == (0,)
    # The 1-chip card, then one chip of the 2-chip card.
    assert chips([0, 1, 2, 3, 5, 6, 9], "chip310x4", 2) == (9, 5)


def test_chip310x4_refuses_a_node_with_too_few_chips_with_upstreams_reason() -> None:
    # MindCluster's framework refuses a node of fewer idle chips before any handler
    # (plugin/job.go checkNodeNum).
    status = Session([node("n", [0, 1])]).filter(job("chip310x4", 3), 3)["n"]
    assert status.reason == (
        "NPUResourceShortage: huawei.com/Ascend310, task requires 3 NPU cards but node idle is 2"
    )


def test_request_sizes_are_validated_by_the_base_handler_of_each_handler() -> None:
    # Every inference handler keeps the base handler's ValidNPUJob (internal/npu/base/
    # frame.go), each with its MaxNodeNPUNum: 64 on 310 and plain 310P, 32 for the Duo card
    # handler, 16 for the Duo chip handler.
    session = Session([node("n", list(range(8)))])
    for product, limit in [
        ("card310x4", 64),
        ("chip310x4", 64),
        ("ascend310p", 64),
        ("card310px2", 32),
        ("chip310px2", 16),
    ]:
        assert session.place(job(product, limit + 1)).reason == (
            f"expected: job<default/j> req npu num should small than {limit}, and not in map[], "
            f"actual: task<t0> req npu: {limit + 1}, "
        )


def test_a_card_task_larger_than_a_card_passes_validation_and_fits_no_node() -> None:
    # card310x4 validates 1..64 (base ValidNPUJob) and then needs one card with that many
    # free chips (card310x4/task.go JudgeNodeAndTaskNPU): no node ever has one.
    session = Session([node("n", list(range(64)))])
    decision = session.place(job("card310x4", 5), explain=True)
    assert not decision.feasible
    top = " ".join(str(c) for c in range(64))
    assert decision.rejected["n"].endswith(f"req npu(5) illegal not meet node top<[{top}]>")
    assert not session.place(job("card310x4", 64)).feasible, "a whole node is no card"


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
    assert statuses["plain"].reason == "judgeNodeLabel node card label not right, is "
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
    assert statuses["pro"].reason == "judgeNodeLabel node card label not right, is card-300i-pro"
    assert statuses["bare"].reason == "judgeNodeLabel node card label not right, is "


def test_310_chips_are_picked_from_the_lowest_ids_whatever_the_listed_order() -> None:
    # MindCluster's handlers sort the usable chips first (Ascend/mind-cluster
    # component/ascend-for-volcano/internal/npu/base/node.go GetUsableTopFromNode).
    assert chips([5, 6, 4], "chip310x4", 2) == (4, 5)
    assert chips([7, 6, 5, 4, 2, 1], "card310x4", 2) == (1, 2)


# ---- node order: the base handler's score ---------------------------------------------------
# The comparison against Huawei's plugin in a real Volcano v1.12.0: 310P jobs (whatever their
# npu-310-strategy, as no 300I Duo) and 310 chip jobs go to the base handler's
# ScoreBestNPUNodes (Ascend/mind-cluster component/ascend-for-volcano/internal/npu/base/
# frame.go; chip310x4 has none of its own): (64 − unhealthy) × 100 − usable chips, the unhealthy
# ones read from huawei.com/Ascend910-Unhealthy (base/node.go getUnhealthyNPU), which a 310 or
# 310P node never lists: 6400 − usable. We scored every node 0 and took the smallest name.


def test_310p_and_310_chip_jobs_score_a_node_6400_less_its_usable_chips() -> None:
    for product, on in [("ascend310p", "ascend310p"), ("chip310x4", "chip310x4")]:
        nodes = [
            node("a", list(range(8)), on),
            node("b", [0, 1, 2], on),
            NodeState("c", on, (0, 1, 4), 3, unhealthy=frozenset({2, 3})),
        ]
        assert Session(nodes).score(job(product, 1), 1) == {"a": 6392, "b": 6397, "c": 6397}


def test_310p_jobs_go_to_the_fullest_node_that_fits() -> None:
    nodes = [node("a", list(range(8)), "ascend310p"), node("b", [5, 6, 7], "ascend310p")]
    assert Session(nodes).place(job("ascend310p", 2)).placements[0].node == "b"
    assert Session(nodes).place(job("ascend310p", 4)).placements[0].node == "a"


def test_310_chip_jobs_go_to_the_fullest_node_and_its_fragments() -> None:
    # Equal usable chips, equal scores: Volcano picks at random, we take the smallest name.
    nodes = [node("a", list(range(8))), node("b", [1, 2, 3, 4, 5, 6, 7, 9])]
    assert Session(nodes).place(job("chip310x4", 2)).placements[0].node == "a"
    # b fuller (6394 > 6392): its 1-free card's chip, then one of its 2-free card (chip310x4/
    # frame.go SelectNPUFromNode, priority 1, 2, 3, 4).
    nodes = [node("a", list(range(8))), node("b", [1, 2, 3, 4, 5, 9])]
    decision = Session(nodes).place(job("chip310x4", 2))
    assert (decision.placements[0].node, decision.placements[0].chips) == ("b", (9, 4))


def test_a_duo_card_job_of_several_distributed_pods_is_refused_in_its_handlers_words() -> None:
    # ascend310p/card310px2/frame.go ValidNPUJob ("should has"); the chip handler says "should
    # have" (chip310px2/frame.go).
    labels = {"distributed": "true"}
    card = Job("j", "card310px2", (Task("t0", 1), Task("t1", 1)), labels=labels)
    assert Session([]).place(card).reason == (
        "job <default/j> task num <2> is invalid, job with label of distributed=true should "
        "has only 1 npu pod "
    )
    chip = Job("j", "chip310px2-distributed", (Task("t0", 1), Task("t1", 1)))
    assert Session([]).place(chip).reason == (
        "job <default/j> task num <2> is invalid, job with label of distributed=true should "
        "have only 1 npu pod "
    )


def test_inference_handlers_keep_network_unhealthy_chips_for_jobs_of_several_pods() -> None:
    # No inference handler sets network-fault attention (internal/npu/factory.go,
    # ascend310/, ascend310p/): base/node.go GetUsableTopFromNode keeps those chips.
    sick = NodeState("n", "ascend310p", (0, 1), 2, network_unhealthy=frozenset({0, 1}))
    decision = Session([sick]).place(job("ascend310p", 1, 1))
    assert [p.chips for p in decision.placements] == [(0,), (1,)]


def test_duo_distributed_odd_request_on_eight_free_chips_with_a_half_card() -> None:
    # chip310px2/frame.go getBestScore: no OddSingle entry for 8 free chips, so the odd table
    # of nodes without a half card answers: affScoreMapOdd[1][8] = 12 → 8 × (16 − 12).
    duo = node("duo", [1, 2, 3, 4, 5, 6, 7, 9], "chip310px2")  # cards 0 and 4 half used
    assert Session([duo]).score(job("chip310px2-distributed", 1), 1) == {"duo": 32.0}


def test_duo_chip_refusals_in_the_handlers_words() -> None:
    duo = node("duo", [0, 1, 3, 5], "chip310px2")  # card 0 full, cards 1 and 2 half used
    session = Session([duo])
    assert session.filter(job("chip310px2-distributed", 4), 4)["duo"].reason == (
        "checkNodeNPUByTask the npus on this node don't satisfy the schedulable topology : "
        "judgeNodeByTaskNPU task req num<4>, node full cards is 1"
    )
    assert session.filter(job("chip310px2-distributed", 3), 3)["duo"].ok
    duo = node("duo", [0, 1, 3], "chip310px2")
    assert Session([duo]).filter(job("chip310px2-distributed", 3), 3)["duo"].ok
    duo = node("duo", [1, 3, 5], "chip310px2")  # three half cards
    assert Session([duo]).filter(job("chip310px2-distributed", 3), 3)["duo"].reason == (
        "checkNodeNPUByTask the npus on this node don't satisfy the schedulable topology : "
        "judgeNodeByTaskNPU task req num<3>, node full/half cards is 0/3"
    )
