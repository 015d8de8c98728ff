"""A node's chips as a small ring diagram, for people reading a terminal."""

from __future__ import annotations

import string
from collections.abc import Collection, Mapping

from scheduler_core.products import Product

FREE, HELD, UNHEALTHY = ".", "#", "x"


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
    for group in product.groups:
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
