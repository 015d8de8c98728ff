"""Atlas A3 chips come in dies of two: an A3 NPU module is one package of chips ``2k`` and
``2k + 1``, allocated together for any request of two chips or more. Pure functions of a
bitmask of usable chips (and, to pick, their list), so callers cache answers per mask.

Source: MindCluster ``component/ascend-for-volcano/internal/npu/ascend910/ascend910a3/base.go``
(``JudgeNodeAndTaskNPU``, ``selectNPUForA3Job``) and ``ascend910a3/module910a3x16/frame.go``
(``ScoreBestNPUNodes``, ``getBestScoreAndHealthyNPUNum``). The A3 SuperPoD handler
(``ascend910a3/superpod/frame.go``) embeds the same base, so the same rules pick its chips.
"""

from __future__ import annotations

from collections.abc import Sequence

DIE = 2  # chips per die (upstream ``DieNPUNumber``)
# Upstream's score table is built for 16 chips whatever the node (``chip2-node8`` runs the
# same handler, ``MaxNodeNPUNum`` 16): best = free − req, 15 (``AffScore15``) when short.
TABLE_CHIPS = 16
SHORT = 15

_PAIRS = 0x5555_5555_5555_5555  # the low chip of every die (bits 0, 2, 4, …)


def full_dies(mask: int) -> int:
    """Dies whose two chips are both usable."""
    return (mask & (mask >> 1) & _PAIRS).bit_count()


def has_half_die(mask: int) -> bool:
    """Whether some die has exactly one usable chip."""
    return bool((mask ^ (mask >> 1)) & _PAIRS)


def canonical(mask: int) -> int:
    """A mask every die rule answers for as for ``mask``: its whole dies first, then its
    half-used dies (their low chip), from die 0. Filter, score, the chips' count and the dies
    a pick leaves depend on these two counts alone, so nodes whose chips differ only in which
    dies are used share one answer (a session caches per mask: 16-chip servers have thousands
    of masks but few such counts)."""
    whole = full_dies(mask)
    half = ((mask ^ (mask >> 1)) & _PAIRS).bit_count()
    whole_bits = (1 << (DIE * whole)) - 1
    half_bits = sum(1 << (DIE * (whole + i)) for i in range(half))
    return whole_bits | half_bits


def fits(mask: int, req: int, max_req: int = TABLE_CHIPS) -> bool:
    """``JudgeNodeAndTaskNPU``: 1..max chips, enough usable; two or more take whole dies."""
    if not 1 <= req <= max_req or mask.bit_count() < req:
        return False
    return req == 1 or DIE * full_dies(mask) >= req


def best(mask: int, req: int) -> int:
    """Upstream's ``bestScore`` of a node: free − req (15 when short); for one chip, 16 more
    when no die is half used, so a node with a half-used die wins (its other chip is the
    one taken)."""
    free = mask.bit_count()
    value = free - req if free >= req else SHORT
    if req == 1 and not has_half_die(mask):
        value += TABLE_CHIPS
    return value


def score(mask: int, req: int) -> float:
    """``MaxNodeNPUNum × (MaxCardNPUNum × MaxNodeNPUNum − best)`` = 16 × (32 − best); 0 where
    upstream skips the node (no usable chip).

    Upstream's node loop stops at the first node whose best is 0 and leaves later nodes at 0;
    we score every node and take the highest, ties by name. Both pick a node of best 0 when
    one exists; among several such nodes upstream takes the first in Volcano's node order
    (a Go map walk, not repeatable), we the smallest name."""
    if mask == 0:
        return 0.0
    return float(TABLE_CHIPS * (DIE * TABLE_CHIPS - best(mask, req)))


def select(usable: Sequence[int], req: int) -> tuple[int, ...]:
    """``selectNPUForA3Job``: all usable chips when they are exactly the request; else the
    dies by usable chips, fewest first (upstream sorts a Go map's dies unstably: here ties
    go to the lowest die); one chip → the lowest of the first die; more → whole dies in that
    order until enough. () when no legal choice exists."""
    chips = sorted(usable)
    if len(chips) == req:
        return tuple(chips)
    by_die: dict[int, list[int]] = {}
    for chip in chips:
        by_die.setdefault(chip // DIE, []).append(chip)
    dies = sorted(by_die.items(), key=lambda item: (len(item[1]), item[0]))
    if req == 1:
        return (dies[0][1][0],) if dies else ()
    chosen: list[int] = []
    for _, members in dies:
        if len(chosen) >= req:
            break
        if len(members) == DIE:
            chosen += members
    return tuple(chosen) if len(chosen) == req else ()
