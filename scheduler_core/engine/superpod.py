"""Logical SuperPoD affinity, as MindCluster's Volcano plugin selects
(``internal/npu/ascend910/ascend910a3/superpod/frame.go``, ``mindie_job.go``). Pure.

A job annotated ``sp-block`` (NPUs per logical SuperPoD) runs as ``need`` blocks of
``block`` nodes; block ``v`` (its *virtual id*, written to the pods as ``super-pod-rank``)
lives inside one physical SuperPoD. Each SuperPoD offers its ``free`` candidate nodes, of
which ``reserve`` stay spare for faults while it can.

Every SuperPoD goes into one cell of a grid by its own free nodes (never by the job):
``ex = free − reserve``; column ``ex // block`` and row ``ex % block`` (``ex < 0``: column 0,
row ``free % block``). Hard affinity leaves out SuperPoDs with fewer than ``block`` free.
Then four passes take blocks, ``rem`` counting the blocks still needed:

1. *smaller*: rows 0 up; in each, columns 1, 2, … while the column is at most the
   **current** ``rem``; each SuperPoD there gives blocks while its free nodes beyond the
   reserve hold one;
2. *bigger*: columns from (``rem`` at the start of the pass) + 1 up, rows 0 up inside; same
   rule;
3. *use the reserve*: rows from the last down, columns 0 up, the most free first inside a
   cell; each SuperPoD with a block's worth of free nodes gives at most one;
4. *fill* (also in hard mode, where only leftovers remain): rows from the last down to
   ``reserve``, then 0 up; columns 0 up; the most free first: every SuperPoD gives what it
   has up to a block, as a further virtual id (partial blocks in soft mode).

A block takes its SuperPoD's healthy nodes by name first and sub-healthy ones only to top
up. Where upstream walks a Go map or an unstable sort, the lowest SuperPoD id goes first.
Rank ``r`` runs on node ``r`` of the blocks' nodes laid end to end in virtual-id order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from contract.annotations import (
    SUPER_POD_AFFINITY_LABEL,
    SUPER_POD_ID_ANNOTATION,
    SUPER_POD_RANK_ANNOTATION,
)

HARD, SOFT = "hard", "soft"
DEFAULT_SIZE, DEFAULT_RESERVE = 48, 2
IDLEST = "idlest"  # sp-fit value
A5_NODE_NPU = 8  # chip8node8sp ``nodeNPUNumber``


class SuperPodInvalid(ValueError):
    """The job's SuperPoD request cannot be read; the message is upstream's."""


class SuperPodUnplaceable(ValueError):
    """Not enough SuperPoD room now; the message is upstream's."""


@dataclass(frozen=True, slots=True)
class Block:
    vid: int  # virtual id: the pods' super-pod-rank
    super_pod: int  # physical SuperPoD id
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SuperPodChoice:
    blocks: tuple[Block, ...]  # by virtual id

    def _locate(self, rank: int) -> tuple[Block, int]:
        for block in self.blocks:
            if rank < len(block.nodes):
                return block, rank
            rank -= len(block.nodes)
        raise IndexError(f"rank beyond the {sum(len(b.nodes) for b in self.blocks)} nodes")

    def node_of_rank(self, rank: int) -> str:
        block, local = self._locate(rank)
        return block.nodes[local]

    def annotations(self, rank: int) -> dict[str, str]:
        block, _ = self._locate(rank)
        return {
            SUPER_POD_RANK_ANNOTATION: str(block.vid),
            SUPER_POD_ID_ANNOTATION: str(block.super_pod),
        }


def effective_settings(size: int, reserve: int) -> tuple[int, int]:
    """``super-pod-size`` and ``reserve-nodes`` as upstream reads them: a size of 0 or less
    is 48; a reserve of 0 or less means unset (2); a reserve not below the size is 2 when
    the size is above 2, else 0."""
    size = size if size > 0 else DEFAULT_SIZE
    reserve = reserve if reserve > 0 else DEFAULT_RESERVE
    if reserve >= size:
        reserve = DEFAULT_RESERVE if size > DEFAULT_RESERVE else 0
    return size, reserve


def block_nodes(
    sp_block: str,
    *,
    tasks: int,
    npu_per_task: int,
    chips_per_node: int,
    super_pod_size: int,
    spec: str = "worker",
) -> int:
    """Nodes per block from the job's ``sp-block`` annotation (NPUs), validated in upstream's
    order and words: ``checkSpBlock`` (the block against the node's chips: 16 on an A3 x16
    SuperPoD, 8 on x8), then ``checkRequireNPU`` / ``CheckTaskNPU`` (MindCluster
    ``ascend910a3/superpod/frame.go``). ``chips_per_node`` is the node's real chip count."""
    required = tasks * npu_per_task
    npus = int(sp_block) if sp_block.isascii() and sp_block.isdigit() else 0
    if npus <= 0:
        raise SuperPodInvalid(f"sp-block({sp_block}) is invalid")
    not_multiple = f"sp-block({npus}) is not mutiple of node npu ({chips_per_node})"
    if npus < chips_per_node:
        # A block smaller than a node is only a one-block job on part of one node.
        if npus != required:
            raise SuperPodInvalid(not_multiple)
        block = 1
    elif npus % chips_per_node:
        raise SuperPodInvalid(not_multiple)
    else:
        block = npus // chips_per_node
    if block > super_pod_size:
        raise SuperPodInvalid(
            f"sp-block({npus}/{chips_per_node}={block}) is bigger than size of "
            f"super-pod({super_pod_size})"
        )
    if tasks == 1:
        if not (required == 1 or (required % 2 == 0 and required <= chips_per_node)):
            raise SuperPodInvalid(
                f"standalone super-pod job require npu [1, 2*n], instead of {required}"
            )
        if npus != required:
            raise SuperPodInvalid(
                f"the sp-block<{npus}> in annotations of standalone super-pod job should "
                f"equal to required npu num<{required}>"
            )
        return 1
    if required % npus:
        raise SuperPodInvalid(
            f"distributed super-pod job require npu({required}) should be multiple of sp-block"
        )
    if npu_per_task != chips_per_node:
        raise SuperPodInvalid(
            f"expected: distributed super-pod job require npu({required}) should be equal to "
            f"node npu({chips_per_node}), actual: task<{spec}> req npu: {npu_per_task}, "
        )
    return block


def block_nodes_850(sp_block: str | None, *, npus: Sequence[int], super_pod_size: int) -> int:
    """Nodes per block of an Atlas 850 SuperPoD job (``chip8-node8-sp``; ``npus``: each NPU
    task's request), in the order and words of MindCluster ``policy/chip8node8sp/frame.go``
    ValidNPUJob: checkSpBlock, checkRequireNPU, checkReqNPUEqualNodeNPU. Unlike the A3's, a
    block below a node is one node whatever the request, a one-task job may ask any 1..8,
    and a distributed task must ask exactly 8. Without ``sp-block`` the block is the job's
    NPUs (``plugin/job.go`` setSpBlock); a value that is not a number reads as 0."""
    required = sum(npus)
    if sp_block is None:
        block_npu = required
    else:
        block_npu = int(sp_block) if sp_block.isascii() and sp_block.isdigit() else 0
    if block_npu <= 0:
        raise SuperPodInvalid(f"sp-block({block_npu}) is invalid")
    if block_npu < A5_NODE_NPU:
        block = 1
    elif block_npu % A5_NODE_NPU:
        raise SuperPodInvalid(f"sp-block({block_npu}) is not mutiple of node npu ({A5_NODE_NPU})")
    else:
        block = block_npu // A5_NODE_NPU
    if block > super_pod_size:
        raise SuperPodInvalid(
            f"sp-block({block_npu}/8={block}) is bigger than size of super-pod({super_pod_size})"
        )
    if len(npus) == 1:
        if required > A5_NODE_NPU:
            raise SuperPodInvalid(
                f"single super-pod job require npu [1, 2*n], instead of {required}"
            )
        if required != block_npu:
            raise SuperPodInvalid(
                "single super-pod job sp-block annotation should equal require npu num"
            )
        return block
    if required % block_npu:
        raise SuperPodInvalid(
            f"distributed super-pod job require npu({required}) should be multiple of sp-block"
        )
    for npu in npus:
        if npu != A5_NODE_NPU:
            raise SuperPodInvalid(f"distributed super-pod job require npu 8*n, instead of {npu}")
    return block


class BlockNodes(Protocol):
    """Nodes per block of a job of ``tasks`` pods of ``npu`` NPUs each, checked in its
    handler's order and words."""

    def __call__(
        self, sp_block: str, *, tasks: int, npu: int, chips_per_node: int, size: int, spec: str
    ) -> int: ...


def _a3_block(
    sp_block: str, *, tasks: int, npu: int, chips_per_node: int, size: int, spec: str
) -> int:
    return block_nodes(
        sp_block,
        tasks=tasks,
        npu_per_task=npu,
        chips_per_node=chips_per_node,
        super_pod_size=size,
        spec=spec,
    )


def _block_850(
    sp_block: str, *, tasks: int, npu: int, chips_per_node: int, size: int, spec: str
) -> int:
    return block_nodes_850(sp_block, npus=[npu] * tasks, super_pod_size=size)


def _a3_shortage(wanted: int, count: int, free: Mapping[int, Sequence[str]]) -> str:
    return f"select super pod failed, required {wanted}, total {count}, node top: {_node_top(free)}"


def _shortage_850(wanted: int, count: int, free: Mapping[int, Sequence[str]]) -> str:
    return f"select super pod failed, required vitural-super-pod {wanted}, total {count}"


@dataclass(frozen=True, slots=True)
class Handler:
    """Whose SuperPoD selection a job gets: the A3 handler's (``ascend910a3/superpod``) or the
    Atlas 850's (``policy/chip8node8sp/frame.go``: the same grid and passes, but its own block
    check (``block_nodes_850``), a SuperPoD with more free nodes than ``super-pod-size`` fails
    the job (classifySuperPod), a shortage is worded ``required vitural-super-pod``, and no
    MindIE selection, which is ``ascend910a3/superpod/mindie_job.go``'s only)."""

    block: BlockNodes
    shortage: Callable[[int, int, Mapping[int, Sequence[str]]], str]
    oversize_fails: bool = False
    mindie: bool = False


A3 = Handler(_a3_block, _a3_shortage, mindie=True)
ATLAS_850 = Handler(_block_850, _shortage_850, oversize_fails=True)


def affinity_of(labels: Mapping[str, str]) -> str:
    """Only ``soft`` is soft; anything else (absent included) is hard, as upstream reads."""
    return SOFT if labels.get(SUPER_POD_AFFINITY_LABEL) == SOFT else HARD


def _node_top(free: Mapping[int, Sequence[str]]) -> str:
    return "".join(
        f"super-pod-id: {sp}, node count: {len(nodes)} detail: [{' '.join(nodes)}], "
        for sp, nodes in sorted(free.items())
    )


class _Pool:
    """The SuperPoDs' remaining candidate nodes, blocks taken from them by virtual id."""

    def __init__(
        self, free: Mapping[int, Sequence[str]], sub_healthy: Collection[str], unready: list[int]
    ) -> None:
        self.left = {sp: sorted(nodes) for sp, nodes in free.items()}
        self._sub_healthy = sub_healthy
        self._unready = sorted(unready)
        self._next_extra = max(unready, default=-1) + 1
        self.blocks: list[Block] = []

    @property
    def rem(self) -> int:
        return len(self._unready)

    def take(self, sp: int, count: int) -> None:
        """``count`` nodes of ``sp`` as the next virtual id still needed (past them, a
        further one: the fill pass): healthy nodes first, sub-healthy ones to top up."""
        nodes = self.left[sp]
        healthy = [n for n in nodes if n not in self._sub_healthy]
        chosen = (healthy + [n for n in nodes if n in self._sub_healthy])[:count]
        self.left[sp] = [n for n in nodes if n not in chosen]
        if self._unready:
            vid = self._unready.pop(0)
        else:
            vid, self._next_extra = self._next_extra, self._next_extra + 1
        self.blocks.append(Block(vid, sp, tuple(chosen)))

    def free(self, sp: int) -> int:
        return len(self.left[sp])


def select(
    free: Mapping[int, Sequence[str]],
    tasks: int,
    block: int,
    *,
    reserve: int = DEFAULT_RESERVE,
    size: int = DEFAULT_SIZE,
    affinity: str = HARD,
    sub_healthy: Collection[str] = frozenset(),
    unready: Sequence[int] | None = None,
    rescheduling: bool = False,
    handler: Handler = A3,
) -> SuperPodChoice:
    """Blocks for a job of ``tasks`` pods (one a node) among each SuperPoD's free candidate
    nodes, or SuperPodUnplaceable with upstream's message. ``unready``: the virtual ids still
    to place (all of ``0 … need−1`` unless a fault restart kept some). ``handler``: the A3's
    or the Atlas 850's."""
    need = tasks // block
    wanted = list(range(need)) if unready is None else sorted(unready)
    hard = affinity != SOFT
    count = 0
    grid: dict[tuple[int, int], list[int]] = {}
    for sp in sorted(free):
        nodes = len(free[sp])
        if hard and nodes < block:
            continue
        if handler.oversize_fails and nodes > size:
            raise SuperPodUnplaceable("super-pod-size is smaller than superPod's node size")
        count += nodes // block
        ex = nodes - reserve
        column, row = divmod(ex, block) if ex >= 0 else (0, nodes % block)
        grid.setdefault((row, column), []).append(sp)
    if count < len(wanted) and (hard or rescheduling):
        raise SuperPodUnplaceable(handler.shortage(len(wanted), count, free))
    pool = _Pool(free, sub_healthy, wanted)
    columns = max((c for _, c in grid), default=0)
    columns = max(columns, size // block)

    def beyond_reserve(sp: int) -> None:
        while pool.rem > 0 and pool.free(sp) - reserve >= block:
            pool.take(sp, block)

    for row in range(block):  # 1: smaller
        column = 1
        while column <= pool.rem:
            for sp in grid.get((row, column), ()):
                beyond_reserve(sp)
            column += 1
    start = pool.rem
    for column in range(start + 1, columns + 1):  # 2: bigger
        for row in range(block):
            for sp in grid.get((row, column), ()):
                beyond_reserve(sp)
    for row in range(block - 1, -1, -1):  # 3: use the reserve
        for column in range(columns + 1):
            for sp in _largest_first(grid.get((row, column), ()), pool):
                if pool.rem > 0 and pool.free(sp) >= block:
                    pool.take(sp, block)
    rows = list(range(block - 1, reserve - 1, -1)) + list(range(min(block, reserve)))
    for row in rows:  # 4: fill
        for column in range(columns + 1):
            for sp in _largest_first(grid.get((row, column), ()), pool):
                taken = sum(len(b.nodes) for b in pool.blocks)
                if taken < tasks and pool.free(sp):
                    pool.take(sp, min(block, pool.free(sp), tasks - taken))
    taken = sum(len(b.nodes) for b in pool.blocks)
    if taken < tasks:
        raise SuperPodUnplaceable(handler.shortage(len(wanted), count, free))
    return SuperPodChoice(tuple(sorted(pool.blocks, key=lambda b: b.vid)))


def _largest_first(cell: Sequence[int], pool: _Pool) -> list[int]:
    return sorted(cell, key=lambda sp: (-pool.free(sp), sp))


def select_mindie(
    free: Mapping[int, Sequence[str]],
    need: int,
    block: int,
    *,
    reserve: int = DEFAULT_RESERVE,
    idlest: bool = False,
    affinity: Mapping[int, int] | None = None,
    sub_healthy: Collection[str] = frozenset(),
) -> SuperPodChoice:
    """Blocks for a MindIE job (labels ``app`` and ``jobID``): repeatedly the best SuperPoD
    gives a block, best being (a) one whose free nodes beyond the reserve hold a block, (b)
    more affinity nodes (``affinity``: SuperPoD → nodes running the pod's preferred
    pod-affinity peers; a pick adds a block's worth when given), (c) fewer free nodes, or
    more with ``sp-fit: idlest``."""
    fitting = {sp: nodes for sp, nodes in free.items() if len(nodes) >= block}
    total = sum(len(nodes) // block for nodes in fitting.values())
    if total < need:
        raise SuperPodUnplaceable(
            f"not enough virtual super-pod to schedule, required {need}, total {total}"
        )
    pool = _Pool(fitting, sub_healthy, list(range(need)))
    near = dict(affinity or {})

    def rank(sp: int) -> tuple[int, int, int, int]:
        left = pool.free(sp)
        return (
            0 if left - reserve >= block else 1,
            -near.get(sp, 0),
            -left if idlest else left,
            sp,
        )

    heap = [(rank(sp), sp) for sp in fitting]
    heapq.heapify(heap)
    while pool.rem:
        _, sp = heapq.heappop(heap)
        pool.take(sp, block)
        if affinity is not None:
            near[sp] = near.get(sp, 0) + block
        if pool.free(sp) >= block:
            heapq.heappush(heap, (rank(sp), sp))
    return SuperPodChoice(tuple(pool.blocks))
