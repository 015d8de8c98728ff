"""half910x4, card910x2, module910bx8 and module910bx16: upstream cases 13-15 and rules."""

from __future__ import annotations

import pytest

from chip_topology.products import (
    CARD_910X2,
    HALF_910X4,
    MODULE_910BX8,
    MODULE_910BX16,
    Product,
    huawei_score,
    mask_of,
)
from tests.unit.helpers import chips_of, node, place


def score(product: Product, free: list[int], req: int, alloc: int, dist: bool = False) -> float:
    return huawei_score(product, mask_of(free), alloc, req, dist)


# MindCluster builds half, card and 910B x8 on its base handler (Ascend/mind-cluster
# component/ascend-for-volcano/internal/npu/factory.go initCard910ByBaseHandler): VOL-v5's
# cases 13-15 (ring tables, 8 × (card − best)) are replaced by base/frame.go's score,
# (max − unhealthy) × 100 − usable, whatever the request.
@pytest.mark.parametrize(
    ("free", "expected"), [([0], 399), ([0, 1, 2], 397), ([0, 1], 398), ([0, 1, 2, 3], 396)]
)
def test_half_scores_as_the_base_handler(free: list[int], expected: float) -> None:
    assert score(HALF_910X4, free, 1, alloc=4) == expected


@pytest.mark.parametrize(("free", "req", "expected"), [([0], 1, 799), ([0, 1], 2, 798)])
def test_card_scores_as_the_base_handler(free: list[int], req: int, expected: float) -> None:
    assert score(CARD_910X2, free, req, alloc=8) == expected


def test_half_takes_the_first_free_chips_in_id_order() -> None:
    # base/node.go GetUsableTopFromNode sorts the annotation's chips numerically.
    nodes = [node("n", [2, 0, 3], product="half910x4")]
    assert chips_of(place(nodes, 2, product="half910x4")) == [("n", (0, 2))]


def test_card_two_chips_need_both_chips_free() -> None:
    assert not place([node("n", [1], product="card910x2")], 2, product="card910x2").feasible


def test_910bx8_score_is_the_base_handlers() -> None:
    # (8 − 0 unhealthy) × 100 − 3 usable (VOL-v5's 8 × (alloc − (free − req)) is gone)
    assert score(MODULE_910BX8, [0, 1, 2], 2, alloc=8) == 797


def test_910bx8_any_chips_fit_because_the_server_is_fully_connected() -> None:
    nodes = [node("n", [0, 5, 7], product="module910bx8")]
    assert chips_of(place(nodes, 3, product="module910bx8")) == [("n", (0, 5, 7))]


def test_910bx8_prefers_the_node_with_the_fewest_chips_left_over() -> None:
    nodes = [
        node("a", range(8), product="module910bx8"),
        node("b", [1, 2, 3, 4, 5], product="module910bx8"),
    ]
    assert chips_of(place(nodes, 5, product="module910bx8")) == [("b", (1, 2, 3, 4, 5))]


def test_910bx16_score_takes_the_best_group() -> None:
    # left 5 free, right 8 free, req 4: best = min(5 − 4, 8 − 4) = 1
    free = [0, 1, 2, 3, 4, *range(8, 16)]
    assert score(MODULE_910BX16, free, 4, alloc=16) == 16 * (16 - 1) + (16 - 13)


def test_910bx16_up_to_eight_chips_stay_inside_one_group_of_eight() -> None:
    nodes = [node("n", [4, 5, 6, 7, 8, 9, 10, 11, 12], product="module910bx16")]
    assert chips_of(place(nodes, 5, product="module910bx16")) == [("n", (8, 9, 10, 11, 12))]
    assert not place(
        [node("n", [5, 6, 7, 8, 9], product="module910bx16")], 5, product="module910bx16"
    ).feasible


def test_910bx16_takes_the_lowest_chips_of_a_group_whatever_the_device_info_order() -> None:
    # The DeviceInfo list is sorted as strings: ..., Ascend910-10, ..., Ascend910-15, 8, 9;
    # MindCluster sorts the chips by id before it picks (internal/npu/base/node.go
    # GetUsableTopFromNode), VOL-v5 did not (10, 11 here).
    free = [10, 11, 12, 13, 14, 15, 8, 9]
    nodes = [node("n", free, product="module910bx16")]
    assert chips_of(place(nodes, 2, product="module910bx16")) == [("n", (8, 9))]


def test_910bx16_ten_chips_take_cross_pairs_i_and_i_plus_8() -> None:
    free = [0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12]  # pairs (0,8)…(4,12); 7 has no partner 15
    decision = place([node("n", free, product="module910bx16")], 10, product="module910bx16")
    assert chips_of(decision) == [("n", (0, 8, 1, 9, 2, 10, 3, 11, 4, 12))]
    # 2 × 5 pairs = cross 10; best = aff[5][5] = 0 → 16·16 + (16 − 11)
    assert score(MODULE_910BX16, free, 10, alloc=16) == 16 * 16 + 5


def test_910bx16_ten_chips_fail_with_only_four_cross_pairs() -> None:
    free = [0, 1, 2, 3, 5, 8, 9, 10, 11, 12]  # pairs (0,8)…(3,11); 5 and 12 have no partner
    assert not place(
        [node("n", free, product="module910bx16")], 10, product="module910bx16"
    ).feasible


def test_910bx16_sixteen_chips_take_the_whole_node() -> None:
    decision = place([node("n", range(16), product="module910bx16")], 16, product="module910bx16")
    assert sorted(chips_of(decision)[0][1]) == list(range(16))
