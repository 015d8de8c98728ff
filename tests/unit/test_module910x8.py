"""module910x8: two HCCS rings of four (0-3, 4-7). Upstream cases are numbered as the
Volcano plugin's ``module910x8/frame_test.go`` cases we list; the rest are derived from the
rules by hand."""

from __future__ import annotations

import pytest

from chip_topology.products import MODULE_910X8, huawei_score, mask_of
from scheduler_core.engine.session import Session, filter_node
from tests.unit.helpers import chips_of, job, node, place


def score(free: list[int], req: int, allocatable: int = 8) -> float:
    return huawei_score(MODULE_910X8, mask_of(free), allocatable, req, False)


@pytest.mark.parametrize(
    ("case", "free", "expected"),
    [
        # 8 × (8·4 − best) + (8 − free); best from the ring table row for 1 chip: [0, 2, 1, 3]
        (1, [0], 263),  # ring of 1 → best 0: 8·32 + 7
        (2, [0, 1, 2], 253),  # ring of 3 → best 1: 8·31 + 5
        (3, [4, 5], 246),  # ring of 2 → best 2: 8·30 + 6
        (4, [4, 5, 6, 7], 236),  # ring of 4 → best 3: 8·29 + 4
    ],
)
def test_upstream_one_chip_scores(case: int, free: list[int], expected: float) -> None:
    assert score(free, 1) == expected


def test_upstream_case5_one_chip_takes_the_lone_chip_of_a_ring_and_leaves_the_rest() -> None:
    session = Session([node("n", [0, 4, 5])])
    assert chips_of(session.place(job(1))) == [("n", (0,))]
    assert session.usable("n") == (4, 5)


def test_upstream_case6_network_health_is_ignored_for_a_single_pod_job() -> None:
    decision = place([node("n", [0, 1, 2, 4, 5], network_unhealthy=[0])], 1)
    assert chips_of(decision) == [("n", (0,))]


def test_upstream_case7_one_chip_prefers_a_ring_of_three_over_a_ring_of_two() -> None:
    assert chips_of(place([node("n", [0, 1, 4, 5, 6])], 1)) == [("n", (4,))]


def test_upstream_case8_one_chip_prefers_a_ring_of_two_over_a_ring_of_four() -> None:
    assert chips_of(place([node("n", [0, 1, 4, 5, 6, 7])], 1)) == [("n", (0,))]


def test_upstream_case9_four_chips_fit_a_whole_ring_of_a_single_pod_job() -> None:
    n = node("n", [0, 1, 2, 3], network_unhealthy=[0])
    assert filter_node(n, n.free, MODULE_910X8, 4, distributed=False).ok


def test_upstream_case10_four_chips_do_not_fit_two_half_rings() -> None:
    # Four chips idle but no ring of four: the handler's words. With fewer idle chips than
    # asked, the framework refuses first (plugin/job.go checkNodeNum), as for [0, 1, 4].
    n = node("n", [0, 1, 4, 5])
    status = filter_node(n, n.free, MODULE_910X8, 4, distributed=False)
    assert status.reason == "npu topology not meet job require,network unhealthy card is [  ]"
    n = node("n", [0, 1, 4])
    assert filter_node(n, n.free, MODULE_910X8, 4, distributed=False).reason == (
        "NPUResourceShortage: huawei.com/Ascend910, task requires 4 NPU cards but node idle is 3"
    )


def test_upstream_case11_the_rejection_names_the_network_unhealthy_chips() -> None:
    n = node("n", [0, 1, 4, 5], network_unhealthy=[5])
    status = filter_node(n, n.free, MODULE_910X8, 4, distributed=True)
    assert status.reason == (
        "npu topology not meet job require,network unhealthy card is [ Ascend910-5 ]"
    )


def test_two_chips_take_the_ring_with_exactly_two_free() -> None:
    assert chips_of(place([node("n", [0, 1, 2, 5, 6])], 2)) == [("n", (5, 6))]


def test_two_chips_prefer_a_ring_of_four_over_a_ring_of_three() -> None:
    assert chips_of(place([node("n", [0, 1, 2, 4, 5, 6, 7])], 2)) == [("n", (4, 5))]


def test_two_chips_never_take_one_chip_from_each_ring() -> None:
    decision = place([node("n", [3, 4])], 2)
    assert not decision.feasible


def test_left_ring_wins_a_tie() -> None:
    assert chips_of(place([node("n", [0, 1, 4, 5])], 2)) == [("n", (0, 1))]


def test_chips_are_the_lowest_of_the_ring_whatever_the_device_info_order() -> None:
    # MindCluster sorts a node's usable chips before picking (component/ascend-for-volcano/
    # internal/npu/base/node.go GetUsableTopFromNode); VOL-v5 took them as listed (3, 1 here).
    assert chips_of(place([node("n", [3, 1, 2, 0])], 2)) == [("n", (0, 1))]


def test_eight_chips_take_a_whole_free_node() -> None:
    decision = place([node("a", [0, 1, 2, 3, 4, 5, 6]), node("b", range(8))], 8)
    assert chips_of(decision) == [("b", tuple(range(8)))]


def test_eight_chips_never_land_on_a_node_with_a_faulty_chip() -> None:
    decision = place([node("a", range(8), unhealthy=[6])], 8)
    assert not decision.feasible


@pytest.mark.parametrize(
    ("free", "req", "expected"),
    [
        ([0, 1], 2, 8 * 32 + 6),  # ring of 2 is exact for 2 chips: best 0
        ([0, 1, 2, 3], 2, 8 * 31 + 4),  # ring of 4 → best 1
        ([0, 1, 2], 2, 8 * 30 + 5),  # ring of 3 → best 2
        ([0, 1, 2, 3, 4, 5], 2, 8 * 32 + 2),  # min over rings: the ring of 2 gives 0
        ([0, 1, 2, 3], 4, 8 * 32 + 4),
        (list(range(8)), 8, 8 * 32),
        (list(range(8)), 1, 8 * 29),  # both rings of 4 → best 3
    ],
)
def test_node_score_formula(free: list[int], req: int, expected: float) -> None:
    assert score(free, req) == expected


def test_a_node_with_a_faulty_chip_scores_32_lower_per_missing_chip() -> None:
    assert score([0], 1, allocatable=8) - score([0], 1, allocatable=7) == 32


def test_a_node_with_a_faulty_chip_is_used_only_when_no_healthy_node_fits() -> None:
    faulty = node("a-faulty", [0, 4, 5, 6, 7], unhealthy=[3])
    healthy = node("b-healthy", [0, 1, 2, 3, 4, 5, 6, 7])
    assert chips_of(place([faulty, healthy], 1))[0][0] == "b-healthy"
    assert chips_of(place([faulty, node("b-busy", [])], 1))[0][0] == "a-faulty"


def test_the_fullest_fitting_node_wins_for_one_chip() -> None:
    nodes = [node("a", range(8)), node("b", [0, 4, 5]), node("c", [1, 2, 3])]
    assert chips_of(place(nodes, 1)) == [("b", (0,))]


def test_unhealthy_chips_are_never_placed_even_when_listed_free() -> None:
    decision = place([node("n", [0, 1, 2, 3], unhealthy=[0, 1])], 2)
    assert chips_of(decision) == [("n", (2, 3))]


def test_equal_scores_go_to_the_smallest_node_name() -> None:
    nodes = [node("n3", range(8)), node("n1", range(8)), node("n2", range(8))]
    assert chips_of(place(nodes, 4))[0][0] == "n1"


# ---- jobs of several pods ------------------------------------------------------------------
# MindCluster v26.1.0 validates every pod of a module910x8 job alike (base ValidNPUJob,
# internal/npu/base/frame.go; the handler leaves out 3, 5, 6, 7) and places pod by pod with the
# same ring rules and node score, so a job of N pods of 4 chips fits where each pod finds a ring.


def test_two_pods_of_four_chips_each_take_a_ring_each_on_the_fullest_server() -> None:
    # Pod 0: both servers score 8·(32 − 0) + 0; the tie goes to a (Volcano: at random) and
    # the left ring (priority [4]). Pod 1: a now has its right ring alone, 8·32 + 4 = 260 >
    # 256, so it goes beside pod 0, as Huawei's per-task allocation scores it.
    decision = place([node("a", range(8)), node("b", range(8))], 4, 4)
    assert chips_of(decision) == [("a", (0, 1, 2, 3)), ("a", (4, 5, 6, 7))]


def test_a_distributed_pod_of_four_leaves_the_network_unhealthy_chips() -> None:
    # base/node.go GetUsableTopFromNode: a job of several pods drops the -NetworkUnhealthy chips
    # (module910x8 is WithNetworkFault), so chip 1 spoils the left ring for it.
    sick = node("a", range(8), network_unhealthy=[1])
    decision = place([sick], 4, 4)
    assert not decision.feasible
    assert chips_of(place([sick, node("b", range(8))], 4, 4)) == [
        ("a", (4, 5, 6, 7)),
        ("b", (0, 1, 2, 3)),
    ]
