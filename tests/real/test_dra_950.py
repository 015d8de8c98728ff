"""DRA on the real control plane for an Ascend 950 server (an Atlas 350 4p-8: 8 NPUs in two
meshes of 4): its DRA driver publishes ``npu`` devices with the product its node's
``accelerator-type`` label names, the real kube-scheduler gives a claim of the 950 class
(``ascend950.<driver>``) its NPUs, four of them on one mesh with ``matchAttribute`` on
``mesh``, and the container gets them as Huawei's runtime expects (``/dev/davinci<id>``, as
the device plugin's Allocate answer gives them); a claim of the 910 class gets none of them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.dra import DEFAULT_DRIVER
from testbed.control_plane import ControlPlane, scratch, wait_until
from testbed.dra import RESOURCE, DraTestbed, dra_testbed
from testbed.rest import Obj, RestError

NS = "default"
NODE = "a350-node"
STATE = "chip_type: npu\nchips:\n" + "".join(f"  - {{id: {i}}}\n" for i in range(8))
# As Huawei's device plugin labels an Atlas 350 4p-8 (ascend-common/api/const_v2.go).
LABELS = {"accelerator": "huawei-npu", "accelerator-type": "350-Atlas-4p-8"}
CLASS_950 = f"ascend950.{DEFAULT_DRIVER}"
CLASS_910 = f"ascend910.{DEFAULT_DRIVER}"
CLAIMS = f"{RESOURCE}/namespaces/{NS}/resourceclaims"


@pytest.fixture(scope="module")
def bed(control_plane: ControlPlane) -> Iterator[DraTestbed]:
    with dra_testbed(
        control_plane, scratch("dra-950"), [NODE], {NODE: STATE}, {NODE: LABELS}
    ) as running:
        yield running


def attributes(device: Obj) -> dict[str, object]:
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


def test_a_950_node_publishes_its_npus_with_the_product_of_its_label(bed: DraTestbed) -> None:
    published = bed.slice_of(NODE)
    assert published is not None
    found = {d["name"]: attributes(d) for d in published["spec"]["devices"]}
    assert sorted(found) == sorted(f"npu-{c}" for c in range(8))
    assert all(found[f"npu-{c}"]["mesh"] == c // 4 for c in range(8))
    assert found["npu-6"]["model"] == "npu"
    assert (found["npu-6"]["topology"], found["npu-6"]["acceleratorType"]) == (
        "atlas350-4px8",
        "350-Atlas-4p-8",
    )


def claim(name: str, count: int, device_class: str = CLASS_950, mesh: bool = False) -> Obj:
    devices: Obj = {
        "requests": [{"name": "npus", "exactly": {"deviceClassName": device_class, "count": count}}]
    }
    if mesh:
        devices["constraints"] = [
            {"requests": ["npus"], "matchAttribute": f"{DEFAULT_DRIVER}/mesh"}
        ]
    return {"metadata": {"name": name}, "spec": {"devices": devices}}


def test_four_npus_on_the_mesh_attribute_get_one_whole_mesh_as_davinci_devices(
    bed: DraTestbed,
) -> None:
    bed.admin.create(CLAIMS, claim("one-npu", 1))
    bed.submit_on(NS, NODE, "single", "one-npu")
    bed.start(bed.bound(NS, "single"))
    assert bed.allocated_ids(NS, "one-npu", "npu-") == [0]  # first fit over the slice's mesh order
    bed.admin.create(CLAIMS, claim("one-mesh", 4, mesh=True))
    bed.submit_on(NS, NODE, "meshed", "one-mesh")
    (container,) = bed.start(bed.bound(NS, "meshed")).values()
    # First fit alone would take 1–4, across both meshes; the constraint keeps mesh 1 whole.
    assert bed.allocated_ids(NS, "one-mesh", "npu-") == [4, 5, 6, 7]
    chips = [p for p in container.device_nodes if p.removeprefix("/dev/davinci").isdigit()]
    assert sorted(chips) == [f"/dev/davinci{c}" for c in (4, 5, 6, 7)]
    assert "/dev/davinci_manager" in container.device_nodes


def test_four_npus_without_the_mesh_constraint_are_refused(bed: DraTestbed) -> None:
    with pytest.raises(RestError) as refused:
        bed.admin.create(CLAIMS, claim("anywhere", 4))
    assert refused.value.status == 422
    assert f"{DEFAULT_DRIVER}/mesh" in str(refused.value)


def test_a_claim_of_the_910_class_gets_no_950_npu(bed: DraTestbed) -> None:
    bed.admin.create(CLAIMS, claim("a-910", 1, CLASS_910))
    bed.submit_on(NS, NODE, "wrong-kind", "a-910")

    def unschedulable() -> bool:
        pod = bed.admin.get(f"/api/v1/namespaces/{NS}/pods/wrong-kind")
        return any(
            c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
            for c in pod.get("status", {}).get("conditions") or []
        )

    wait_until(unschedulable, 60, "the 910-class pod found unschedulable")
    assert "allocation" not in (bed.admin.get(f"{CLAIMS}/a-910").get("status") or {})
