"""Per-product topology and Huawei's tables, as data.

Every rule here is a function of a product and a *bitmask* of usable chips, so callers can
cache answers per mask instead of rescanning chip lists for every pod. Chip order only
matters when chips are picked (``select_*``), and those take the ordered list.

Sources: the Volcano plugin v5 handlers ``internal/ascend910/.../module910x8``, ``half910x4``,
``card910x2``, ``module910bx8``, ``module910bx16``; the inference handlers ``card310x4``,
``chip310x4``, 310P and MindCluster's 300I Duo ``card310px2`` / ``chip310px2``, whose "rings"
are cards and whose own rules are in ``inference``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from chip_topology import inference
from contract.chip_names import ASCEND310, ASCEND310P, ASCEND910, ChipKind, InvalidInput


class Family(Enum):
    ASCEND910 = "910"
    ASCEND910B = "910b"
    INFERENCE = "inference"


class Rule(Enum):
    """How a handler checks, scores and picks chips."""

    RING = "ring"  # 910: HCCS rings (groups), Huawei's ring priority
    CARD = "card"  # one card, priority lists, score 8 × (card − best)
    BUCKETS = "buckets"  # chip310x4: fragments first, across cards
    FIRST = "first"  # 310P: enough free chips, the first in list order
    HALF_FIRST = "half-first"  # chip310px2: half-used cards first
    DUO_DISTRIBUTED = "duo-distributed"  # chip310px2, label distributed: whole cards


@dataclass(frozen=True, slots=True)
class Product:
    """One Volcano 910 sub-handler: its topology, tables and weights."""

    name: str
    accelerator_type: str
    family: Family
    capacity: int
    groups: tuple[tuple[int, ...], ...]
    # aff[req-1][free-1]; ``impossible`` marks a request the group cannot host.
    aff_table: tuple[tuple[int, ...], ...]
    impossible: int
    score_weight: float
    allocatable_multiplier: int
    sort_term: bool
    # Huawei's ring priority per request (free-chip count of the ring to take from first).
    priorities: Mapping[int, tuple[int, ...]]
    single_task_requests: tuple[int, ...]
    invalid_requests: frozenset[int] = frozenset()
    allowed_arch: tuple[str, ...] = ("huawei-x86", "huawei-arm")
    # 16-chip 910B: a request above one group takes pairs (i, i + 8) across both groups.
    cross_pairs: bool = False
    kind: ChipKind = ASCEND910
    rule: Rule = Rule.RING
    # The product a node must have (chip310px2: a node labelled as an Atlas 300I Duo).
    node_product: str | None = None

    @property
    def scheduler_name(self) -> str:
        if self.family is Family.INFERENCE:
            return f"{self.kind.resource}{self.accelerator_type}"
        return f"huawei.com/Ascend910{self.accelerator_type}"

    @property
    def group_size(self) -> int:
        return len(self.groups[0])

    @property
    def group_masks(self) -> tuple[int, ...]:
        return tuple(sum(1 << c for c in g) for g in self.groups)

    @property
    def full_mask(self) -> int:
        return (1 << self.capacity) - 1

    def group_of(self, chip: int) -> int:
        return chip // self.group_size

    def aff(self, req: int, free: int) -> int:
        if free <= 0 or req <= 0 or req > len(self.aff_table) or free > len(self.aff_table[0]):
            return self.impossible
        return self.aff_table[req - 1][free - 1]

    def priority(self, req: int) -> tuple[int, ...]:
        return self.priorities.get(req, tuple(range(req, self.group_size + 1)))


def _distance_table(size: int) -> tuple[tuple[int, ...], ...]:
    """910B: aff[i][j] = j − i, and ``size`` where fewer chips are free than requested."""
    return tuple(
        tuple(j - i if j >= i else size for j in range(1, size + 1)) for i in range(1, size + 1)
    )


_RING_TABLE = ((0, 2, 1, 3), (4, 0, 2, 1), (4, 4, 4, 4), (4, 4, 4, 0))

MODULE_910X8 = Product(
    name="module910x8",
    accelerator_type="module",
    family=Family.ASCEND910,
    capacity=8,
    groups=((0, 1, 2, 3), (4, 5, 6, 7)),
    aff_table=_RING_TABLE,
    impossible=4,
    score_weight=8.0,
    allocatable_multiplier=4,
    sort_term=True,
    priorities={1: (1, 3, 2, 4), 2: (2, 4, 3), 4: (4,)},
    single_task_requests=(1, 2, 4, 8),
)
HALF_910X4 = Product(
    name="half910x4",
    accelerator_type="half",
    family=Family.ASCEND910,
    capacity=4,
    groups=((0, 1, 2, 3),),
    aff_table=_RING_TABLE,
    impossible=4,
    score_weight=8.0,
    allocatable_multiplier=4,
    sort_term=False,
    priorities={},
    single_task_requests=(1, 2, 4),
)
CARD_910X2 = Product(
    name="card910x2",
    accelerator_type="card",
    family=Family.ASCEND910,
    capacity=2,
    groups=((0, 1),),
    aff_table=((0, 1), (2, 0)),
    impossible=2,
    score_weight=8.0,
    allocatable_multiplier=4,
    sort_term=False,
    priorities={},
    single_task_requests=(1, 2),
)
MODULE_910BX8 = Product(
    name="module910bx8",
    accelerator_type="module-910b-8",
    family=Family.ASCEND910B,
    capacity=8,
    groups=(tuple(range(8)),),
    aff_table=_distance_table(8),
    impossible=8,
    score_weight=8.0,
    allocatable_multiplier=1,
    sort_term=False,
    priorities={},
    single_task_requests=tuple(range(1, 9)),
)
MODULE_910BX16 = Product(
    name="module910bx16",
    accelerator_type="module-910b-16",
    family=Family.ASCEND910B,
    capacity=16,
    groups=(tuple(range(8)), tuple(range(8, 16))),
    aff_table=_distance_table(8),
    impossible=8,
    score_weight=16.0,
    allocatable_multiplier=1,
    sort_term=True,
    priorities={},
    single_task_requests=tuple(n for n in range(1, 17) if n not in {9, 11, 13, 15}),
    invalid_requests=frozenset({9, 11, 13, 15}),
    allowed_arch=("huawei-x86",),
    cross_pairs=True,
)


def _inference(  # noqa: PLR0917 (a table of handlers reads best positionally)
    name: str,
    kind: ChipKind,
    card: int,
    capacity: int,
    rule: Rule,
    strategy: str,
    *,
    aff: tuple[tuple[int, ...], ...] = (),
    priorities: Mapping[int, tuple[int, ...]] | None = None,
    node_product: str | None = None,
) -> Product:
    return Product(
        name=name,
        accelerator_type=strategy,
        family=Family.INFERENCE,
        capacity=capacity,
        groups=tuple(tuple(range(i, i + card)) for i in range(0, capacity, card)),
        aff_table=aff,
        impossible=card,
        score_weight=8.0,
        allocatable_multiplier=1,
        sort_term=False,
        priorities=priorities or {},
        single_task_requests=tuple(range(1, card + 1)),
        kind=kind,
        rule=rule,
        node_product=node_product,
    )


CARD_310X4 = _inference(
    "card310x4",
    ASCEND310,
    4,
    64,
    Rule.CARD,
    "card",
    aff=((0, 2, 1, 3), (4, 0, 1, 2), (4, 4, 0, 1), (4, 4, 4, 0)),
    priorities={1: (1, 3, 2, 4), 2: (2, 3, 4), 3: (3, 4), 4: (4,)},
)
CHIP_310X4 = _inference("chip310x4", ASCEND310, 4, 64, Rule.BUCKETS, "chip")
ASCEND_310P = _inference("ascend310p", ASCEND310P, 2, 64, Rule.FIRST, "")
CARD_310PX2 = _inference(
    "card310px2",
    ASCEND310P,
    2,
    64,
    Rule.CARD,
    "duocard",
    aff=((0, 1), (2, 0)),
    priorities={1: (1, 2), 2: (2,)},
)
CHIP_310PX2 = _inference(
    "chip310px2", ASCEND310P, 2, 16, Rule.HALF_FIRST, "duochip", node_product="chip310px2"
)
CHIP_310PX2_DISTRIBUTED = _inference(
    "chip310px2-distributed",
    ASCEND310P,
    2,
    16,
    Rule.DUO_DISTRIBUTED,
    "duochip",
    node_product="chip310px2",
)

PRODUCTS: Mapping[str, Product] = {
    p.name: p
    for p in (
        MODULE_910X8,
        HALF_910X4,
        CARD_910X2,
        MODULE_910BX8,
        MODULE_910BX16,
        CARD_310X4,
        CHIP_310X4,
        ASCEND_310P,
        CARD_310PX2,
        CHIP_310PX2,
        CHIP_310PX2_DISTRIBUTED,
    )
}


def product_by_name(name: str) -> Product:
    try:
        return PRODUCTS[name]
    except KeyError:
        known = ", ".join(PRODUCTS)
        raise InvalidInput(f"unknown product {name!r} (known: {known})") from None


def mask_of(chips: Sequence[int] | frozenset[int]) -> int:
    mask = 0
    for c in chips:
        mask |= 1 << c
    return mask


def group_free(product: Product, mask: int) -> tuple[int, ...]:
    return tuple((mask & g).bit_count() for g in product.group_masks)


def cross_count(product: Product, mask: int, distributed: bool) -> int:
    """Chips usable by a request above one group: 2 × pairs across the two groups."""
    left, right = product.group_masks
    if distributed:
        return 2 * min((mask & left).bit_count(), (mask & right).bit_count())
    shift = product.group_size
    return 2 * ((mask & left) & (mask >> shift)).bit_count()


def _cross_usable(product: Product, mask: int, req: int, distributed: bool) -> bool:
    cross = cross_count(product, mask, distributed)
    return cross > product.group_size and cross >= req


def fits(product: Product, mask: int, req: int, distributed: bool) -> bool:
    """Whether a task of ``req`` chips can be placed legally on these usable chips."""
    if product.rule in (Rule.BUCKETS, Rule.FIRST, Rule.HALF_FIRST):
        return 0 < req <= mask.bit_count()
    if product.rule is Rule.DUO_DISTRIBUTED:
        return inference.duo_distributed_fits(mask, req)
    if req <= product.group_size:
        return any(n >= req for n in group_free(product, mask))
    if product.cross_pairs:
        return _cross_usable(product, mask, req, distributed)
    return req == product.capacity and mask == product.full_mask


def best_affinity(product: Product, mask: int, req: int, distributed: bool) -> int:
    """Huawei's ``bestScore``: how badly the best placement fits; ``impossible`` if none."""
    if req <= product.group_size:
        values = [product.aff(req, n) for n in group_free(product, mask) if n > 0]
        return min(values, default=product.impossible)
    if product.cross_pairs:
        if not _cross_usable(product, mask, req, distributed):
            return product.impossible
        return product.aff(req // 2, cross_count(product, mask, distributed) // 2)
    return 0 if req == product.capacity and mask == product.full_mask else product.impossible


def huawei_score(
    product: Product, mask: int, allocatable: int, req: int, distributed: bool
) -> float:
    """The upstream node score (``ScoreBestNPUNodes``); 0 where upstream gives none."""
    if product.rule is Rule.DUO_DISTRIBUTED:
        return product.score_weight * (16 - inference.duo_distributed_rank(mask, req))
    if product.family is Family.INFERENCE and product.rule is not Rule.CARD:
        return 0.0
    best = best_affinity(product, mask, req, distributed)
    if best == product.impossible:
        return 0.0
    if product.rule is Rule.CARD:
        return product.score_weight * (product.impossible - best)
    score = product.score_weight * (allocatable * product.allocatable_multiplier - best)
    if product.sort_term:
        score += product.capacity - mask.bit_count()
    return score


def _by_group(product: Product, usable: Sequence[int]) -> list[list[int]]:
    groups: list[list[int]] = [[] for _ in product.groups]
    for chip in usable:
        groups[product.group_of(chip)].append(chip)
    return groups


def _cross_array(product: Product, usable: Sequence[int], distributed: bool) -> list[int]:
    left, right = _by_group(product, usable)
    if distributed:
        pairs = list(zip(left, right, strict=False))
    else:
        right_set = set(right)
        pairs = [(c, c + product.group_size) for c in left if c + product.group_size in right_set]
    return [chip for pair in pairs for chip in pair]


def _select_beyond_group(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    if product.cross_pairs:
        cross = _cross_array(product, usable, distributed)
        if len(cross) > product.group_size and len(cross) >= req:
            return tuple(cross[:req])
        return ()
    return tuple(usable) if len(usable) == req == product.capacity else ()


def select_huawei(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    """Upstream ``selectNPUFromNode``: the ring priority list, left ring winning ties."""
    if product.rule is not Rule.RING and product.rule is not Rule.CARD:
        return select_inference(product, usable, req)
    if req > product.group_size:
        return _select_beyond_group(product, usable, req, distributed)
    groups = _by_group(product, usable)
    for wanted in product.priority(req):
        for chips in groups:
            if len(chips) == wanted:
                return tuple(chips[:req])
    return ()


def select_tightest(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    """Best fit inside the node: the group with the fewest free chips that still fits."""
    if product.rule is not Rule.RING:
        return select_huawei(product, usable, req, distributed)
    if req > product.group_size:
        return _select_beyond_group(product, usable, req, distributed)
    candidates = [chips for chips in _by_group(product, usable) if len(chips) >= req]
    if not candidates:
        return ()
    return tuple(min(candidates, key=len)[:req])


def select_inference(product: Product, usable: Sequence[int], req: int) -> tuple[int, ...]:
    """The chips of the inference handlers that pick across cards."""
    card = product.group_size
    if product.rule is Rule.BUCKETS:
        return inference.select_buckets(card, usable, req)
    if product.rule is Rule.HALF_FIRST:
        return inference.select_half_first(card, usable, req)
    if product.rule is Rule.DUO_DISTRIBUTED:
        return inference.select_duo_distributed(usable, req)
    return tuple(usable[:req]) if len(usable) >= req else ()
