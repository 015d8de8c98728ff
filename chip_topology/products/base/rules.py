"""MindCluster's base handler (``internal/npu/base``): enough usable chips, the first ``req``
by id, and its node score; the products built on it (``factory.go``
``initCard910ByBaseHandler``), and the handlers that embed it, start from ``base_product``."""

from __future__ import annotations

from collections.abc import Sequence

from chip_topology.products.groups import enough_chips, first_chips
from chip_topology.products.jobs import JobAsk, job_id, task_listing
from chip_topology.products.product import Family, Product, Refusal, Rule, Rules
from contract.chip_names import ASCEND910, ChipKind

BASE_NODE_WEIGHT = 100  # ``base/type.go`` nodeWeight
# ``internal/npu/base/frame.go`` JudgeNodeAndTaskNPU.
BASE_REASON = "NPUResourceShortage: node don't have enough resource, req<{req}>, idle<{idle}>"


def score(product: Product, mask: int, allocatable: int, req: int, distributed: bool) -> float:
    """``base/frame.go`` ScoreBestNPUNodes: (max − unhealthy) × 100 − usable, where the engine
    passes max − unhealthy as ``allocatable``."""
    return float(allocatable * BASE_NODE_WEIGHT - mask.bit_count())


def _go_set(values: frozenset[int]) -> str:
    """Go's ``%v`` of a ``map[int]struct{}``: keys sorted, as ``map[3:{}]``."""
    return "map[" + " ".join(f"{n}:{{}}" for n in sorted(values)) + "]"


def validate_base(job: JobAsk, product: Product) -> None:
    """``base/frame.go`` ValidNPUJob, kept by every 910 handler built on the base handler
    (module910x8 with 3, 5, 6, 7 left out, card, half, 910B x8 and x16, Atlas 850 and 350):
    each NPU task asks 1..max chips outside the handler's invalid set, whatever the number of
    pods. VOL-v5's ``checkSingleTrainMode`` / ``checkModuleDistributeTrainMode`` and its
    8-per-pod rule for distributed jobs are gone; so are VOL-v5's 910B checks of the
    ``ring-controller.atlas`` label and the ``host-arch`` selector (MindCluster's plugin
    refactor dbde0740)."""
    limit = product.request_limit
    expected = (
        f"job<{job_id(job)}> req npu num should small than {limit}, and not in "
        f"{_go_set(product.invalid_requests)}"
    )
    bad = [t for t in job.npu_tasks if t.npu > limit or t.npu in product.invalid_requests]
    task_listing(expected, bad)


def refuse(
    product: Product, usable: Sequence[int], mask: int, req: int, network_unhealthy: frozenset[int]
) -> Refusal:
    return Refusal(BASE_REASON.format(req=req, idle=mask.bit_count()))


def healthy(product: Product, allocatable: int, unhealthy: int) -> int:
    """Max − unhealthy (``base/frame.go`` ScoreBestNPUNodes healthyCardsNum)."""
    return max(product.capacity - unhealthy, 0)


RULES = Rules(
    fits=enough_chips,
    score=score,
    select=first_chips,
    select_tightest=first_chips,
    validate=validate_base,
    refuse=refuse,
    healthy=healthy,
    partial_nodes=True,  # ``base/frame.go``: a card server holds 1..8 chips
)


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
