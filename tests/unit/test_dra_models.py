"""The trace replay's models of the DRA allocator choose what the allocator stand-in
(``simulation/dra_allocator.py``) chooses with the deployed claim templates, on any state
of a node's rings."""

from __future__ import annotations

import random
from typing import Any

import pytest

from benchmarks.dra_models import first_fit_select, ladder_score, ladder_select
from chip_drivers.chips import Chip, NodeChips
from chip_topology.products import MODULE_910X8, mask_of
from dra_driver.slices import desired_slice, ring_free
from simulation.dra_allocator import Allocator, node_devices, score
from simulation.dra_cluster import deployed

DRIVER = "npu.ascend.example.com"
TEMPLATES = {t["metadata"]["name"]: t["spec"] for t in deployed("ResourceClaimTemplate")}
FIRST_FIT = {1: "npu-1", 2: "npu-2-ring", 4: "npu-4-ring", 8: "npu-8"}
LADDER = {1: "npu-1-fit", 2: "npu-2-fit"}
STATES = sorted(random.Random(7).sample(range(256), 24))


def allocate(usable: list[int], template: str) -> tuple[tuple[int, ...], int]:
    """The chips the stand-in gives a claim of the template on a node whose other chips are
    taken (unhealthy here: the class leaves them out), and the claim's node score."""
    chips = tuple(Chip(i, i, healthy=i in usable) for i in range(8))
    node = NodeChips("Ascend910", "module910x8", chips)
    free = ring_free(node, frozenset())
    published = desired_slice(DRIVER, "n", "u", node, free=free)
    allocator = Allocator({c["metadata"]["name"]: c for c in deployed("DeviceClass")})
    claim: dict[str, Any] = {"spec": TEMPLATES[template]["spec"]}
    choice = allocator.allocate(claim, node_devices([published], "n"), set())
    if choice is None:
        return (), 0
    given = tuple(sorted(int(d.name.removeprefix("npu-")) for c in choice for d in c.devices))
    return given, score([choice])


@pytest.mark.parametrize("state", STATES)
def test_first_fit_is_what_the_allocator_gives_the_ring_templates(state: int) -> None:
    usable = [c for c in range(8) if state >> c & 1]
    for req, template in FIRST_FIT.items():
        modelled = tuple(sorted(first_fit_select(MODULE_910X8, usable, req, False)))
        assert modelled == allocate(usable, template)[0], (usable, req)


@pytest.mark.parametrize("state", STATES)
def test_the_ladder_is_what_the_allocator_gives_the_fit_templates_and_scores_alike(
    state: int,
) -> None:
    usable = [c for c in range(8) if state >> c & 1]
    for req, template in LADDER.items():
        given, node_score = allocate(usable, template)
        modelled = tuple(sorted(ladder_select(MODULE_910X8, usable, req, False)))
        assert modelled == given, (usable, req)
        if given:
            assert ladder_score(MODULE_910X8, mask_of(usable), len(usable), req, False) == (
                node_score
            )


def test_the_ladder_takes_the_exact_ring_first_fit_splits() -> None:
    usable = [1, 2, 3, 6, 7]  # ring 0: three free, ring 1: two free
    assert first_fit_select(MODULE_910X8, usable, 2, False) == (1, 2)
    assert ladder_select(MODULE_910X8, usable, 2, False) == (6, 7)
