"""MindCluster's base handler (``internal/npu/base``): enough usable chips, the first ``req``
by id, and its node score; the products built on it (``factory.go``
``initCard910ByBaseHandler``), and the handlers that embed it, start from ``base_product``."""

from __future__ import annotations

from chip_topology.products.groups import enough_chips, first_chips
from chip_topology.products.product import Family, Product, Rule, Rules
from contract.chip_names import ASCEND910, ChipKind

BASE_NODE_WEIGHT = 100  # ``base/type.go`` nodeWeight


def score(product: Product, mask: int, allocatable: int, req: int, distributed: bool) -> float:
    """``base/frame.go`` ScoreBestNPUNodes: (max − unhealthy) × 100 − usable, where the engine
    passes max − unhealthy as ``allocatable``."""
    return float(allocatable * BASE_NODE_WEIGHT - mask.bit_count())


RULES = Rules(fits=enough_chips, score=score, select=first_chips, select_tightest=first_chips)


def base_product(
    name: str,
    accelerator_type: str,
    capacity: int,
    *,
    family: Family = Family.ASCEND910B,
    kind: ChipKind = ASCEND910,
    invalid: frozenset[int] = frozenset(),
    network_fault: bool = True,
    serves_nodes: frozenset[str] = frozenset(),
    rules: Rules = RULES,
    rule: Rule = Rule.BASE,
    group: int = 0,
) -> Product:
    """A handler built on MindCluster's base handler: any request 1..``capacity`` outside
    ``invalid``; its chips in groups of ``group`` (the whole node by default)."""
    group = group or capacity
    return Product(
        name=name,
        accelerator_type=accelerator_type,
        family=family,
        rules=rules,
        capacity=capacity,
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
