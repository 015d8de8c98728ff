"""The DRA overlay's admission policies, evaluated as the API server would: a claim asks 1,
2, 4, 8 or 16 Ascend 910 chips, 2 and 4 only on one HCCS ring (or A3 die), 1 to 16 Ascend 950
NPUs, 2 to 4 only on one mesh; a node's DRA driver writes only
its node's ResourceSlices, of its driver, in its node's pool."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contract.dra import DEFAULT_DRIVER
from simulation.dra_cluster import deployed
from tests.deploy.test_admission_policy import admit, request

DRIVER = "system:serviceaccount:kube-system:ascend-npu-dra-driver"
CLASS = "ascend910.npu.ascend.example.com"
RING = "npu.ascend.example.com/hccsRing"
DIE = "npu.ascend.example.com/die"
CLASS_950 = "ascend950.npu.ascend.example.com"
MESH = "npu.ascend.example.com/mesh"


def claim(
    count: int | None,
    *,
    ring: bool = False,
    mode: str | None = None,
    on: str = RING,
    of: str = CLASS,
) -> Any:
    exactly: dict[str, Any] = {"deviceClassName": of}
    if count is not None:
        exactly["count"] = count
    if mode is not None:
        exactly["allocationMode"] = mode
    devices: dict[str, Any] = {"requests": [{"name": "npus", "exactly": exactly}]}
    if ring:
        devices["constraints"] = [{"requests": ["npus"], "matchAttribute": on}]
    return {"kind": "ResourceClaim", "metadata": {"name": "c"}, "spec": {"devices": devices}}


def claims(obj: Any) -> dict[str, Any]:
    return request("CREATE", "resourceclaims", "alice", obj, name="c")


@pytest.mark.parametrize(
    ("case", "obj", "allowed"),
    [
        ("one chip", claim(1), True),
        ("one chip, count left to its default", claim(None), True),
        ("two chips on one ring", claim(2, ring=True), True),
        ("two chips on one A3 die", claim(2, ring=True, on=DIE), True),
        ("two chips matched on another attribute", claim(2, ring=True, on="x.io/a"), False),
        ("two chips anywhere", claim(2), False),
        ("three chips", claim(3, ring=True), False),
        ("four chips on one ring", claim(4, ring=True), True),
        ("four chips anywhere", claim(4), False),
        ("the whole node", claim(8), True),
        ("every matching chip", claim(None, mode="All"), False),
        ("a whole 16-chip server (910B x16, A3 x16)", claim(16), True),
        ("twelve chips", claim(12), False),
    ],
)
def test_a_claim_asks_a_legal_count_and_keeps_two_or_four_chips_on_one_ring(
    case: str, obj: Any, allowed: bool
) -> None:
    assert admit("ascend-npu-claims", claims(obj)).allowed == allowed, case


@pytest.mark.parametrize(
    ("case", "obj", "allowed"),
    [
        ("one NPU", claim(1, of=CLASS_950), True),
        ("two NPUs on one mesh", claim(2, ring=True, on=MESH, of=CLASS_950), True),
        ("three NPUs on one mesh", claim(3, ring=True, on=MESH, of=CLASS_950), True),
        ("four NPUs on one mesh", claim(4, ring=True, on=MESH, of=CLASS_950), True),
        ("four NPUs anywhere", claim(4, of=CLASS_950), False),
        ("four NPUs on one HCCS ring", claim(4, ring=True, of=CLASS_950), False),
        ("five NPUs (chip4nodex: any)", claim(5, of=CLASS_950), True),
        ("a whole 16-NPU server", claim(16, of=CLASS_950), True),
        ("seventeen NPUs", claim(17, of=CLASS_950), False),
        ("every matching NPU", claim(None, mode="All", of=CLASS_950), False),
    ],
)
def test_a_950_claim_asks_1_to_16_npus_and_keeps_2_to_4_on_one_mesh(
    case: str, obj: Any, allowed: bool
) -> None:
    assert admit("ascend-npu-claims", claims(obj)).allowed == allowed, case


def test_a_950_request_of_four_without_the_mesh_constraint_is_told_why() -> None:
    verdict = admit("ascend-npu-claims", claims(claim(4, of=CLASS_950)))
    assert verdict.refusals == (
        "a request of 2 to 4 Ascend 950 NPUs needs the constraint matchAttribute "
        "npu.ascend.example.com/mesh over it (its NPUs on one mesh of 4)",
    )


def test_four_a3_chips_as_two_whole_dies_and_a_product_selector_are_admitted() -> None:
    """The A3 scheduler gives 4 chips as two whole dies: two requests of 2, each on its die;
    ``acceleratorType`` in a selector picks the product."""
    obj = claim(2, ring=True, on=DIE)
    devices = obj["spec"]["devices"]
    devices["requests"][0]["exactly"]["selectors"] = [
        {
            "cel": {
                "expression": 'device.attributes["npu.ascend.example.com"].acceleratorType'
                ' == "module-a3-16"'
            }
        }
    ]
    devices["requests"].append({**devices["requests"][0], "name": "more"})
    devices["constraints"].append({"requests": ["more"], "matchAttribute": DIE})
    assert admit("ascend-npu-claims", claims(obj)).allowed
    del devices["constraints"][1]
    assert not admit("ascend-npu-claims", claims(obj)).allowed


def test_a_constraint_over_another_request_does_not_keep_this_one_on_a_ring() -> None:
    obj = claim(2, ring=True)
    obj["spec"]["devices"]["constraints"][0]["requests"] = ["other"]
    verdict = admit("ascend-npu-claims", claims(obj))
    assert verdict.refusals == (
        "a request of 2 or 4 Ascend 910 chips needs the constraint matchAttribute "
        "npu.ascend.example.com/hccsRing over it (its chips on one HCCS ring), or "
        "npu.ascend.example.com/die on an A3 (its chips on one die)",
    )


def test_a_ladder_rung_of_two_chips_needs_the_ring_constraint_too() -> None:
    (ladder,) = [
        t for t in deployed("ResourceClaimTemplate") if t["metadata"]["name"] == "npu-2-fit"
    ]
    unconstrained = copy.deepcopy(ladder)
    del unconstrained["spec"]["spec"]["devices"]["constraints"]
    templates = "resourceclaimtemplates"
    assert admit("ascend-npu-claims", request("CREATE", templates, "alice", ladder)).allowed
    assert not admit(
        "ascend-npu-claims", request("CREATE", templates, "alice", unconstrained)
    ).allowed


def test_every_deployed_claim_template_is_admitted() -> None:
    for template in deployed("ResourceClaimTemplate"):
        admission = request("CREATE", "resourceclaimtemplates", "alice", template)
        assert admit("ascend-npu-claims", admission).allowed, template["metadata"]["name"]


def a_slice(node: str, *, driver: str = DEFAULT_DRIVER, pool: str | None = None) -> Any:
    spec = {"driver": driver, "nodeName": node, "pool": {"name": node if pool is None else pool}}
    return {"kind": "ResourceSlice", "metadata": {"name": f"{node}-x"}, "spec": spec}


SLICE_WRITES = {
    "publishing under another driver's name": (
        ("CREATE", "node-a", a_slice("node-a", driver="gpu.nvidia.com"), None),
        False,
    ),
    "publishing into another node's pool": (
        ("CREATE", "node-a", a_slice("node-a", pool="node-b"), None),
        False,
    ),
    "renaming its driver": (
        ("UPDATE", "node-a", a_slice("node-a", driver="x.example.com"), a_slice("node-a")),
        False,
    ),
    "updating its own": (("UPDATE", "node-a", a_slice("node-a"), a_slice("node-a")), True),
    "creating its node's slice": (("CREATE", "node-a", a_slice("node-a"), None), True),
    "creating another node's": (("CREATE", "node-a", a_slice("node-b"), None), False),
    "moving its slice away": (("UPDATE", "node-a", a_slice("node-b"), a_slice("node-a")), False),
    "deleting another node's": (("DELETE", "node-a", None, a_slice("node-b")), False),
    "deleting its own": (("DELETE", "node-a", None, a_slice("node-a")), True),
    "without a node-bound token": (("CREATE", None, a_slice("node-a"), None), False),
}


@pytest.mark.parametrize("case", sorted(SLICE_WRITES))
def test_a_nodes_dra_driver_writes_only_its_nodes_slices(case: str) -> None:
    (operation, node, obj, old), allowed = SLICE_WRITES[case]
    admission = request(operation, "resourceslices", DRIVER, obj, old, node=node, name="s")
    assert admit("ascend-npu-dra-slices", admission).allowed == allowed, case


def test_the_slice_policy_leaves_other_writers_to_rbac() -> None:
    admission = request("CREATE", "resourceslices", "alice", a_slice("node-b"), name="s")
    assert not admit("ascend-npu-dra-slices", admission).applies
