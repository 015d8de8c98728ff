"""The session: ledger, gangs, faults, filter reasons and the two policies."""

from __future__ import annotations

from typing import Any

import pytest

from contract.chip_names import InvalidInput
from scheduler_core.engine.model import NodeState
from scheduler_core.engine.policies import BINPACK, HUAWEI
from scheduler_core.engine.session import Session
from tests.unit.helpers import chips_of, job, node, place

FULL = range(8)


def test_a_chip_chosen_for_one_pod_is_not_offered_to_the_next_pod_of_the_round() -> None:
    session = Session([node("n", [0, 1])])
    first = chips_of(session.place(job(1, name="a")))
    second = chips_of(session.place(job(1, name="b")))
    assert {first[0][1][0], second[0][1][0]} == {0, 1}
    assert not session.place(job(1, name="c")).feasible


def test_releasing_a_job_returns_its_chips() -> None:
    session = Session([node("n", FULL)])
    session.place(job(8, name="big"))
    assert not session.place(job(1, name="small")).feasible
    released = session.release_job("default/big")
    assert [h.chips for h in released] == [tuple(FULL)]
    assert session.place(job(1, name="small")).feasible


def test_a_job_cannot_be_placed_twice_in_one_session() -> None:
    session = Session([node("a", FULL), node("b", FULL)])
    session.place(job(1))
    assert "already holds chips" in session.place(job(1)).reason


def test_a_gang_of_two_takes_two_whole_free_nodes() -> None:
    nodes = [node("a", FULL), node("b", [0, 1, 2, 3]), node("c", FULL)]
    assert chips_of(place(nodes, 8, 8)) == [("a", tuple(FULL)), ("c", tuple(FULL))]


def test_a_gang_that_does_not_fit_whole_takes_nothing() -> None:
    session = Session([node("a", FULL), node("b", FULL), node("c", [0])])
    decision = session.place(job(8, 8, 8, name="gang"))
    assert not decision.feasible
    assert "task gang-2" in decision.reason
    assert session.usable("a") == tuple(FULL)
    assert session.usable("b") == tuple(FULL)
    assert session.usable("c") == (0,)


def test_a_distributed_job_avoids_network_unhealthy_chips() -> None:
    nodes = [node("a", FULL, network_unhealthy=[3]), node("b", FULL), node("c", FULL)]
    assert [n for n, _ in chips_of(place(nodes, 8, 8))] == ["b", "c"]


def test_a_single_pod_job_may_use_network_unhealthy_chips() -> None:
    assert chips_of(place([node("a", FULL, network_unhealthy=[3])], 8))[0][0] == "a"


def test_a_node_of_another_product_is_rejected_with_upstreams_label_message() -> None:
    # 910B x8's base handler takes the first free chips, which may straddle a 910's rings.
    session = Session([node("r8", FULL)])
    status = session.filter(job(1, product="module910bx8"), 1)["r8"]
    assert status.reason == (
        "check Node r8 label [accelerator-type] Failed, value is module: a module910x8 "
        "node, the job's handler module910bx8 serves module910bx8 nodes"
    )
    assert status.unresolvable


def test_the_default_handler_also_takes_910b_servers_as_upstream_does() -> None:
    # Rings of 4 are legal on a 910B's full mesh; upstream never checks the node's label.
    session = Session([node("b8", [0, 1, 5], product="module910bx8")])
    assert chips_of(session.place(job(2))) == [("b8", (0, 1))]


def test_an_infeasible_job_says_why_for_every_node() -> None:
    session = Session([node("a", [0, 4]), node("b16", FULL, product="module910bx16")])
    reason = session.place(job(2)).reason
    assert reason.startswith("task job-0 of default/job (2 x module910x8): 0/2 nodes are available")
    assert "1 npu topology not meet job require" in reason
    assert "1 check Node b16 label [accelerator-type]" in reason


def test_explain_scores_every_passing_node_and_gives_reasons_for_the_others() -> None:
    session = Session([node("a", [0]), node("b", [0, 1, 2]), node("c", [0, 4])])
    decision = session.place(job(2), explain=True)
    assert decision.scores == {"b": 8 * 30 + 5}
    assert set(decision.rejected) == {"a", "c"}


def test_an_invalid_job_is_rejected_before_any_node_is_looked_at() -> None:
    decision = place([node("a", FULL)], 3)
    assert not decision.feasible
    assert "and not in map[3:{} 5:{} 6:{} 7:{}], actual: task<job-0> req npu: 3" in decision.reason


def test_a_node_snapshot_update_keeps_the_ledger() -> None:
    session = Session([node("n", [0, 1, 2, 3])])
    assert chips_of(session.place(job(2, name="a"))) == [("n", (0, 1))]
    session.upsert_node(node("n", [0, 1, 2, 3, 4]))  # the DeviceInfo has not caught up yet
    assert session.usable("n") == (2, 3, 4)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"free": [9]}, "free chip Ascend910-9 is outside module910x8"),
        ({"free": [0], "allocatable": 9}, "allocatable 9 exceeds"),
        ({"free": [0], "unhealthy": [8]}, "unhealthy chip Ascend910-8"),
    ],
)
def test_a_node_naming_chips_its_product_lacks_is_refused(
    bad: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        Session([node("n", **bad)])


# ---- policies --------------------------------------------------------------------------


def test_huawei_parks_one_chip_on_a_partly_used_node_with_the_best_ring() -> None:
    nodes = [node("a", FULL), node("b", [0, 1, 2, 3, 4, 5])]
    assert chips_of(place(nodes, 1, policy=HUAWEI)) == [("b", (4,))]


def test_binpack_takes_the_node_with_the_fewest_free_chips_that_fits() -> None:
    nodes = [node("a", [0, 1, 2, 4]), node("b", [0, 1]), node("c", FULL)]
    assert chips_of(place(nodes, 2, policy=BINPACK)) == [("b", (0, 1))]


def test_binpack_takes_the_tightest_ring_inside_the_node() -> None:
    assert chips_of(place([node("n", [0, 1, 2, 4, 5])], 1, policy=BINPACK)) == [("n", (4,))]


def test_binpack_keeps_whole_free_nodes_whole_and_prefers_healthy_partial_nodes() -> None:
    faulty = node("a-faulty", [0, 1, 2, 4, 5, 6, 7], unhealthy=[3])
    partial = node("b-partial", [0, 1, 2, 3, 4, 5])
    whole = node("c-whole", FULL)
    assert chips_of(place([faulty, partial, whole], 1, policy=BINPACK))[0][0] == "b-partial"
    assert chips_of(place([faulty, whole], 1, policy=BINPACK))[0][0] == "a-faulty"


def test_binpack_leaves_room_for_a_gang_where_huawei_does_not() -> None:
    """Huawei breaks a whole healthy node for a 4-chip pod rather than use the faulty one."""
    nodes = [node("a", FULL), node("b", FULL), node("c", [0, 1, 2, 4, 5, 6, 7], unhealthy=[3])]
    for policy, gang_fits in ((HUAWEI, False), (BINPACK, True)):
        session = Session(nodes, policy)
        assert session.place(job(4, name="four")).feasible
        assert session.place(job(8, 8, name="gang")).feasible is gang_fits


# ---- refusals in the words of the handler that refuses ----------------------------------------
# Each MindCluster handler reads a node's usable chips first (internal/npu/base/node.go
# GetUsableTopFromNode, whose error a handler passes on as it is), then judges them.


def test_a_node_of_fewer_idle_chips_than_asked_is_refused_before_any_handler() -> None:
    # plugin/job.go preCheckNodePredicate → checkNodeNum, the words of most refusals.
    session = Session([node("n", []), node("b", [0, 1, 2], product="module910bx8")])
    assert session.filter(job(1), 1)["n"].reason == (
        "NPUResourceShortage: huawei.com/Ascend910, task requires 1 NPU cards but node idle is 0"
    )
    assert session.filter(job(4, product="module910bx8"), 4)["b"].reason == (
        "NPUResourceShortage: huawei.com/Ascend910, task requires 4 NPU cards but node idle is 3"
    )


def test_an_a3_node_is_refused_in_the_a3_handlers_words() -> None:
    # ascend910a3/base.go JudgeNodeAndTaskNPU: the base handler's check of the count, then
    # "npu top[%v] is not meet task req(%d)" when the chips are not in whole dies.
    a3 = "module910a3x16"
    # a and c have one whole die and two half ones each: one cached verdict, each node's chips.
    nodes = [node(n, free, product=a3) for n, free in [("a", [0, 2, 4, 5]), ("c", [7, 3, 0, 1])]]
    session = Session(nodes)
    refused = session.filter(job(4, product=a3), 4)
    assert refused["a"].reason == "npu top[[0 2 4 5]] is not meet task req(4)"
    assert refused["c"].reason == "npu top[[0 1 3 7]] is not meet task req(4)"
    assert session.place(job(4, product=a3), ["c"]).reason == (
        "c: npu top[[0 1 3 7]] is not meet task req(4)"
    )
    assert session.filter(job(6, product=a3), 6)["a"].reason == (
        "NPUResourceShortage: huawei.com/Ascend910, task requires 6 NPU cards but node idle is 4"
    )


def test_atlas_850_and_950_superpod_nodes_are_refused_in_their_handlers_words() -> None:
    # Eight idle chips, one network-unhealthy, a job of two pods: the handler refuses.
    sp850, sp950 = "superpod850x8", "superpod950x8"
    sick = [node(n, range(8), product=p, network_unhealthy=[3]) for n, p in [("a", sp850)]]
    sick.append(node("e", range(8), product=sp950, network_unhealthy=[3]))
    session = Session(sick)
    # policy/chip8node8sp/frame.go CheckNodeNPUByTask
    assert session.filter(job(8, 8, product=sp850), 8)["a"].reason == (
        "checkNodeNPUByTask the npus on this node don't satisfy the schedulable topology, "
        "network unhealthy card is [ npu-3 ]"
    )
    # policy/chip8node8ra64sp/node.go checkNodeNPUNums
    assert session.filter(job(8, 8, product=sp950), 8)["e"].reason == (
        "checkNodeNPUByTask the npus on this node don't satisfy the schedulable topology err: "
        "NPUResourceShortage: node don't have enough resource, req<8>, idle<7>"
    )


# ---- sub-healthy nodes ---------------------------------------------------------------------
# MindCluster's fault handler, for every job, after the handler's checks and scores
# (component/ascend-for-volcano/internal/rescheduling/reschedule.go): a job whose
# subHealthyStrategy is not ignore takes no sub-healthy node (checkNodeCurNodeIsFault), and a
# sub-healthy node scores 1 lower, not below 0 (reduceForSubHealthyNodes).


def _sub(
    name: str, free: range, *, card_sub_healthy: bool = False, switch_sub_healthy: bool = False
) -> NodeState:
    plain = node(name, free)
    return NodeState(
        plain.name,
        plain.product,
        plain.free,
        plain.allocatable,
        card_sub_healthy=card_sub_healthy,
        switch_sub_healthy=switch_sub_healthy,
    )


def test_a_sub_healthy_node_scores_one_lower_and_loses_a_tie() -> None:
    nodes = [_sub("a", range(8), card_sub_healthy=True), node("b", range(8))]
    session = Session(nodes)
    assert session.score(job(1), 1) == {"a": 8 * 29 - 1, "b": 8 * 29}
    assert chips_of(session.place(job(1))) == [("b", (0,))]
    # A better ring outweighs it: a 8·32 + 2 − 1, b 8·31.
    nodes = [_sub("a", range(2, 8), switch_sub_healthy=True), node("b", range(8))]
    assert chips_of(Session(nodes).place(job(2))) == [("a", (2, 3))]


def test_binpack_ignores_sub_health_in_its_order() -> None:
    nodes = [_sub("a", range(8), card_sub_healthy=True), node("b", range(8))]
    assert (
        Session(nodes, BINPACK).score(job(1), 1)["a"]
        == Session([node("a", range(8))], BINPACK).score(job(1), 1)["a"]
    )


@pytest.mark.parametrize("strategy", ["graceExit", "forceExit", "hotSwitch"])
def test_a_job_that_exits_on_sub_health_takes_no_sub_healthy_node(strategy: str) -> None:
    labels = {"subHealthyStrategy": strategy}
    nodes = [_sub("a", range(8), switch_sub_healthy=True), node("b", [0])]
    session = Session(nodes)
    refused = session.filter(job(2, labels=labels), 2)
    assert refused["a"].reason == (
        "NodePredicate failed, cardSubHealthy=false andswitchSubHealthy=true, but sub-healthy "
        f"strategy is {strategy}"
    )
    assert session.score(job(2, labels=labels), 2) == {}
    assert not session.place(job(2, labels=labels)).feasible
    assert session.place(job(2, labels={"subHealthyStrategy": "ignore"})).feasible


def test_an_unknown_sub_health_strategy_is_ignore() -> None:
    nodes = [_sub("a", range(8), card_sub_healthy=True)]
    assert Session(nodes).place(job(2, labels={"subHealthyStrategy": "later"})).feasible
