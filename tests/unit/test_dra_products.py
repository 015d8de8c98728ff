"""The DRA driver per product: every product the scheduler knows publishes, from
``chip_topology``, the group a claim's ``matchAttribute`` keeps a request in, those groups
are the ones the scheduler's own choices stay in, and a request the scheduler would not give
is refused when it is prepared."""

from __future__ import annotations

import random
from typing import Any

import pytest

from chip_drivers.chips import Chip, NodeChips
from chip_topology.products import Family, Product, fits, mask_of, select_huawei
from chip_topology.routing import PRODUCTS
from dra_driver.claims import ClaimRef, ClaimRefused, check_ring_rule
from dra_driver.slices import desired_slice, group_attribute, ring_free

DRIVER = "npu.ascend.example.com"
GROUP_ATTRIBUTES = ("hccsRing", "die", "mesh", "card")


def published(chips: NodeChips, labels: dict[str, str] | None = None) -> dict[int, dict[str, Any]]:
    spec = desired_slice(DRIVER, "n", "u", chips, labels=labels)["spec"]
    return {
        d["attributes"]["physicalID"]["int"]: {
            k: next(iter(v.values())) for k, v in d["attributes"].items()
        }
        for d in spec["devices"]
    }


def node(product: Product, count: int | None = None) -> NodeChips:
    chips = tuple(Chip(i, i) for i in range(product.capacity if count is None else count))
    return NodeChips(product.kind.name, product.name, chips)


def groups(product: Product, count: int | None = None) -> dict[str, list[int]]:
    """Per group attribute published, its value on each chip in order."""
    found = published(node(product, count))
    return {
        name: [found[c][name] for c in sorted(found)]
        for name in GROUP_ATTRIBUTES
        if name in found[0]
    }


def by(size: int, capacity: int) -> list[int]:
    return [c // size for c in range(capacity)]


# (product, the group attributes its chips carry): transcribed from chip_topology.products.
EXPECTED = {
    "module910x8": {"hccsRing": by(4, 8)},  # two HCCS rings of 4
    "half910x4": {"hccsRing": by(4, 4)},  # one ring: the base handler takes any chips
    "card910x2": {"hccsRing": by(8, 8)},
    "module910bx8": {"hccsRing": by(8, 8)},
    "module910bx16": {"hccsRing": by(8, 16)},  # two groups of 8
    "module910a3x16": {"hccsRing": by(2, 16), "die": by(2, 16)},
    "module910a3x8": {"hccsRing": by(2, 8), "die": by(2, 8)},
    "superpod910a3x16": {"hccsRing": by(2, 16), "die": by(2, 16)},
    "superpod910a3x8": {"hccsRing": by(2, 8), "die": by(2, 8)},
    "atlas850x8": {"hccsRing": by(8, 8)},
    "atlas350x8": {"mesh": by(8, 8)},  # chip1-node8: any chips, the node one group
    "atlas350x16": {"mesh": by(16, 16)},
    "atlas350-4px8": {"mesh": by(4, 8)},  # chip4-node8: meshes of 4
    "atlas350-4px16": {"mesh": by(4, 16)},
    "superpod850x8": {"mesh": by(8, 8)},  # 850/950 SuperPoD servers: the base handler
    "superpod950x8": {"mesh": by(8, 8)},
    "chip4-node8": {"hccsRing": by(4, 8), "mesh": by(4, 8)},
    "card310x4": {"card": by(4, 64)},
    "chip310x4": {"card": by(4, 64)},
    "ascend310p": {"card": by(2, 64)},
    "card310px2": {"card": by(2, 64)},
    "chip310px2": {"card": by(2, 16)},
    "chip310px2-distributed": {"card": by(2, 16)},
}


def test_every_product_has_its_expected_attributes() -> None:
    assert sorted(EXPECTED) == sorted(PRODUCTS)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_products_chips_carry_its_groups_its_name_and_accelerator_type(name: str) -> None:
    product = PRODUCTS[name]
    assert groups(product) == EXPECTED[name]
    found = published(node(product))[0]
    assert (found["model"], found["topology"]) == (product.kind.name, name)
    if product.family is Family.INFERENCE:  # a job's strategy names them, not a node label
        assert "acceleratorType" not in found
    else:
        assert found["acceleratorType"] == product.accelerator_type


@pytest.mark.parametrize("count", range(1, 9))
def test_a_card_node_of_one_to_eight_chips_is_one_group(count: int) -> None:
    assert groups(PRODUCTS["card910x2"], count) == {"hccsRing": [0] * count}


@pytest.mark.parametrize(
    "name", sorted(n for n, p in PRODUCTS.items() if p.family is not Family.INFERENCE)
)
def test_the_chips_the_scheduler_picks_for_a_group_sized_request_share_its_attribute(
    name: str,
) -> None:
    """Whatever chips are free, a request of at most a group that the node fits is placed in
    one group by the scheduler (``select_huawei``): a ``matchAttribute`` on the published
    attribute asks the same thing of kube-scheduler."""
    product = PRODUCTS[name]
    attribute = group_attribute(product)
    values = {c: a[attribute] for c, a in published(node(product)).items()}
    rng = random.Random(name)
    for _ in range(200):
        usable = sorted(rng.sample(range(product.capacity), rng.randint(1, product.capacity)))
        for req in product.single_task_requests:
            if req > product.group_size or not fits(product, mask_of(usable), req, False):
                continue  # beyond a group, or a node the scheduler's filter refuses
            chosen = select_huawei(product, usable, req, False)
            assert len({values[c] for c in chosen}) <= 1, (usable, req, chosen)


def test_a_950_node_without_a_product_of_its_driver_takes_the_one_of_its_labels() -> None:
    chips = NodeChips("npu", None, tuple(Chip(i, i) for i in range(8)))
    four_p = {"accelerator": "huawei-npu", "accelerator-type": "350-Atlas-4p-8"}
    found = published(chips, four_p)
    assert [found[c]["mesh"] for c in range(8)] == by(4, 8)
    assert (found[5]["topology"], found[5]["acceleratorType"]) == (
        "atlas350-4px8",
        "350-Atlas-4p-8",
    )
    assert ring_free(chips, frozenset({0, 5}), four_p) == {0: 3, 1: 3}
    # A label the scheduler does not know: no product, so no group a claim could match on.
    bare = published(chips, {"accelerator-type": "960-Atlas-9"})[5]
    assert not {"mesh", "topology", "acceleratorType", "ringFree"} & set(bare)


def test_the_driver_named_product_wins_over_the_nodes_label() -> None:
    a3 = node(PRODUCTS["module910a3x16"])
    assert published(a3, {"accelerator-type": "module-910b-16"})[3]["die"] == 1


def test_a_910_node_without_a_product_is_placed_as_the_scheduler_places_it() -> None:
    chips = NodeChips("Ascend910", None, tuple(Chip(i, i) for i in range(16)))
    label = {"accelerator-type": "module-910b-16"}
    assert [published(chips, label)[c]["hccsRing"] for c in (0, 7, 8, 15)] == [0, 0, 1, 1]


REF = ClaimRef("infer", "c", "uid-1")


@pytest.mark.parametrize(
    ("name", "chips", "why"),
    [
        ("module910a3x16", [4], None),
        ("module910a3x16", [4, 5], None),
        ("module910a3x16", [0, 1, 6, 7], None),  # two whole dies
        ("module910a3x16", [3, 4], r"takes part of die \[1, 2\]"),
        ("module910a3x16", [0, 1, 2], "has 3 chips"),
        ("atlas350-4px8", [1, 2, 3], None),
        ("atlas350-4px8", [3, 4], r"spans meshes \[0, 1\]"),
        ("atlas350-4px8", [2, 3, 4, 5, 6], None),  # not mesh-affine: any chips
        ("atlas350-4px16", list(range(4, 12)), None),  # two whole meshes
        ("atlas350-4px16", [*range(2, 8), 12, 13], r"takes part of mesh \[0, 3\]"),
        ("atlas350x8", [3, 4], None),  # chip1-node8: any chips
        ("module910x8", [3, 4], r"spans HCCS rings \[0, 1\]"),
    ],
)
def test_a_request_the_scheduler_would_not_give_is_refused_at_prepare(
    name: str, chips: list[int], why: str | None
) -> None:
    product = PRODUCTS[name]
    if why is None:
        check_ring_rule(REF, "npus", chips, product)
        return
    with pytest.raises(ClaimRefused, match=why):
        check_ring_rule(REF, "npus", chips, product)
