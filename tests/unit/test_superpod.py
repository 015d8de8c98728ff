"""Logical SuperPoD affinity on hand-computed clusters."""

from __future__ import annotations

import pytest

from scheduler_core.engine.superpod import (
    SOFT,
    Block,
    SuperPodChoice,
    SuperPodInvalid,
    affinity_of,
    block_nodes,
    order,
    select,
)


def pods(*sizes: int) -> dict[int, list[str]]:
    """SuperPoD ``i`` with ``sizes[i]`` free nodes ``sp<i>-n<j>``; or, keyed by size."""
    return {i: [f"sp{i}-n{j:02}" for j in range(size)] for i, size in enumerate(sizes)}


def by_size(*sizes: int) -> dict[int, list[str]]:
    return {size: [f"sp{size}-n{j:02}" for j in range(size)] for size in sizes}


def test_seed_example_order_18_26_19_27_then_33_then_the_bigger_superpods_by_size() -> None:
    # block 8, need 2 blocks, reserve 2: (size − 2) = 8 × multiple + remainder.
    # 18 → (0 rem, ×2), 26 → (0, ×3), 19 → (1, ×2), 27 → (1, ×3), …, 25 → (7, ×2),
    # 33 → (7, ×3); from 34 (×4 = 2 × need) on they could hold the job twice: by size.
    cluster = by_size(*range(18, 49))
    tried = [pod for pod, _ in order(cluster, need=2, block=8, reserve=2)]
    assert tried[:5] == [18, 26, 19, 27, 20]
    pairs = [(18 + r, 26 + r) for r in range(8)]
    assert tried[:16] == [size for pair in pairs for size in pair]
    assert tried[15] == 33
    assert tried[16:] == list(range(34, 49))


def test_the_job_takes_two_blocks_from_the_18_node_superpod_and_leaves_its_reserve() -> None:
    choice = select(by_size(*range(18, 49)), nodes=16, block=8, reserve=2)
    assert [b.super_pod for b in choice.blocks] == [18, 18]
    taken = [n for b in choice.blocks for n in b.nodes]
    assert taken == [f"sp18-n{j:02}" for j in range(16)]  # n16, n17 stay spare


def test_superpods_needing_their_reserve_come_only_after_all_others() -> None:
    # block 4, reserve 2, need 1: SuperPoD 0 has 5 free (< 4 + 2: reserve needed),
    # SuperPoD 1 has 7 free ((7 − 2) = 4 × 1 + 1) → 1 first; without it, 0 with its reserve.
    assert [p for p, _ in order(pods(5, 7), need=1, block=4, reserve=2)] == [1, 0]
    choice = select(pods(5, 7), nodes=4, block=4, reserve=2)
    assert choice.blocks == (Block(1, ("sp1-n00", "sp1-n01", "sp1-n02", "sp1-n03")),)
    only_reserve = select(pods(5), nodes=4, block=4, reserve=2)
    assert only_reserve.blocks[0].super_pod == 0


def test_blocks_may_come_from_different_superpods_and_ranks_follow_the_blocks() -> None:
    # block 4, reserve 0: SuperPoDs with 5 (×1 rem 1) and 6 (×1 rem 2) free, need 2 →
    # rem 1 first: block 0 from SuperPoD 0, block 1 from SuperPoD 1; rank 5 = block 1 node 1.
    choice = select(pods(5, 6), nodes=8, block=4, reserve=0)
    assert [b.super_pod for b in choice.blocks] == [0, 1]
    assert choice.node_of_rank(5) == "sp1-n01"
    assert choice.annotations(5) == {"super-pod-rank": "1", "super-pod-id": "1"}


def test_hard_affinity_fails_with_upstreams_message_and_soft_pools_the_leftovers() -> None:
    # block 4: three SuperPoDs of 3 free nodes hold no block; soft pools 9 nodes → 2 blocks.
    with pytest.raises(SuperPodInvalid, match="select super pod failed, required 2, total 0"):
        select(pods(3, 3, 3), nodes=8, block=4, reserve=0)
    soft = select(pods(3, 3, 3), nodes=8, block=4, reserve=0, affinity=SOFT)
    assert [b.super_pod for b in soft.blocks] == [-1, -1]
    nodes = [n for b in soft.blocks for n in b.nodes]
    assert len(set(nodes)) == 8


def test_sp_block_annotation_is_checked() -> None:
    assert block_nodes("64", pods=16, chips_per_node=8, super_pod_size=48) == 8
    with pytest.raises(SuperPodInvalid, match="sp-block 'many'"):
        block_nodes("many", pods=16, chips_per_node=8, super_pod_size=48)
    with pytest.raises(SuperPodInvalid, match="not a multiple of 8 NPUs"):
        block_nodes("12", pods=16, chips_per_node=8, super_pod_size=48)
    with pytest.raises(SuperPodInvalid, match="job of 12 nodes is not a whole number of 8-node"):
        block_nodes("64", pods=12, chips_per_node=8, super_pod_size=48)
    with pytest.raises(SuperPodInvalid, match="512 NPUs \\(64 nodes\\) exceeds the super-pod-size"):
        block_nodes("512", pods=64, chips_per_node=8, super_pod_size=48)
    assert affinity_of({}) == "hard"
    with pytest.raises(SuperPodInvalid, match="'maybe' is not hard or soft"):
        affinity_of({"super-pod-affinity": "maybe"})


def test_a_choice_maps_every_rank_to_a_distinct_node() -> None:
    choice = SuperPodChoice((Block(3, ("a", "b")), Block(4, ("c", "d"))))
    assert [choice.node_of_rank(r) for r in range(4)] == ["a", "b", "c", "d"]
