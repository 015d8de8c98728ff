"""A node's chips as a one-line ring diagram, for people reading a terminal."""

from __future__ import annotations

from collections.abc import Collection

from scheduler_core.products import Product

FREE, HELD, UNHEALTHY = ".", "#", "x"


def ring_diagram(product: Product, free: Collection[int], unhealthy: Collection[int]) -> str:
    """``[.##.|####]``: one cell a chip, rings split by ``|``; ``.`` free, ``#`` held,
    ``x`` unhealthy."""
    rings = []
    for group in product.groups:
        cells = [UNHEALTHY if c in unhealthy else FREE if c in free else HELD for c in group]
        rings.append("".join(cells))
    return "[" + "|".join(rings) + "]"
