"""A product as data, and the interface every product family fills in (``Rules``).

A ``Product`` is one Volcano handler: its chips, groups, Huawei's tables and weights. Its
``rules`` are the functions of its family; the engine, the policies and the node daemons call
those and never ask which family a product is of.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from chip_topology.products.jobs import JobAsk
from contract.chip_names import ASCEND910, NPU, ChipKind

# How many chips a hot reset takes together, from a multiple of it, given the node's chip
# count and board id (if known); None: unknown, the whole node (Ascend/mind-cluster
# ascend-device-plugin ``pkg/server/hot_reset_manager.go`` getRingSize).
ResetRing = Callable[[int, "int | None"], "int | None"]
# Board ids of the A2 servers and cards without HCCS, whose chips reset alone
# (ascend-device-plugin pkg/common/constants.go A300IA2BoardId, A300IA2GB64BoardId,
# A800IA2NoneHccsBoardId(Old)).
SOLO_BOARD_IDS = frozenset({0x28, 0x29, 0x33, 0x3C})
A2_RING, A2_BOX16_RING, A910_RING = 8, 16, 4  # Ascend910BRingsNumTrain, A200TA2RingsNum, …


def _ring_910(chips: int, board_id: int | None) -> int | None:
    return A910_RING


def _ring_910b(chips: int, board_id: int | None) -> int | None:
    if board_id in SOLO_BOARD_IDS:
        return 1
    return A2_BOX16_RING if chips > A2_RING else A2_RING


def _no_ring(chips: int, board_id: int | None) -> int | None:
    """An A3 resets by dies (the driver's ``die_size``), an inference chip alone or by card."""
    return None


def reset_alone(chips: int, board_id: int | None) -> int | None:
    return 1


class Family(Enum):
    """The chip generation a product's chips are of (what a node daemon reports them as),
    with the chip type the device manager names it (``device_type``: ascend-common
    devmanager DevType, api.Ascend910A/B/A3; "" for the inference chips, which go by their
    kind's name) and how many of its chips a hot reset takes together (``reset_ring``)."""

    ASCEND910 = ("910", "Ascend910", _ring_910)
    ASCEND910B = ("910b", "Ascend910B", _ring_910b)
    # Atlas A3: chips in dies of two (``a3.dies``)
    ASCEND910A3 = ("910a3", "Ascend910A3", _no_ring)
    INFERENCE = ("inference", "", _no_ring)

    @property
    def device_type(self) -> str:
        return self.value[1]

    @property
    def reset_ring(self) -> ResetRing:
        return self.value[2]


class Rule(Enum):
    """How a handler checks, scores and picks chips (read inside its family's folder)."""

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
    DIES = "dies"  # Atlas A3: whole dies of two for ≥ 2 chips (``a3.dies``)


FitsFn = Callable[["Product", int, int, bool], bool]
ScoreFn = Callable[["Product", int, int, int, bool], float]
SelectFn = Callable[["Product", Sequence[int], int, bool], tuple[int, ...]]
ValidateFn = Callable[[JobAsk, "Product"], None]
RefuseFn = Callable[["Product", Sequence[int], int, int, frozenset[int]], "Refusal"]

# The attribute naming a chip's group in the DRA driver's ResourceSlice (what a claim's
# ``matchAttribute`` keeps one request in): an Ascend 910's HCCS ring (the whole node on a base
# product), an Ascend 950's mesh of 4 (``chip4nodex``; the whole node on a 1p server), an A3's
# die of two, an inference chip's card.
RING, DIE, MESH, CARD = "hccsRing", "die", "mesh", "card"

# The words of a node whose product the job's handler does not serve; {node} is filled in
# per node (the engine's ``Status.named``).
LABEL_REASON = (
    "check Node {node} label [accelerator-type] Failed, value is {value}: a {have} node, "
    "the job's handler {want} serves {serves}"
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a node's chips do not fit a task, in its handler's words. ``per_node``: the words
    hold ``{node}``, ``{card_type}`` or ``{top}`` (its usable chips), filled in per node."""

    reason: str
    per_node: bool = False


def serves_own(node_product: Product, job_product: Product) -> bool:
    """A 910-family handler serves the nodes of its own product and of the hardware it names
    (``serves_nodes``)."""
    return node_product is job_product or node_product.name in job_product.serves_nodes


def label_refusal(node_product: Product, job_product: Product) -> str:
    served = sorted({job_product.name, *job_product.serves_nodes})
    return LABEL_REASON.format(
        value=node_product.accelerator_type,
        have=node_product.name,
        want=job_product.name,
        serves=" or ".join(served) + " nodes",
        node="{node}",
    )


def ring_or_mesh(product: Product) -> str:
    return MESH if product.kind is NPU else RING


def no_more_groups(product: Product, chip: int) -> dict[str, int]:
    return {}


def any_chips(product: Product, chips: Sequence[int]) -> str | None:
    return None


def passes_no_npu_roles(product: Product, pods: int, npu: int) -> str:
    return ""


def kubelet_allocatable(product: Product, allocatable: int, unhealthy: int) -> int:
    return allocatable


def same_mask(mask: int) -> int:
    return mask


@dataclass(frozen=True, slots=True)
class Rules:
    """What a product family decides about chips, over a bitmask of usable chips (so callers
    cache per mask) or, to pick, their list sorted by id.

    ``fits(product, mask, req, distributed)``: whether a task of ``req`` chips can be placed
    legally. ``score(product, mask, allocatable, req, distributed)``: the upstream node score
    (``ScoreBestNPUNodes``), 0 where upstream gives none. ``select(product, usable, req,
    distributed)``: upstream's chips (``selectNPUFromNode``), or (). ``select_tightest``: the
    best fit inside the node (the binpack policy's pick), or (). ``validate(job, product)``:
    the handler's ValidNPUJob over a job with NPU tasks, ``JobInvalid`` in upstream's words.
    ``refuse(product, usable, mask, req, network_unhealthy)``: why a node whose idle chips
    are enough does not fit (``mask``: the usable chips the job may take).

    ``serves(node_product, job_product)``: whether the handler takes a node of that product;
    ``mislabelled(node_product, job_product)``: its words when not. ``healthy(product,
    allocatable, unhealthy)``: the count the score calls allocatable. ``canonical(mask)``: a
    mask every rule answers for as for ``mask`` (so nodes share cached answers).
    ``partial_nodes``: a node holds as many of the product's chips as it reports (a card
    server 1..8, an inference node up to 64), not all of them. ``draw_known_groups``: a ring
    diagram draws the groups up to the node's last known chip only.

    ``network``: the name of the family's own network rules (where a multi-node job's pods
    go, which nodes are off its network), "" for none. A name, not the functions: those
    work on the scheduler's view of the network and its SuperPoD and rack selections
    (``scheduler_core.engine``), which this layer, importing only ``contract``, may not
    see; ``scheduler_core.engine.locality.NETWORKS`` maps each name to them, one row each.

    What the DRA driver publishes and checks: ``group_attribute(product)``, the attribute a
    chip's group goes by; ``more_groups(product, chip)``, the other groups it is in, by their
    attributes (an A3's die); ``claim_refusal(product, chips)``: why one request of a claim
    holds chips the scheduler could never give it (the words after "request <name>"), None
    if it could; ``labelled``: the handler is named by the node's ``accelerator-type``
    label (an inference handler is named by the job's strategy).

    ``no_npu_role(product, pods, npu)``: what the handler's CheckTaskNPU expects, in its
    words, of a job of ``pods`` pods of ``npu`` NPUs with a role asking no NPU and carrying
    no mark that excuses it ("" where the handler lets the role pass).
    """

    fits: FitsFn
    score: ScoreFn
    select: SelectFn
    select_tightest: SelectFn
    validate: ValidateFn
    refuse: RefuseFn
    serves: Callable[[Product, Product], bool] = serves_own
    mislabelled: Callable[[Product, Product], str] = label_refusal
    healthy: Callable[[Product, int, int], int] = kubelet_allocatable
    canonical: Callable[[int], int] = same_mask
    partial_nodes: bool = False
    draw_known_groups: bool = False
    network: str = ""
    group_attribute: Callable[[Product], str] = ring_or_mesh
    more_groups: Callable[[Product, int], dict[str, int]] = no_more_groups
    claim_refusal: Callable[[Product, Sequence[int]], str | None] = any_chips
    labelled: bool = True
    no_npu_role: Callable[[Product, int, int], str] = passes_no_npu_roles


@dataclass(frozen=True, slots=True)
class Product:
    """One Volcano 910 sub-handler: its topology, tables and weights, and its family's rules."""

    name: str
    accelerator_type: str
    family: Family
    rules: Rules
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
    # How many chips a hot reset takes together where not its family's (``Family.reset_ring``).
    own_reset_ring: ResetRing | None = None
    # An Atlas 300I Duo's chips, two a card: a hot reset takes the whole card
    # (getDuoCardDevices), and they cut no dynamic vNPU.
    duo: bool = False

    @property
    def reset_ring(self) -> ResetRing:
        return self.own_reset_ring or self.family.reset_ring

    @property
    def request_limit(self) -> int:
        return self.max_request or self.capacity

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


def fits(product: Product, mask: int, req: int, distributed: bool) -> bool:
    """Whether a task of ``req`` chips can be placed legally on these usable chips."""
    return product.rules.fits(product, mask, req, distributed)


def huawei_score(
    product: Product, mask: int, allocatable: int, req: int, distributed: bool
) -> float:
    """The upstream node score (``ScoreBestNPUNodes``); 0 where upstream gives none."""
    return product.rules.score(product, mask, allocatable, req, distributed)


def select_huawei(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    """Upstream ``selectNPUFromNode``. Every MindCluster handler picks from the node's usable
    chips sorted by id, whatever order the DeviceInfo lists them in (``internal/npu/base/
    node.go`` GetUsableTopFromNode sorts them; VOL-v5 took them as listed): so "the first N
    of a ring" is the N lowest."""
    return product.rules.select(product, sorted(usable), req, distributed)


def select_tightest(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    """Best fit inside the node (the binpack policy), from the usable chips sorted by id."""
    return product.rules.select_tightest(product, sorted(usable), req, distributed)
