"""Placement policies: how feasible nodes are ranked and which chips a node gives.

Feasibility is the product's and is never a policy's business; a policy only orders legal
choices. Scores depend on the usable-chip mask alone so the engine can cache them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from chip_topology.products import (
    Product,
    group_free,
    huawei_score,
    select_huawei,
    select_tightest,
)
from contract.chip_names import InvalidInput

ScoreFn = Callable[[Product, int, int, int, bool], float]
SelectFn = Callable[[Product, Sequence[int], int, bool], tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Policy:
    """``score(product, usable_mask, allocatable, req, distributed)``: higher is better.
    ``select(product, usable_in_list_order, req, distributed)``: the chips, or ()."""

    name: str
    score: ScoreFn
    select: SelectFn
    # Taken off a sub-healthy node's score (not below 0): MindCluster's fault handler does so
    # for every job after the handler scored (``internal/rescheduling/reschedule.go``
    # reduceForSubHealthyNodes, AffScore1).
    sub_health_penalty: float = 0.0


def binpack_score(
    product: Product, mask: int, allocatable: int, req: int, distributed: bool
) -> float:
    """A lexicographic key packed into one number (each field < 32, so none overflows):

    1. do not break a whole free node while a partly used one can host the pod;
    2. then prefer nodes with all chips healthy (the capacity-7 rule: fewer healthy → lower);
    3. then the node with the fewest free chips (best fit);
    4. then the node whose tightest fitting ring has the fewest free chips.
    """
    free = mask.bit_count()
    breaks_whole = req < product.capacity and mask == product.full_mask
    deficit = max(product.capacity - allocatable, 0)
    fitting = [n for n in group_free(product, mask) if n >= req]
    tightest = min(fitting) if req <= product.group_size and fitting else 0
    return float(
        (0 if breaks_whole else 1) << 15
        | (31 - min(deficit, 31)) << 10
        | (31 - free) << 5
        | (31 - tightest)
    )


HUAWEI = Policy("huawei", huawei_score, select_huawei, sub_health_penalty=1.0)
BINPACK = Policy("binpack", binpack_score, select_tightest)

POLICIES: Mapping[str, Policy] = {p.name: p for p in (HUAWEI, BINPACK)}
DEFAULT_POLICY = HUAWEI


def policy_by_name(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise InvalidInput(f"unknown policy {name!r} (known: {', '.join(POLICIES)})") from None
