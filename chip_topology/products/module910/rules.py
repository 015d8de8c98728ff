"""The ring handlers' chip rules: HCCS rings (groups) picked by Huawei's ring priority, a
request above one ring the whole node (module910x8) or pairs across both rings (910B x16)."""

from __future__ import annotations

from collections.abc import Sequence

from chip_topology.products.base.rules import validate_base
from chip_topology.products.groups import (
    by_group,
    count_refusal,
    fits_one_group,
    group_affinity,
    select_by_priority,
)
from chip_topology.products.product import RING, Product, Refusal, Rules
from contract.chip_names import chip_name

TOPOLOGY_REASON = "npu topology not meet job require,network unhealthy card is [ {} ]"


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
    if req <= product.group_size:
        return fits_one_group(product, mask, req)
    if product.cross_pairs:
        return _cross_usable(product, mask, req, distributed)
    return req == product.capacity and mask == product.full_mask


def best_affinity(product: Product, mask: int, req: int, distributed: bool) -> int:
    """Huawei's ``bestScore``: how badly the best placement fits; ``impossible`` if none."""
    if req <= product.group_size:
        return group_affinity(product, mask, req)
    if product.cross_pairs:
        if not _cross_usable(product, mask, req, distributed):
            return product.impossible
        return product.aff(req // 2, cross_count(product, mask, distributed) // 2)
    return 0 if req == product.capacity and mask == product.full_mask else product.impossible


def score(product: Product, mask: int, allocatable: int, req: int, distributed: bool) -> float:
    best = best_affinity(product, mask, req, distributed)
    if best == product.impossible:
        return 0.0
    value = product.score_weight * (allocatable * product.allocatable_multiplier - best)
    if product.sort_term:
        value += product.capacity - mask.bit_count()
    return value


def _cross_array(product: Product, usable: Sequence[int], distributed: bool) -> list[int]:
    left, right = by_group(product, usable)
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


def select(product: Product, usable: Sequence[int], req: int, distributed: bool) -> tuple[int, ...]:
    """Upstream ``selectNPUFromNode``: the ring priority list, left ring winning ties."""
    if req > product.group_size:
        return _select_beyond_group(product, usable, req, distributed)
    return select_by_priority(product, usable, req)


def select_tightest(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    """Best fit inside the node: the group with the fewest free chips that still fits (its
    lowest chips, as ``select``)."""
    if req > product.group_size:
        return _select_beyond_group(product, usable, req, distributed)
    candidates = [chips for chips in by_group(product, usable) if len(chips) >= req]
    if not candidates:
        return ()
    return tuple(min(candidates, key=len)[:req])


def refuse(
    product: Product, usable: Sequence[int], mask: int, req: int, network_unhealthy: frozenset[int]
) -> Refusal:
    listed = ",".join(chip_name(c, product.kind) for c in sorted(network_unhealthy))
    return Refusal(TOPOLOGY_REASON.format(listed))


def claim_refusal(product: Product, chips: Sequence[int]) -> str | None:
    """A legal count of one ring, or the whole node."""
    counted = count_refusal(product, chips)
    rings = {product.group_of(c) for c in chips}
    if counted is not None or len(chips) >= product.capacity or len(rings) <= 1:
        return counted
    return (
        f"spans HCCS rings {sorted(rings)} (chips {sorted(chips)}); add the {RING} "
        "matchAttribute constraint to the claim"
    )


RULES = Rules(
    fits=fits,
    refuse=refuse,
    score=score,
    select=select,
    select_tightest=select_tightest,
    validate=validate_base,
    claim_refusal=claim_refusal,
)
