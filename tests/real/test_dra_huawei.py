"""Claims written for Huawei's DRA driver (Ascend/mind-cluster
``component/ascend-dynamic-resource-allocation``: its DeviceClass ``npu.huawei.com``, its
``demo/`` and the claim template of its best-practice guide, ``docs/zh/scheduling/04_usage/
13_ascend_dynamic_resource_allocation_best_practice``) run unchanged on our DRA driver, on the
real control plane: the DRA overlay applied as kustomize renders it (its DeviceClass
``npu.huawei.com``, the MutatingAdmissionPolicy ``ascend-npu-huawei-claims``), our driver
publishing Huawei's attributes beside ours, the real kube-scheduler allocating, the kubelet
DRA simulator preparing. Huawei's claims carry no topology: the policy gives those asking 2
to 4 chips together the ``group`` constraint, so they get the chips the scheduler gives."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.dra import DEFAULT_DRIVER
from testbed.control_plane import ControlPlane, scratch, wait_until
from testbed.dra import RESOURCE, DraTestbed, dra_testbed
from testbed.rest import Obj, RestError

NS = "default"
NODE_910, NODE_950 = "hw-910", "hw-950"  # an Atlas 800 (module910x8); an Atlas 350 4p-8
STATE_950 = "chip_type: npu\nchips:\n" + "".join(f"  - {{id: {i}}}\n" for i in range(8))
LABELS_950 = {"accelerator": "huawei-npu", "accelerator-type": "350-Atlas-4p-8"}
HUAWEI_CLASS = "npu.huawei.com"
GROUP = f"{DEFAULT_DRIVER}/group"
TEMPLATES = f"{RESOURCE}/namespaces/{NS}/resourceclaimtemplates"
CLAIMS = f"{RESOURCE}/namespaces/{NS}/resourceclaims"
MAP_BINDINGS = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings"


@pytest.fixture(scope="module")
def bed(control_plane: ControlPlane) -> Iterator[DraTestbed]:
    with dra_testbed(
        control_plane,
        scratch("dra-hw"),
        [NODE_910, NODE_950],
        {NODE_950: STATE_950},
        {NODE_950: LABELS_950},
    ) as running:
        yield running


def template(name: str, requests: list[Obj]) -> Obj:
    return {"metadata": {"name": name}, "spec": {"spec": {"devices": {"requests": requests}}}}


def huawei(name: str, count: int | None = None, selector: str | None = None) -> Obj:
    """A request as Huawei's users write it: the class, perhaps a count, perhaps a selector."""
    exactly: Obj = {"deviceClassName": HUAWEI_CLASS}
    if count is not None:
        exactly["count"] = count
    if selector is not None:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": exactly}


def run(bed: DraTestbed, pod: str, template_name: str, *nodes: str) -> tuple[str, list[int]]:
    """A pod of one claim from ``template_name`` (on ``nodes`` if given), bound, prepared and
    running: its node and the chips its container sees."""
    spec: Obj = {
        "restartPolicy": "Never",
        "resourceClaims": [{"name": "npus", "resourceClaimTemplateName": template_name}],
        "containers": [
            {"name": "main", "image": "ubuntu:22.04", "resources": {"claims": [{"name": "npus"}]}}
        ],
    }
    if nodes:
        term = {"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [term]}]
                }
            }
        }
    bed.admin.create(f"/api/v1/namespaces/{NS}/pods", {"metadata": {"name": pod}, "spec": spec})
    bound = bed.bound(NS, pod)
    (container,) = bed.start(bound).values()
    seen = sorted(
        int(p.removeprefix("/dev/davinci"))
        for p in container.device_nodes
        if p.removeprefix("/dev/davinci").isdigit()
    )
    (status,) = bound["status"]["resourceClaimStatuses"]
    claim = bed.admin.get(f"{CLAIMS}/{status['resourceClaimName']}")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert sorted(int(r["device"].removeprefix("npu-")) for r in results) == seen
    return bound["spec"]["nodeName"], seen


def attributes(bed: DraTestbed, node: str, chip: int) -> dict[str, object]:
    published = bed.slice_of(node)
    assert published is not None
    (device,) = [d for d in published["spec"]["devices"] if d["name"] == f"npu-{chip}"]
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


def test_each_device_carries_huaweis_attributes_in_huaweis_domain(bed: DraTestbed) -> None:
    for node, device_type in ((NODE_910, "Ascend910"), (NODE_950, "Ascend910A5")):
        found = attributes(bed, node, 6)
        assert found["npu.huawei.com/deviceType"] == device_type
        assert found["npu.huawei.com/physicId"] == 6 == found["physicalID"]
        assert found["group"] == 1, "ring 1 of the 910, mesh 1 of the 950"
        assert "dropped fields" not in bed.hosts[node].log.read_text(), "the server kept them"
    huawei_class = bed.admin.get(f"{RESOURCE}/deviceclasses/{HUAWEI_CLASS}")
    assert f'device.driver == "{DEFAULT_DRIVER}"' in str(huawei_class["spec"]["selectors"])


def test_the_claim_template_of_huaweis_guide_runs(bed: DraTestbed) -> None:
    """The guide's ascend-npu-template (its deviceClassName and count, under ``exactly`` as
    resource.k8s.io/v1 has them) gives one chip, as the device node /dev/davinci<id>."""
    bed.admin.create(TEMPLATES, template("ascend-npu-template", [huawei("npu", count=1)]))
    node, chips = run(bed, "dra-test", "ascend-npu-template", NODE_910)
    assert (node, len(chips)) == (NODE_910, 1)


def test_huaweis_two_single_npu_requests_get_one_hccs_ring(bed: DraTestbed) -> None:
    """demo/npu-test2.yaml's multiple-npus (two requests of one chip). With chip 0 held (the
    guide's pod) and two more taken, ring 0 has one chip left: first fit alone would give
    chips 3 and 4, across the rings; the policy's group constraint gives ring 1's first two."""
    bed.admin.create(TEMPLATES, template("hold", [huawei("hold", count=2)]))
    assert run(bed, "hold-2", "hold", NODE_910)[1] == [1, 2]
    bed.admin.create(TEMPLATES, template("multiple-npus", [huawei("npu-1"), huawei("npu-2")]))
    stored = bed.admin.get(f"{TEMPLATES}/multiple-npus")["spec"]["spec"]["devices"]
    assert stored["constraints"] == [{"requests": ["npu-1", "npu-2"], "matchAttribute": GROUP}]
    assert run(bed, "pod0", "multiple-npus", NODE_910)[1] == [4, 5]


def test_a_claim_selecting_on_huaweis_attributes_gets_one_950_mesh(bed: DraTestbed) -> None:
    """Two chips of type Ascend910A5 with physicId 3 or more, as a selector written for
    Huawei's driver reads them: kube-scheduler finds them on the 950 node only; first fit
    would give 3 and 4, across the meshes, the group constraint 4 and 5."""
    selector = (
        'device.attributes["npu.huawei.com"].deviceType == "Ascend910A5" && '
        'device.attributes["npu.huawei.com"].physicId >= 3'
    )
    bed.admin.create(TEMPLATES, template("a5-pair", [huawei("npus", 2, selector)]))
    assert run(bed, "a5", "a5-pair") == (NODE_950, [4, 5])


def test_what_cannot_be_placed_is_refused_naming_why(bed: DraTestbed) -> None:
    """allocationMode All (a node with a faulty chip would give fewer); and, where the
    mutating policy is not installed (Kubernetes 1.34, 1.35: taken away here), 2 chips with
    no group constraint, naming the constraint to add."""
    everything = huawei("all")
    everything["exactly"]["allocationMode"] = "All"
    with pytest.raises(RestError) as refused:
        bed.admin.create(
            CLAIMS, {"metadata": {"name": "all"}, "spec": {"devices": {"requests": [everything]}}}
        )
    assert refused.value.status == 422 and "allocationMode All is refused" in str(refused.value)
    binding = bed.admin.get(f"{MAP_BINDINGS}/ascend-npu-huawei-claims")
    bed.admin.delete(f"{MAP_BINDINGS}/ascend-npu-huawei-claims")
    pair = {"metadata": {"name": "pair"}, "spec": {"devices": {"requests": [huawei("n", 2)]}}}
    refusals: list[RestError] = []

    def pair_refused() -> bool:
        """The API server's policies see the binding gone (they follow it by a watch)."""
        try:
            bed.admin.create(CLAIMS, pair)
        except RestError as refusal:
            refusals.append(refusal)
            return True
        bed.admin.delete(f"{CLAIMS}/pair")
        return False

    try:
        wait_until(pair_refused, 60, "the 2-chip claim refused without the mutating policy")
        assert refusals[-1].status == 422
        assert f"matchAttribute {GROUP}" in " ".join(str(refusals[-1]).split())
    finally:
        binding["metadata"] = {"name": binding["metadata"]["name"]}
        bed.admin.create(MAP_BINDINGS, binding)
