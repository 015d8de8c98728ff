"""The inference handlers' chip rules, one ``Rules`` a handler: the card handlers (one card
holds the task, Huawei's priority list and ``8 × (card − best)``), chip310x4 (fragments
first), the 310P base handler (the first chips), the 300I Duo chip handler (half-used cards
first) and its ``distributed`` variant (whole cards)."""

from __future__ import annotations

from collections.abc import Sequence

from chip_topology.products.base.rules import BASE_NODE_WEIGHT
from chip_topology.products.groups import (
    enough_chips,
    first_chips,
    fits_one_group,
    group_affinity,
    select_by_priority,
)
from chip_topology.products.inference import cards
from chip_topology.products.product import Product, Rules


def _card_fits(product: Product, mask: int, req: int, distributed: bool) -> bool:
    """One card holds the task (``card310x4/task.go``)."""
    return req <= product.group_size and fits_one_group(product, mask, req)


def _card_score(
    product: Product, mask: int, allocatable: int, req: int, distributed: bool
) -> float:
    if req <= product.group_size:
        best = group_affinity(product, mask, req)
    else:
        best = 0 if req == product.capacity and mask == product.full_mask else product.impossible
    if best == product.impossible:
        return 0.0
    return product.score_weight * (product.impossible - best)


def _card_select(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    return select_by_priority(product, usable, req) if req <= product.group_size else ()


def _base_score(
    product: Product, mask: int, allocatable: int, req: int, distributed: bool
) -> float:
    """The 310P base handler and chip310x4, which keeps the base ScoreBestNPUNodes:
    (64 − unhealthy) × 100 − usable, where "unhealthy" is read from the node's
    ``huawei.com/Ascend910-Unhealthy`` list for every resource but ``huawei.com/npu``
    (``base/node.go`` getUnhealthyNPU), which a 310 or 310P node never has: 6400 − usable,
    the fullest node first (``base/frame.go`` ScoreBestNPUNodes)."""
    return float(product.capacity * BASE_NODE_WEIGHT - mask.bit_count())


def _no_score(product: Product, mask: int, allocatable: int, req: int, distributed: bool) -> float:
    return 0.0  # chip310px2 without ``distributed``: no ScoreBestNPUNodes of its own


def _buckets(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    return cards.select_buckets(product.group_size, usable, req)


def _half_first(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    return cards.select_half_first(product.group_size, usable, req)


def _duo_fits(product: Product, mask: int, req: int, distributed: bool) -> bool:
    return cards.duo_distributed_fits(mask, req)


def _duo_score(product: Product, mask: int, allocatable: int, req: int, distributed: bool) -> float:
    return product.score_weight * (16 - cards.duo_distributed_rank(mask, req))


def _duo_select(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    return cards.select_duo_distributed(usable, req)


CARD = Rules(fits=_card_fits, score=_card_score, select=_card_select, select_tightest=_card_select)
BUCKETS = Rules(fits=enough_chips, score=_base_score, select=_buckets, select_tightest=_buckets)
FIRST = Rules(fits=enough_chips, score=_base_score, select=first_chips, select_tightest=first_chips)
HALF_FIRST = Rules(
    fits=enough_chips, score=_no_score, select=_half_first, select_tightest=_half_first
)
DUO_DISTRIBUTED = Rules(
    fits=_duo_fits, score=_duo_score, select=_duo_select, select_tightest=_duo_select
)
