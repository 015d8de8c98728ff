"""Logical SuperPoD affinity (the MindCluster Volcano plugin's SuperPoD handler). Pure.

A job annotated ``sp-block`` (NPUs per logical SuperPoD) runs as blocks of ``block`` nodes
(``sp-block`` / chips per node), each block inside one physical SuperPoD. A SuperPoD with
``size`` free nodes, keeping ``reserve`` spare nodes for faults, offers
``multiple = (size − reserve) // block`` blocks and leaves ``remainder = (size − reserve) %
block`` idle. For a job of ``need`` blocks, SuperPoDs are tried in four passes:

1. those that hold the job at most once (``multiple < 2 × need``, ``size ≥ block +
   reserve``), fewest idle leftovers first: by (remainder, multiple). With block 8, need 2,
   reserve 2 that is 18, 26, 19, 27, 20, 28, …, 25, 33 free nodes (the order of Huawei's
   logical-SuperPoD design example);
2. the bigger ones, smallest first (34, 35, …), so big SuperPoDs stay whole;
3. those that only fit by using their reserve (``block ≤ size < block + reserve``), most
   free first;
4. with ``super-pod-affinity: soft``, the rest (fewer than ``block`` free), most free first,
   their nodes pooled into blocks.

Rank ``r`` runs on node ``r % block`` of block ``r // block``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from contract.annotations import (
    SP_BLOCK_ANNOTATION,
    SUPER_POD_AFFINITY_LABEL,
    SUPER_POD_ID_ANNOTATION,
    SUPER_POD_RANK_ANNOTATION,
)

HARD, SOFT = "hard", "soft"


class SuperPodInvalid(ValueError):
    """The job's SuperPoD request cannot be read; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Block:
    super_pod: int  # physical SuperPoD ID (-1: pooled from several, soft mode only)
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SuperPodChoice:
    blocks: tuple[Block, ...]

    def node_of_rank(self, rank: int) -> str:
        size = len(self.blocks[0].nodes)
        return self.blocks[rank // size].nodes[rank % size]

    def annotations(self, rank: int) -> dict[str, str]:
        block = rank // len(self.blocks[0].nodes)
        return {
            SUPER_POD_RANK_ANNOTATION: str(block),
            SUPER_POD_ID_ANNOTATION: str(self.blocks[block].super_pod),
        }


def block_nodes(sp_block: str, pods: int, chips_per_node: int, super_pod_size: int) -> int:
    """Nodes per block from the job's ``sp-block`` annotation, checked against the job's
    size and the SuperPoD size (a block lives inside one SuperPoD)."""
    if not sp_block.isdigit() or int(sp_block) < chips_per_node:
        raise SuperPodInvalid(
            f"{SP_BLOCK_ANNOTATION} {sp_block!r} must be a number of NPUs ≥ {chips_per_node}"
        )
    npus = int(sp_block)
    if npus % chips_per_node:
        raise SuperPodInvalid(
            f"{SP_BLOCK_ANNOTATION} {npus} is not a multiple of {chips_per_node} NPUs per node"
        )
    block = npus // chips_per_node
    if block > super_pod_size:
        raise SuperPodInvalid(
            f"{SP_BLOCK_ANNOTATION} {npus} NPUs ({block} nodes) exceeds the super-pod-size "
            f"of {super_pod_size} nodes"
        )
    if pods % block:
        raise SuperPodInvalid(f"job of {pods} nodes is not a whole number of {block}-node blocks")
    return block


def affinity_of(labels: Mapping[str, str]) -> str:
    value = labels.get(SUPER_POD_AFFINITY_LABEL, HARD)
    if value not in (HARD, SOFT):
        raise SuperPodInvalid(
            f"{SUPER_POD_AFFINITY_LABEL} label value {value!r} is not hard or soft"
        )
    return value


def order(
    free: Mapping[int, Sequence[str]], need: int, block: int, reserve: int
) -> list[tuple[int, bool]]:
    """SuperPoD IDs in the order they are tried, each with whether its reserve may be used
    (passes 1–3; pass 4 is the soft pool)."""

    def multiple(pod: int) -> int:
        return (len(free[pod]) - reserve) // block

    def remainder(pod: int) -> int:
        return (len(free[pod]) - reserve) % block

    first = [p for p in free if len(free[p]) >= block + reserve]
    small = sorted(
        (p for p in first if multiple(p) < 2 * need), key=lambda p: (remainder(p), multiple(p), p)
    )
    big = sorted((p for p in first if multiple(p) >= 2 * need), key=lambda p: (len(free[p]), p))
    reserve_only = sorted(
        (p for p in free if block <= len(free[p]) < block + reserve),
        key=lambda p: (-len(free[p]), p),
    )
    return [(p, False) for p in small + big] + [(p, True) for p in reserve_only]


def select(
    free: Mapping[int, Sequence[str]],
    nodes: int,
    block: int,
    reserve: int,
    affinity: str = HARD,
) -> SuperPodChoice:
    """Blocks for a job of ``nodes`` nodes among the free candidate nodes of each SuperPoD
    (each list in the order its nodes should take ranks), or SuperPodInvalid saying why not."""
    need = nodes // block
    blocks: list[Block] = []
    used: dict[int, int] = {}
    for pod, use_reserve in order(free, need, block, reserve):
        if len(blocks) == need:
            break
        offered = (len(free[pod]) - (0 if use_reserve else reserve)) // block
        taken = min(offered, need - len(blocks))
        blocks += [Block(pod, tuple(free[pod][i * block : (i + 1) * block])) for i in range(taken)]
        used[pod] = taken * block
    if len(blocks) < need and affinity == SOFT:
        pool = [
            n
            for pod in sorted(free, key=lambda p: (-(len(free[p]) - used.get(p, 0)), p))
            for n in free[pod][used.get(pod, 0) :]
        ]
        while len(blocks) < need and len(pool) >= block:
            blocks.append(Block(-1, tuple(pool[:block])))
            pool = pool[block:]
    if len(blocks) < need:
        total = sum(len(f) // block for f in free.values())
        raise SuperPodInvalid(
            f"select super pod failed, required {need}, total {total} "
            f"({block}-node blocks, {reserve} reserve nodes per SuperPoD)"
        )
    return SuperPodChoice(tuple(blocks))
