"""Chips by group (ring, card, die, mesh) and the picks several families share: bitmask
helpers, Huawei's group-priority pick and best affinity (the ring and card handlers), and the
base handler's "enough chips, the first by id" (the base handler and the handlers built on it).
"""

from __future__ import annotations

from collections.abc import Sequence

from chip_topology.products.product import Product


def mask_of(chips: Sequence[int] | frozenset[int]) -> int:
    mask = 0
    for c in chips:
        mask |= 1 << c
    return mask


def group_free(product: Product, mask: int) -> tuple[int, ...]:
    return tuple((mask & g).bit_count() for g in product.group_masks)


def by_group(product: Product, usable: Sequence[int]) -> list[list[int]]:
    groups: list[list[int]] = [[] for _ in product.groups]
    for chip in usable:
        groups[product.group_of(chip)].append(chip)
    return groups


def fits_one_group(product: Product, mask: int, req: int) -> bool:
    return any(n >= req for n in group_free(product, mask))


def group_affinity(product: Product, mask: int, req: int) -> int:
    """Huawei's ``bestScore`` of a request of at most one group: the best group's affinity,
    ``impossible`` if none."""
    values = [product.aff(req, n) for n in group_free(product, mask) if n > 0]
    return min(values, default=product.impossible)


def select_by_priority(product: Product, usable: Sequence[int], req: int) -> tuple[int, ...]:
    """Huawei's ring priority list over groups, the left group winning ties; the chips are
    the lowest of the chosen group (every MindCluster handler picks from the usable chips
    sorted by id, ``internal/npu/base/node.go`` GetUsableTopFromNode)."""
    groups = by_group(product, usable)
    for wanted in product.priority(req):
        for chips in groups:
            if len(chips) == wanted:
                return tuple(chips[:req])
    return ()


def enough_chips(product: Product, mask: int, req: int, distributed: bool) -> bool:
    """The base handler's check: enough usable chips, wherever they are."""
    return 0 < req <= mask.bit_count()


def first_chips(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    """The base handler's pick (``base/frame.go``): the first ``req`` in id order."""
    return tuple(usable[:req]) if len(usable) >= req else ()


def count_refusal(product: Product, chips: Sequence[int]) -> str | None:
    """A request of a count no task of the product may ask (a claim's, in the DRA driver)."""
    n = len(chips)
    if n in product.single_task_requests:
        return None
    legal = ", ".join(map(str, product.single_task_requests))
    return f"has {n} chips; a {product.name} node gives {legal}"


def split_refusal(
    product: Product, chips: Sequence[int], group: str, *, from_count: int
) -> str | None:
    """From ``from_count`` chips on, every group the request touches is taken whole."""
    counted = count_refusal(product, chips)
    if counted is not None or len(chips) < from_count:
        return counted
    touched = {product.group_of(c) for c in chips}
    split = sorted(g for g in touched if not set(product.groups[g]) <= set(chips))
    if not split:
        return None
    return (
        f"takes part of {group} {split} (chips {sorted(chips)}); a {product.name} node gives "
        f"whole {group}s: ask them as requests each with the {group} matchAttribute constraint"
    )
