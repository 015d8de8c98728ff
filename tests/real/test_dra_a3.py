"""DRA on the real control plane for an Atlas A3 server: its DRA driver publishes 16 chips,
each with its die (an NPU module of two chips), and the real kube-scheduler gives a claim of
two chips with ``matchAttribute`` on the die the two chips of one die."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.dra import DEFAULT_DRIVER
from testbed.control_plane import ControlPlane, scratch
from testbed.dra import RESOURCE, DraTestbed, dra_testbed
from testbed.rest import Obj

NS = "default"
NODE = "a3-node"
A3 = "product: module910a3x16\nchips:\n" + "".join(f"  - {{id: {i}}}\n" for i in range(16))
CLASS = f"ascend910.{DEFAULT_DRIVER}"


@pytest.fixture(scope="module")
def bed(control_plane: ControlPlane) -> Iterator[DraTestbed]:
    with dra_testbed(control_plane, scratch("dra-a3"), [NODE], {NODE: A3}) as running:
        yield running


def attributes(device: Obj) -> dict[str, object]:
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


def test_an_a3_node_publishes_sixteen_chips_each_with_its_die(bed: DraTestbed) -> None:
    published = bed.slice_of(NODE)
    assert published is not None
    found = {d["name"]: attributes(d) for d in published["spec"]["devices"]}
    assert sorted(found) == sorted(f"npu-{c}" for c in range(16))
    assert all(found[f"npu-{c}"]["die"] == c // 2 for c in range(16))
    assert found["npu-11"]["physicalID"] == 11 and found["npu-11"]["model"] == "Ascend910"


def claim_on_a_die(name: str) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "npus", "exactly": {"deviceClassName": CLASS, "count": 2}}],
                "constraints": [{"requests": ["npus"], "matchAttribute": f"{DEFAULT_DRIVER}/die"}],
            }
        },
    }


def test_two_chip_claims_on_the_die_attribute_each_get_one_whole_die(bed: DraTestbed) -> None:
    claims = f"{RESOURCE}/namespaces/{NS}/resourceclaims"
    # One chip first, so first fit alone would split the next pair across two dies.
    bed.admin.create(
        claims,
        {
            "metadata": {"name": "one"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "npus", "exactly": {"deviceClassName": CLASS, "count": 1}}
                    ]
                }
            },
        },
    )
    bed.submit_on(NS, NODE, "single", "one")
    bed.start(bed.bound(NS, "single"))
    given = {"single": bed.allocated_ids(NS, "one", "npu-")}
    for i in range(3):
        bed.admin.create(claims, claim_on_a_die(f"die-{i}"))
        bed.submit_on(NS, NODE, f"pair-{i}", f"die-{i}")
        # kube-scheduler writes the allocation before it binds (PreBind).
        bed.start(bed.bound(NS, f"pair-{i}"))
        given[f"pair-{i}"] = bed.allocated_ids(NS, f"die-{i}", "npu-")
    for name in ("pair-0", "pair-1", "pair-2"):
        low, high = given[name]
        assert low // 2 == high // 2 and high == low + 1, f"{name}: one die, got {given[name]}"
    chips = [c for held in given.values() for c in held]
    assert len(set(chips)) == len(chips) == 7, "no chip given twice"
    assert given["single"][0] // 2 not in {given[p][0] // 2 for p in ("pair-0", "pair-1", "pair-2")}
