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
