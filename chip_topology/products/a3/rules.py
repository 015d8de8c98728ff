"""The Atlas A3 handlers' chip rules: one chip, or whole dies of two (``dies``)."""

from __future__ import annotations

from collections.abc import Sequence

from chip_topology.products.a3 import dies
from chip_topology.products.product import Product, Rules


def fits(product: Product, mask: int, req: int, distributed: bool) -> bool:
    return dies.fits(mask, req, product.capacity)


def score(product: Product, mask: int, allocatable: int, req: int, distributed: bool) -> float:
    return dies.score(mask, req)


def select(product: Product, usable: Sequence[int], req: int, distributed: bool) -> tuple[int, ...]:
    return dies.select(usable, req)


RULES = Rules(fits=fits, score=score, select=select, select_tightest=select)
