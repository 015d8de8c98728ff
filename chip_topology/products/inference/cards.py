"""The inference handlers' own chip rules (Volcano's ``internal/ascend310/{card310x4,
chip310x4}``, ``internal/ascend310p`` and MindCluster's 300I Duo handlers;
``vnpu-and-inference.md`` §1–3), on cards of ``card`` chips (4 on a 310 card, 2 on a 300I
Duo). Pure functions of the usable chips, sorted by id where chips are picked (MindCluster's
``internal/npu/base/node.go`` GetUsableTopFromNode); each handler's ``rules`` calls the one it uses.
"""

from __future__ import annotations

from collections.abc import Sequence


def by_card(card: int, usable: Sequence[int]) -> dict[int, list[int]]:
    """Card index → its usable chips in list order (callers pass them sorted); cards in index
    order."""
    cards: dict[int, list[int]] = {}
    for chip in sorted(usable, key=lambda c: c // card):
        cards.setdefault(chip // card, []).append(chip)
    return cards


def card_counts(card: int, mask: int) -> list[int]:
    """Free chips of every card that has one, in card order."""
    counts = []
    while mask:
        if free := (mask & ((1 << card) - 1)).bit_count():
            counts.append(free)
        mask >>= card
    return counts


def select_buckets(card: int, usable: Sequence[int], req: int) -> tuple[int, ...]:
    """chip310x4: cards bucketed by free count; for 1, 2, 3, 4 free, take the bucket's first
    chips when it holds what is left, else the whole bucket and go on. Fragments first."""
    buckets: dict[int, list[int]] = {}
    for chips in by_card(card, usable).values():
        buckets.setdefault(len(chips), []).extend(chips)
    chosen: list[int] = []
    for free in range(1, card + 1):
        bucket = buckets.get(free, [])
        left = req - len(chosen)
        if len(bucket) >= left:
            return tuple(chosen + bucket[:left])
        chosen += bucket
    return ()


def select_half_first(card: int, usable: Sequence[int], req: int) -> tuple[int, ...]:
    """chip310px2 (one pod, no ``distributed``): chips of half-used cards first, then of
    full cards."""
    cards = by_card(card, usable).values()
    ordered = [c for chips in cards if len(chips) < card for c in chips]
    ordered += [c for chips in cards if len(chips) == card for c in chips]
    return tuple(ordered[:req]) if len(ordered) >= req else ()


def duo_counts(mask: int) -> tuple[int, int]:
    """Half-used and full 300I Duo cards (2 chips each)."""
    counts = card_counts(2, mask)
    return counts.count(1), counts.count(2)


def duo_distributed_fits(mask: int, req: int) -> bool:
    """A ``distributed`` Duo pod: whole cards, and one chip of a half-used card when odd."""
    half, full = duo_counts(mask)
    if req % 2 == 0:
        return req <= 2 * full
    return req - 1 <= 2 * full and req <= half + 2 * full


def select_duo_distributed(usable: Sequence[int], req: int) -> tuple[int, ...]:
    cards = by_card(2, usable).values()
    chosen: list[int] = []
    if req % 2:
        half = [chips for chips in cards if len(chips) == 1]
        if half:
            chosen.append(half[0][0])
    for chips in cards:
        if len(chips) == 2 and len(chosen) + 2 <= req:
            chosen += chips
    if len(chosen) < req:  # odd, with no half-used card: one chip of a whole one
        spare = [c for chips in cards if len(chips) == 2 for c in chips if c not in chosen]
        chosen += spare[: req - len(chosen)]
    return tuple(chosen) if len(chosen) == req else ()


def duo_distributed_rank(mask: int, req: int) -> int:
    """``s`` of the Duo score ``8 × (16 − s)``: MindCluster's three tables by request and
    free chips (16 where no table has the pair; ``ascend310p/chip310px2/frame.go``
    getBestScore). An odd request looks in the table of nodes with a half-used card first
    when the node has one, then in the other table whatever the node has (so 8 free chips
    with a half-used card score as 8 without)."""
    half, full = duo_counts(mask)
    free = half + 2 * full
    if req % 2:
        if half and req <= free <= 7:
            return free - req + 1
        if free % 2 == 0 and req + 1 <= free <= 8:
            return 9 + (free - req - 1) // 2
        return 16
    return free - req + 1 if req <= free <= 8 else 16
