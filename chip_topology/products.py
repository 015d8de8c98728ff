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

from chip_topology import dies, inference
from contract.chip_names import ASCEND310, ASCEND310P, ASCEND910, NPU, ChipKind, InvalidInput


class Family(Enum):
    ASCEND910 = "910"
    ASCEND910B = "910b"
    ASCEND910A3 = "910a3"  # Atlas A3: chips in dies of two (``dies``)
    INFERENCE = "inference"


class Rule(Enum):
    """How a handler checks, scores and picks chips."""

    RING = "ring"  # 910: HCCS rings (groups), Huawei's ring priority
    CARD = "card"  # one card, priority lists, score 8 × (card − best)
    BUCKETS = "buckets"  # chip310x4: fragments first, across cards; the base handler's score
    # 310P (MindCluster's base handler, max 64): enough free chips, the first by id; score
    # 64 × 100 − usable.
    FIRST = "first"
    HALF_FIRST = "half-first"  # chip310px2: half-used cards first
    DUO_DISTRIBUTED = "duo-distributed"  # chip310px2, label distributed: whole cards
    # MindCluster's base handler (``internal/npu/base``): enough usable chips, the first
    # ``req`` of the numerically sorted list, score (max − unhealthy) × 100 − usable.
    BASE = "base"
    # MindCluster ``policy/chip4nodex``: meshes of 4 chips (chip id // 4).
    MESH = "mesh"
    DIES = "dies"  # Atlas A3: whole dies of two for ≥ 2 chips (``dies``)


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
    # 16-chip 910B: a request above one group takes pairs (i, i + 8) across both groups.
    cross_pairs: bool = False
    kind: ChipKind = ASCEND910
    rule: Rule = Rule.RING
    # The product a node must have (chip310px2: a node labelled as an Atlas 300I Duo).
    node_product: str | None = None
    # Distributed jobs leave the node's ``-NetworkUnhealthy`` chips (MindCluster's
    # ``WithNetworkFault``; off for the card and chip1-node handlers, ``internal/npu/factory.go``).
    network_fault: bool = True
    # The most chips a task may ask (upstream's ``MaxNodeNPUNum``, checked by the base
    # handler's ValidNPUJob) where it is not ``capacity``: 32 for the 300I Duo card handler.
    max_request: int = 0
    # The other node products whose chips this 910-family handler takes (a node is always
    # served by the handler of its own product).
    serves_nodes: frozenset[str] = frozenset()

    @property
    def request_limit(self) -> int:
        return self.max_request or self.capacity

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
    # MindCluster's module910x8 keeps the base handler's ValidNPUJob with these counts left
    # out (``internal/npu/ascend910/ascend910old/module910x8/frame.go`` New), for every pod of
    # a job of any size: VOL-v5's 8-per-pod rule for distributed jobs is gone.
    invalid_requests=frozenset({3, 5, 6, 7}),
    # The default handler (a job naming no policy and no accelerator-type) also takes 910B x8
    # servers, as upstream, which never checks a node's label (Volcano's nodeSelector does): a
    # placement inside one ring of 4 is legal on a 910B's full mesh too. Huawei's own system
    # test runs such a job on 910B nodes (mind-cluster tests/st basic_training_1x8).
    serves_nodes=frozenset({"module910bx8"}),
)


BASE_NODE_WEIGHT = 100  # ``base/type.go`` nodeWeight
MESH_CHIPS = 4  # ``chip4nodex/type.go`` cardsNumPerMesh


def _base(
    name: str,
    accelerator_type: str,
    capacity: int,
    *,
    family: Family = Family.ASCEND910B,
    kind: ChipKind = ASCEND910,
    invalid: frozenset[int] = frozenset(),
    network_fault: bool = True,
    serves_nodes: frozenset[str] = frozenset(),
    rule: Rule = Rule.BASE,
) -> Product:
    """A handler built on MindCluster's base handler (``internal/npu/factory.go``
    ``initCard910ByBaseHandler``): any request 1..``capacity`` outside ``invalid``."""
    group = MESH_CHIPS if rule is Rule.MESH else capacity
    return Product(
        name=name,
        accelerator_type=accelerator_type,
        family=family,
        capacity=capacity,
        # The meshes of 4 are chips 4k..4k+3 (``chip4nodex/utils.go`` getNodeMeshInfo).
        groups=tuple(tuple(range(i, i + group)) for i in range(0, capacity, group)),
        aff_table=(),
        impossible=capacity,
        score_weight=1.0,
        allocatable_multiplier=1,
        sort_term=False,
        priorities={},
        single_task_requests=tuple(n for n in range(1, capacity + 1) if n not in invalid),
        invalid_requests=invalid,
        kind=kind,
        rule=rule,
        network_fault=network_fault,
        serves_nodes=serves_nodes,
    )


# ``chip4-node4``: the 910 "A" half server, base max 4 without 3.
HALF_910X4 = _base("half910x4", "half", 4, family=Family.ASCEND910, invalid=frozenset({3}))
# ``chip1-node2`` and every ``accelerator-type`` containing ``card`` (``card``, ``card-910b-2``,
# ``card-910b-infer``): one handler of up to 8 chips per node, blind to network faults.
CARD_910X2 = _base("card910x2", "card", 8, family=Family.ASCEND910, network_fault=False)
# ``chip8-node8`` / ``module-910b-8``: Atlas 800T A2 / 800I A2.
MODULE_910BX8 = _base("module910bx8", "module-910b-8", 8)
# ``850-Atlas-8p-8``: Atlas 850 (A5) 8-NPU servers, named ``huawei.com/Ascend910`` upstream
# (``common/util/type_v2.go`` ``Ascend800ia5x8SchedulerName``).
ATLAS_850_8P = _base("atlas850x8", "850-Atlas-8p-8", 8)
# Atlas 350 (Ascend 950PR) servers of ``huawei.com/npu`` chips (``chip1-node8/16`` base;
# ``chip4-node8/16`` meshes of 4), their nodes labelled with Huawei's product names
# (``ascend-common/api/const_v2.go``). Huawei's installation guide labels an Atlas 350 node
# ``accelerator=huawei-npu`` only, and upstream's base handler takes any node of its
# resource: so ``chip1-node8`` also takes an unlabelled 8-NPU server (read as an 850/950
# SuperPoD one), where any chips are a legal placement.
ATLAS_350X8 = _base(
    "atlas350x8",
    "350-Atlas-8",
    8,
    kind=NPU,
    network_fault=False,
    serves_nodes=frozenset({"superpod850x8", "superpod950x8"}),
)
ATLAS_350X16 = _base("atlas350x16", "350-Atlas-16", 16, kind=NPU, network_fault=False)
ATLAS_350_4PX8 = _base("atlas350-4px8", "350-Atlas-4p-8", 8, kind=NPU, rule=Rule.MESH)
ATLAS_350_4PX16 = _base("atlas350-4px16", "350-Atlas-4p-16", 16, kind=NPU, rule=Rule.MESH)
# Atlas 850 SuperPoD (``chip8-node8-sp``) and Atlas 950 SuperPoD (``chip8-node8-ra64-sp``): 8
# ``huawei.com/npu`` chips a server, picked as the base handler picks them (a distributed task
# takes all 8; Ascend/mind-cluster ``policy/chip8node8sp/frame.go`` selectNPUFromNode, the 950
# handler keeps the base UseAnnotation). Their servers carry no ``accelerator-type`` (the device
# plugin labels them ``accelerator=huawei-npu`` only), so either handler takes either's nodes;
# their network rules are ``scheduler_core.engine.superpod`` (850) and ``racks`` (950).
SUPERPOD_850X8 = _base(
    "superpod850x8",
    "850-SuperPod-Atlas-8",
    8,
    kind=NPU,
    serves_nodes=frozenset({"superpod950x8"}),
)
SUPERPOD_950X8 = _base(
    "superpod950x8",
    "950-SuperPod-Atlas-8",
    8,
    kind=NPU,
    serves_nodes=frozenset({SUPERPOD_850X8.name}),
)
# ``chip4-node8`` on 910 "A" module servers (MindCluster 5b8d73f0 "chip4-node8 must also
# support 910A"): meshes of 4 on ``module`` nodes.
MESH_910X8 = _base(
    "chip4-node8",
    "module",
    8,
    family=Family.ASCEND910,
    rule=Rule.MESH,
    serves_nodes=frozenset({"module910x8"}),
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
    cross_pairs=True,
)


def _a3(name: str, accelerator_type: str, capacity: int) -> Product:
    """An Atlas A3 handler (MindCluster ``ascend910a3``): dies of two, upstream's checks and
    scores in ``dies``; requests 1 and the even counts up to 16 (``a3×16`` validation, also
    on 8-chip nodes, whose filter then refuses what does not fit)."""
    return Product(
        name=name,
        accelerator_type=accelerator_type,
        family=Family.ASCEND910A3,
        capacity=capacity,
        groups=tuple((c, c + 1) for c in range(0, capacity, dies.DIE)),
        aff_table=(),
        impossible=dies.SHORT,
        score_weight=float(dies.TABLE_CHIPS),
        allocatable_multiplier=1,
        sort_term=False,
        priorities={},
        single_task_requests=(1, *range(2, capacity + 1, 2)),
        rule=Rule.DIES,
    )


# Atlas 800T/800I A3 (``chip2-node16``, ``module-a3-16``) and A3 x8 (``chip2-node8``).
MODULE_910A3X16 = _a3("module910a3x16", "module-a3-16", 16)
MODULE_910A3X8 = _a3("module910a3x8", "module-a3-8", 8)
# Atlas 900 A3 SuperPoD nodes (``chip2-node16-sp`` / ``chip2-node8-sp``, or ``sp-block``):
# the node label upstream's routing reads (``common/util/constants.go``).
SUPERPOD_910A3X16 = _a3("superpod910a3x16", "module-a3-16-super-pod", 16)
SUPERPOD_910A3X8 = _a3("superpod910a3x8", "module-a3-8-super-pod", 8)
SUPER_POD_PRODUCTS = frozenset({SUPERPOD_910A3X16.name, SUPERPOD_910A3X8.name})


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
    max_request: int = 0,
) -> Product:
    """An inference handler (``internal/npu/ascend310``, ``ascend310p``, the 310P base
    handler of ``internal/npu/factory.go``): no network-fault attention (none calls
    ``SetIsNetworkFaultAttention``)."""
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
        network_fault=False,
        max_request=max_request,
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
    max_request=32,  # ``ascend310p/card310px2/type.go`` maxNodeNPUNum
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
        MODULE_910A3X16,
        MODULE_910A3X8,
        SUPERPOD_910A3X16,
        SUPERPOD_910A3X8,
        ATLAS_850_8P,
        ATLAS_350X8,
        ATLAS_350X16,
        ATLAS_350_4PX8,
        ATLAS_350_4PX16,
        SUPERPOD_850X8,
        SUPERPOD_950X8,
        MESH_910X8,
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
    if product.rule in (Rule.BUCKETS, Rule.FIRST, Rule.HALF_FIRST, Rule.BASE):
        return 0 < req <= mask.bit_count()
    if product.rule is Rule.MESH:
        return _mesh_fits(mask, req)
    if product.rule is Rule.DUO_DISTRIBUTED:
        return inference.duo_distributed_fits(mask, req)
    if product.rule is Rule.DIES:
        return dies.fits(mask, req, product.capacity)
    if req <= product.group_size:
        return any(n >= req for n in group_free(product, mask))
    if product.rule is Rule.CARD:  # one card holds the task (``card310x4/task.go``)
        return False
    if product.cross_pairs:
        return _cross_usable(product, mask, req, distributed)
    return req == product.capacity and mask == product.full_mask


def best_affinity(product: Product, mask: int, req: int, distributed: bool) -> int:
    """Huawei's ``bestScore``: how badly the best placement fits; ``impossible`` if none."""
    if product.rule is Rule.DIES:
        return dies.best(mask, req)
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
    if product.rule is Rule.BASE:
        # ``base/frame.go`` ScoreBestNPUNodes: (max − unhealthy) × 100 − usable, where the
        # engine passes max − unhealthy as ``allocatable``.
        return float(allocatable * BASE_NODE_WEIGHT - mask.bit_count())
    if product.rule is Rule.MESH:
        return _mesh_score(product, mask, req)
    if product.rule in (Rule.FIRST, Rule.BUCKETS):
        # The 310P base handler and chip310x4, which keeps the base ScoreBestNPUNodes:
        # (64 − unhealthy) × 100 − usable, where "unhealthy" is read from the node's
        # ``huawei.com/Ascend910-Unhealthy`` list for every resource but ``huawei.com/npu``
        # (``base/node.go`` getUnhealthyNPU), which a 310 or 310P node never has: 6400 −
        # usable, the fullest node first (``base/frame.go`` ScoreBestNPUNodes).
        return float(product.capacity * BASE_NODE_WEIGHT - mask.bit_count())
    if product.family is Family.INFERENCE and product.rule is not Rule.CARD:
        return 0.0  # chip310px2 without ``distributed``: no ScoreBestNPUNodes of its own
    if product.rule is Rule.DIES:
        return dies.score(mask, req)
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
    """Upstream ``selectNPUFromNode``: the ring priority list, left ring winning ties.

    Every MindCluster handler picks from the node's usable chips sorted by id, whatever order
    the DeviceInfo lists them in (``internal/npu/base/node.go`` GetUsableTopFromNode sorts
    them; VOL-v5 took them as listed): so "the first N of a ring" is the N lowest."""
    usable = sorted(usable)
    if product.rule is Rule.DIES:
        return dies.select(usable, req)
    if product.rule is Rule.BASE:  # ``base/frame.go``: the first ``req`` in id order
        ordered = sorted(usable)
        return tuple(ordered[:req]) if len(ordered) >= req else ()
    if product.rule is Rule.MESH:
        return _mesh_select(usable, req)
    if product.rule is not Rule.RING and product.rule is not Rule.CARD:
        return select_inference(product, usable, req)
    if req > product.group_size:
        if product.rule is Rule.CARD:
            return ()
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
    """Best fit inside the node: the group with the fewest free chips that still fits
    (its lowest chips, as ``select_huawei``)."""
    usable = sorted(usable)
    if product.rule is not Rule.RING:
        return select_huawei(product, usable, req, distributed)
    if req > product.group_size:
        return _select_beyond_group(product, usable, req, distributed)
    candidates = [chips for chips in _by_group(product, usable) if len(chips) >= req]
    if not candidates:
        return ()
    return tuple(min(candidates, key=len)[:req])


def select_inference(product: Product, usable: Sequence[int], req: int) -> tuple[int, ...]:
    """The chips of the inference handlers that pick across cards, from the usable chips
    sorted by id (``base/node.go`` GetUsableTopFromNode)."""
    usable = sorted(usable)
    card = product.group_size
    if product.rule is Rule.BUCKETS:
        return inference.select_buckets(card, usable, req)
    if product.rule is Rule.HALF_FIRST:
        return inference.select_half_first(card, usable, req)
    if product.rule is Rule.DUO_DISTRIBUTED:
        return inference.select_duo_distributed(usable, req)
    # Rule.FIRST: the 310P base handler takes the first ``req`` of the node's usable chips.
    return tuple(usable[:req]) if len(usable) >= req else ()


# ---- MindCluster ``policy/chip4nodex``: meshes of 4 ------------------------------------------

_MESHES = 4  # ``getNodeMeshInfo`` counts meshes 0..3 only


def mesh_affine(req: int) -> bool:
    """``is4PmeshAffinity``: up to one mesh, or whole meshes."""
    return req <= MESH_CHIPS or req % MESH_CHIPS == 0


def _mesh_counts(mask: int) -> list[int]:
    whole = (1 << MESH_CHIPS) - 1
    return [(mask >> (MESH_CHIPS * m) & whole).bit_count() for m in range(_MESHES)]


def _mesh_fits(mask: int, req: int) -> bool:
    """``judgeNodeAndTaskNPU``: a mesh with ``req`` free, ``req / 4`` whole free meshes, or
    (a request that is neither) enough chips."""
    if req <= 0:
        return False
    if not mesh_affine(req):
        return req <= mask.bit_count()
    counts = _mesh_counts(mask)
    if req >= MESH_CHIPS:
        return counts.count(MESH_CHIPS) >= req // MESH_CHIPS
    return any(n >= req for n in counts)


def _mesh_score(product: Product, mask: int, req: int) -> float:
    """``scoreNodeFor4Pmesh`` / ``scoreNodeForGeneral``; 0 where upstream's best score errs."""
    size = product.capacity
    free = mask.bit_count()
    if not (1 <= req <= size and 1 <= free <= size):
        return 0.0
    card = free - req if free >= req else size  # ``createAffScoreList``
    if not mesh_affine(req):
        return float(size * (size - card))
    counts = _mesh_counts(mask)
    if req >= MESH_CHIPS:
        need, available = req // MESH_CHIPS, counts.count(MESH_CHIPS)
    else:
        need, available = 1, sum(1 for n in counts if n >= req)
    best = size * (available - need) + card
    weight = 16 if size == 8 else 64  # scoreWeightX16 on x8, scoreWeightX64 on x16
    return float(weight * (weight - best))


def _mesh_select(usable: Sequence[int], req: int) -> tuple[int, ...]:
    """``selectNPUFromNode``: below a mesh, the mesh with the least surplus (the lowest on a
    tie); whole meshes from the lowest; otherwise the first ``req`` chips."""
    ordered = sorted(usable)
    if len(ordered) < req:
        return ()
    if not mesh_affine(req):
        return tuple(ordered[:req])
    counts = _mesh_counts(mask_of(ordered))
    if req >= MESH_CHIPS:
        chips = [
            c
            for m, n in enumerate(counts)
            if n == MESH_CHIPS
            for c in range(m * MESH_CHIPS, m * MESH_CHIPS + MESH_CHIPS)
        ]
        return tuple(chips[:req]) if len(chips) >= req else ()
    fitting = [(n - req, m) for m, n in enumerate(counts) if n >= req]
    if not fitting:
        return ()
    chosen = min(fitting)[1]
    return tuple([c for c in ordered if c // MESH_CHIPS == chosen][:req])
