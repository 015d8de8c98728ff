"""Logical SuperPoD selection on upstream's own vectors (``superpod/frame_test.go``,
``mindie_job_test.go``: U and M) and on vectors traced through upstream's code (D, SH)."""

from __future__ import annotations

import re

import pytest

from scheduler_core.engine.superpod import (
    SOFT,
    Block,
    SuperPodChoice,
    SuperPodInvalid,
    SuperPodUnplaceable,
    affinity_of,
    block_nodes,
    effective_settings,
    select,
    select_mindie,
)


def fixture(free: dict[int, int]) -> dict[int, list[str]]:
    """Upstream's fixture: ``nodeK`` sits in SuperPoD ``K // 10``; the first ``n`` of each
    SuperPoD are free."""
    return {sp: [f"node{sp * 10 + i}" for i in range(n)] for sp, n in free.items()}


def by_vid(choice: SuperPodChoice) -> list[tuple[int, int, int]]:
    """(virtual id, SuperPoD, nodes) of each block."""
    return [(b.vid, b.super_pod, len(b.nodes)) for b in choice.blocks]


def super_pods(choice: SuperPodChoice) -> set[int]:
    return {b.super_pod for b in choice.blocks}


def test_u1_two_free_nodes_hold_one_block_of_two_needed() -> None:
    with pytest.raises(SuperPodUnplaceable) as failed:
        select(fixture({0: 2}), tasks=4, block=2, reserve=2, size=10)
    assert str(failed.value) == (
        "select super pod failed, required 2, total 1, node top: super-pod-id: 0, "
        "node count: 2 detail: [node0 node1], "
    )


def test_u2_pass_one_bound_shrinks_so_4_and_5_free_win_over_6() -> None:
    choice = select(fixture({0: 4, 1: 5, 2: 6}), tasks=4, block=2, reserve=2, size=10)
    assert super_pods(choice) == {0, 1}
    assert by_vid(choice) == [(0, 0, 2), (1, 1, 2)]


def test_u3_six_free_gives_both_blocks_before_five_free_is_reached() -> None:
    choice = select(fixture({1: 5, 2: 6}), tasks=4, block=2, reserve=2, size=10)
    assert super_pods(choice) == {2}


def test_u4_the_8_free_superpod_gives_exactly_one_block_in_pass_two() -> None:
    choice = select(fixture({1: 5, 2: 8}), tasks=4, block=2, reserve=2, size=10)
    assert by_vid(choice) == [(0, 1, 2), (1, 2, 2)]


def test_u5_a_superpod_short_of_its_reserve_is_left_for_the_others() -> None:
    choice = select(fixture({0: 3, 1: 5, 2: 8}), tasks=4, block=2, reserve=2, size=10)
    assert super_pods(choice) == {1, 2}


def test_u6_pass_three_dips_into_the_reserve() -> None:
    choice = select(fixture({0: 3, 1: 5}), tasks=4, block=2, reserve=2, size=10)
    assert by_vid(choice) == [(0, 1, 2), (1, 0, 2)]


def test_u7_two_equal_superpods_give_one_block_each_in_pass_one() -> None:
    choice = select(fixture({0: 5, 1: 5}), tasks=4, block=2, reserve=2, size=10)
    assert super_pods(choice) == {0, 1}


def test_u8_pass_three_takes_the_larger_superpod_first() -> None:
    choice = select(fixture({0: 1, 1: 3}), tasks=1, block=1, reserve=4, size=10)
    assert super_pods(choice) == {1}


def test_m1_a_mindie_job_needs_whole_virtual_superpods() -> None:
    with pytest.raises(SuperPodUnplaceable) as failed:
        select_mindie(fixture({0: 2}), need=2, block=2, reserve=2)
    assert str(failed.value) == "not enough virtual super-pod to schedule, required 2, total 1"


def test_m2_a_mindie_job_prefers_the_superpod_that_keeps_its_reserve() -> None:
    choice = select_mindie(fixture({0: 4, 1: 3}), need=1, block=2, reserve=2)
    assert super_pods(choice) == {0}


def test_mindie_prefers_affinity_then_fewest_free_or_with_sp_fit_idlest_most_free() -> None:
    free = fixture({0: 6, 1: 8, 2: 9})
    assert super_pods(select_mindie(free, need=1, block=2)) == {0}
    assert super_pods(select_mindie(free, need=1, block=2, idlest=True)) == {2}
    near = select_mindie(free, need=2, block=2, affinity={1: 3})
    assert by_vid(near) == [(0, 1, 2), (1, 1, 2)]  # a pick adds affinity: 1 stays best


def test_get_super_pod_ranks_lays_the_blocks_end_to_end() -> None:
    choice = SuperPodChoice((Block(0, 7, ("node0", "node1")), Block(1, 7, ("node2", "node3"))))
    assert [choice.node_of_rank(r) for r in range(3)] == ["node0", "node1", "node2"]
    assert choice.annotations(2) == {"super-pod-rank": "1", "super-pod-id": "7"}


D5_FREE = {0: 47, 1: 16, 2: 31, 3: 31, 4: 15}


def test_d5_a_14_node_block_comes_from_the_16_free_superpod() -> None:
    choice = select(fixture(D5_FREE), tasks=14, block=14, reserve=2, size=48)
    assert by_vid(choice) == [(0, 1, 14)]


def test_d1_the_second_block_comes_from_either_31_free_superpod() -> None:
    choice = select(fixture(D5_FREE), tasks=28, block=14, reserve=2, size=48)
    assert choice.blocks[0].super_pod == 1
    assert choice.blocks[1].super_pod in {2, 3}  # a tie upstream breaks at random


def test_d10_four_blocks_over_three_superpods() -> None:
    choice = select(fixture({0: 4, 1: 5, 2: 6}), tasks=8, block=2, reserve=2, size=10)
    assert [(b.vid, b.super_pod) for b in choice.blocks] == [(0, 0), (1, 2), (2, 2), (3, 1)]


def test_d13_blocks_of_three() -> None:
    choice = select(fixture({0: 9, 1: 7}), tasks=9, block=3, reserve=2, size=10)
    assert [(b.vid, b.super_pod) for b in choice.blocks] == [(0, 0), (1, 0), (2, 1)]


def test_d14_pass_three_gives_one_block_per_superpod() -> None:
    choice = select(fixture({0: 2, 1: 4}), tasks=6, block=2, reserve=2, size=10)
    assert [(b.vid, b.super_pod) for b in choice.blocks] == [(0, 1), (1, 0), (2, 1)]


def test_d21_soft_affinity_fills_with_partial_blocks() -> None:
    choice = select(fixture({0: 5, 1: 3}), tasks=8, block=4, reserve=2, size=10, affinity=SOFT)
    assert by_vid(choice) == [(0, 0, 4), (1, 0, 1), (2, 1, 3)]
    assert sorted(choice.node_of_rank(r) for r in range(8)) == sorted(
        [f"node{i}" for i in range(5)] + [f"node{i}" for i in range(10, 13)]
    )


def test_d22_the_same_in_hard_mode_fails() -> None:
    with pytest.raises(SuperPodUnplaceable, match="required 2, total 1"):
        select(fixture({0: 5, 1: 3}), tasks=8, block=4, reserve=2, size=10)


def test_soft_affinity_fails_while_rescheduling_when_too_few_blocks_exist() -> None:
    with pytest.raises(SuperPodUnplaceable, match="required 2, total 1"):
        select(
            fixture({0: 5, 1: 3}),
            tasks=8,
            block=4,
            reserve=2,
            size=10,
            affinity=SOFT,
            rescheduling=True,
        )


def test_sh_a_sub_healthy_node_is_the_last_choice_never_a_refusal() -> None:
    free = {0: ["a", "b", "c", "d"]}
    choice = select(free, tasks=2, block=2, reserve=2, size=10, sub_healthy={"b"})
    assert set(choice.blocks[0].nodes) <= {"a", "c", "d"}
    topped_up = select(free, tasks=2, block=2, reserve=2, size=10, sub_healthy={"b", "c", "d"})
    nodes = topped_up.blocks[0].nodes
    assert "a" in nodes and len(set(nodes)) == 2


def test_only_the_virtual_ids_still_unready_are_placed() -> None:
    choice = select(fixture({0: 4, 1: 5}), tasks=2, block=2, reserve=2, size=10, unready=[1])
    assert [b.vid for b in choice.blocks] == [1]


def test_a_reserve_of_zero_means_two_and_a_size_of_zero_means_48() -> None:
    assert effective_settings(48, 0) == (48, 2)
    assert effective_settings(0, 2) == (48, 2)
    assert effective_settings(10, 10) == (10, 2)
    assert effective_settings(2, 5) == (2, 0)


def test_sp_block_is_validated_with_upstreams_messages() -> None:
    assert block_nodes("64", tasks=16, npu_per_task=8, chips_per_node=8, super_pod_size=48) == 8
    assert block_nodes("4", tasks=1, npu_per_task=4, chips_per_node=8, super_pod_size=48) == 1
    cases = [
        (("0", 16, 8), "sp-block(0) is invalid"),
        (("many", 16, 8), "sp-block(many) is invalid"),
        (("12", 16, 8), "sp-block(12) is not mutiple of node npu (8)"),
        (("24", 2, 8), "distributed super-pod job require npu(16) should be multiple"),
        (("8", 2, 12), "require npu(24) should be equal to node npu(8), actual: task<worker>"),
        (("5", 1, 4), "sp-block(5) is not mutiple of node npu (8)"),
        (("12", 3, 8), "sp-block(12) is not mutiple of node npu (8)"),
        (("512", 64, 8), "sp-block(512/8=64) is bigger than size of super-pod(48)"),
        (("8", 1, 4), "sp-block<8> in annotations of standalone super-pod job should equal"),
        (("3", 1, 3), "standalone super-pod job require npu [1, 2*n], instead of 3"),
    ]
    for (sp_block, tasks, npu), message in cases:
        with pytest.raises(SuperPodInvalid, match=re.escape(message)):
            block_nodes(
                sp_block, tasks=tasks, npu_per_task=npu, chips_per_node=8, super_pod_size=48
            )


def test_only_soft_is_soft() -> None:
    assert affinity_of({}) == "hard"
    assert affinity_of({"super-pod-affinity": "maybe"}) == "hard"
    assert affinity_of({"super-pod-affinity": "soft"}) == "soft"
