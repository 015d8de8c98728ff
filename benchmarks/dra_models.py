"""kube-scheduler's DRA allocation as placement policies the trace replay can run beside
Huawei's and binpack (``shared/reference/dra.md`` §6.6; ``simulation/dra_allocator.py`` is
the stand-in they model):

- ``dra-first-fit``: the stock allocator with the ring claim templates. Nothing scores
  devices or nodes (every node ties: the first feasible one is taken); on a node the first
  solution in the slice's ring order wins: the first ring with enough free chips, its
  lowest chips.
- ``dra-ladder``: the exact-fit ladder templates (``npu-1-fit``, ``npu-2-fit``): their
  ``firstAvailable`` rungs ask a ring with exactly 1, 3, 2 (1 chip) or 2, 4 (2 chips) free
  chips by the ``ringFree`` attribute before any ring; the ``DynamicResources`` score, 8
  minus the rung taken, makes the node with the earliest rung win. The model reads
  ``ringFree`` as current: the driver publishes it a watch and a slice update after each
  prepare, so this is the ladder's best case.

Multi-node jobs stay with the extender or Volcano on DRA nodes too (DRA cannot keep a gang
together per claim): the replay places them all or nothing, each pod on a whole node, with
the model's node choice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chip_topology.products import Product, group_free
from scheduler_core.engine.policies import Policy

MAX_SUBREQUESTS = 8  # the DynamicResources score's base
LADDERS: Mapping[int, tuple[int, ...]] = {1: (1, 3, 2), 2: (2, 4)}  # rungs before "any"


def _rings(product: Product, usable: Sequence[int]) -> list[list[int]]:
    """The usable chips of each ring, in the slice's (ring) order."""
    return [[c for c in usable if product.group_of(c) == g] for g in range(len(product.groups))]


def first_fit_select(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    if req > product.group_size:
        ordered = sorted(usable)
        return tuple(ordered[:req]) if len(ordered) >= req else ()
    for ring in _rings(product, sorted(usable)):
        if len(ring) >= req:
            return tuple(ring[:req])
    return ()


def first_fit_score(
    product: Product, mask: int, allocatable: int, req: int, distributed: bool
) -> float:
    return 0.0


def _rung(product: Product, free: Sequence[int], req: int) -> tuple[int, int | None]:
    """The first rung of the request's ladder some ring matches: its index and the free
    count it asks (None: the final "any" rung)."""
    rungs = LADDERS.get(req, ())
    for index, wanted in enumerate(rungs):
        if wanted in free:
            return index, wanted
    return len(rungs), None


def ladder_score(
    product: Product, mask: int, allocatable: int, req: int, distributed: bool
) -> float:
    if req not in LADDERS:
        return 0.0
    index, _ = _rung(product, group_free(product, mask), req)
    return float(MAX_SUBREQUESTS - index)


def ladder_select(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    if req not in LADDERS:
        return first_fit_select(product, usable, req, distributed)
    rings = _rings(product, sorted(usable))
    _, wanted = _rung(product, [len(r) for r in rings], req)
    if wanted is None:
        return first_fit_select(product, usable, req, distributed)
    ring = next(r for r in rings if len(r) == wanted)
    return tuple(ring[:req])


DRA_FIRST_FIT = Policy("dra-first-fit", first_fit_score, first_fit_select)
DRA_LADDER = Policy("dra-ladder", ladder_score, ladder_select)
DRA_MODELS: Mapping[str, Policy] = {p.name: p for p in (DRA_FIRST_FIT, DRA_LADDER)}
