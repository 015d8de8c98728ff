"""A node's chips as a small ring diagram, for people reading a terminal."""

from __future__ import annotations

import string
from collections.abc import Collection, Iterable, Mapping

from chip_topology.products import Product
from chip_topology.routing import product_by_name

FREE, HELD, UNHEALTHY = ".", "#", "x"
LEGEND = "'.' free, 'x' unhealthy, a letter per pod holding chips"


def ring_diagram(
    product: Product,
    free: Collection[int],
    unhealthy: Collection[int],
    holders: Mapping[int, str] | None = None,
) -> tuple[str, list[str]]:
    """``[aab.|cccc]`` and its legend. One cell a chip, rings split by ``|``: ``.`` free,
    ``x`` unhealthy, a letter for each pod holding chips (``#`` when the holder is unknown).
    """
    letters: dict[str, str] = {}
    for chip in sorted(holders or {}):
        pod = (holders or {})[chip]
        if pod not in letters:
            letters[pod] = string.ascii_letters[len(letters) % len(string.ascii_letters)]
    rings = []
    known = {*free, *unhealthy, *(holders or {})}
    for group in product.groups:
        if product.rules.draw_known_groups and group[0] > max(known, default=-1):
            break  # the product names more chips than the node has: draw the node's only
        cells = []
        for chip in group:
            if chip in unhealthy:
                cells.append(UNHEALTHY)
            elif chip in free:
                cells.append(FREE)
            elif holders and chip in holders:
                cells.append(letters[holders[chip]])
            else:
                cells.append(HELD)
        rings.append("".join(cells))
    legend = [f"{letter} = {pod}" for pod, letter in letters.items()]
    return "[" + "|".join(rings) + "]", legend


def node_lines(
    name: str,
    product: str,
    free: Iterable[int],
    unhealthy: Iterable[int],
    holders: Mapping[int, str],
) -> list[str]:
    drawing, legend = ring_diagram(product_by_name(product), set(free), set(unhealthy), holders)
    return [f"{name:24} {product:14} {drawing}  " + "  ".join(legend)]
