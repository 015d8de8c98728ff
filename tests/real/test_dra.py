"""DRA on the real control plane: the DRA overlay (DeviceClass, claim templates, RBAC,
admission policies) applied as kustomize renders it, the DRA driver per simulated 910 node
publishing real ResourceSlices under its node-bound ServiceAccount token, the real
kube-scheduler allocating the claims the real resourceclaim controller makes from the
shipped templates, and the project's kubelet DRA simulator preparing them over the driver's
gRPC.

The chip choices asserted are those ``tests/e2e/test_dra.py`` asserts of the stand-in
allocator (``simulation/dra_allocator.py``): first fit over the slice's ring order, with the
``matchAttribute`` ring constraint, and the exact-fit ladder's ``firstAvailable`` rungs
(upstream: ``k8s.io/dynamic-resource-allocation/structured``, and
``pkg/scheduler/framework/plugins/dynamicresources``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.dra import DEFAULT_DRIVER
from simulation.cluster import set_health
from simulation.dra_allocator import (
    Allocator,
    Choice,
    allocation,
    in_use,
    node_devices,
    score,
)
from simulation.kubelet_dra import Container
from testbed.control_plane import ControlPlane, scratch, wait_until
from testbed.dra import RESOURCE, DraTestbed, dra_testbed
from testbed.rest import Obj, Rest, RestError

NS = "default"  # where the overlay puts its claim templates
RING_NODE, LADDER_NODE, FILL_NODES = "node-00", "node-01", ("node-02", "node-03")
SCORE_NODES = ("node-04", "node-05")
NODES = [RING_NODE, LADDER_NODE, *FILL_NODES, *SCORE_NODES]
RING = 4  # chips per HCCS ring of an 8-chip 910 server (module910x8)


@pytest.fixture(scope="module")
def bed(control_plane: ControlPlane) -> Iterator[DraTestbed]:
    with dra_testbed(control_plane, scratch("dra"), NODES) as running:
        yield running


def submit(bed: DraTestbed, name: str, template: str, nodes: tuple[str, ...]) -> None:
    """A pod using one claim from ``template``, kept to ``nodes`` by node affinity."""
    term = {"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}
    bed.admin.create(
        f"/api/v1/namespaces/{NS}/pods",
        {
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [term]}]
                        }
                    }
                },
                "resourceClaims": [{"name": "npus", "resourceClaimTemplateName": template}],
                "containers": [
                    {"name": "main", "image": "train", "resources": {"claims": [{"name": "npus"}]}}
                ],
            },
        },
    )


def run(bed: DraTestbed, name: str, template: str, *nodes: str) -> Obj:
    """Submitted, bound by kube-scheduler, prepared and Running; the pod as bound. The real
    allocation is the one the stand-in allocator gives on the same slices and claims."""
    submit(bed, name, template, nodes)
    pod = bed.bound(NS, name)
    node = pod["spec"]["nodeName"]
    claim = claim_of(bed, pod)
    real = dict(claim["status"]["allocation"])
    real.pop("allocationTimestamp", None)
    choice = stand_in(bed, claim, node)
    assert choice is not None, f"the stand-in finds no room for {name} on {node}"
    assert real == allocation(node, choice), f"{name}: kube-scheduler and the stand-in agree"
    taken = in_use([claim]) & in_use(others_of(bed, claim))
    assert not taken, f"{name}: devices of another claim {taken}"
    bed.start(pod)
    return pod


def others_of(bed: DraTestbed, claim: Obj) -> list[Obj]:
    claims = bed.admin.get(f"{RESOURCE}/resourceclaims")["items"]
    return [c for c in claims if c["metadata"]["uid"] != claim["metadata"]["uid"]]


def stand_in(bed: DraTestbed, claim: Obj, node: str) -> list[Choice] | None:
    """What ``simulation.dra_allocator`` allocates to ``claim`` on ``node``, every other
    claim's allocation in use (the state kube-scheduler allocated from, as long as no slice
    hint the claim selects on changed since)."""
    classes = bed.admin.get(f"{RESOURCE}/deviceclasses")["items"]
    slices = bed.admin.get(f"{RESOURCE}/resourceslices")["items"]
    allocator = Allocator({c["metadata"]["name"]: c for c in classes})
    return allocator.allocate(claim, node_devices(slices, node), in_use(others_of(bed, claim)))


def claim_of(bed: DraTestbed, pod: Obj) -> Obj:
    (status,) = pod["status"]["resourceClaimStatuses"]
    return bed.admin.get(f"{RESOURCE}/namespaces/{NS}/resourceclaims/{status['resourceClaimName']}")


def allocated(bed: DraTestbed, pod: Obj) -> tuple[list[int], set[str]]:
    """The chips kube-scheduler allocated to the pod's claim, and the requests it wrote."""
    results = claim_of(bed, pod)["status"]["allocation"]["devices"]["results"]
    assert {r["driver"] for r in results} == {DEFAULT_DRIVER}
    assert {r["pool"] for r in results} == {pod["spec"]["nodeName"]}, "the node's own pool"
    return sorted(int(r["device"].removeprefix("npu-")) for r in results), {
        r["request"] for r in results
    }


def seen(containers: dict[str, Container]) -> list[int]:
    """The chips the container's CDI devices give it (its /dev/davinciN)."""
    (container,) = containers.values()
    return sorted(
        int(path.removeprefix("/dev/davinci"))
        for path in container.device_nodes
        if path.removeprefix("/dev/davinci").isdigit()
    )


def chips(bed: DraTestbed, name: str) -> list[int]:
    """The pod's chips: the allocation's, which its container sees."""
    pod = bed.admin.get(f"/api/v1/namespaces/{NS}/pods/{name}")
    given, _ = allocated(bed, pod)
    assert seen(bed.running[f"{NS}/{name}"]) == given, "the container sees the allocation"
    assert pod["status"]["phase"] == "Running"
    return given


def attributes(bed: DraTestbed, node: str, chip: int) -> dict[str, object]:
    published = bed.slice_of(node)
    assert published is not None
    (device,) = [d for d in published["spec"]["devices"] if d["name"] == f"npu-{chip}"]
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


def unschedulable(bed: DraTestbed, name: str) -> bool:
    pod = bed.admin.get(f"/api/v1/namespaces/{NS}/pods/{name}")
    return any(
        c["type"] == "PodScheduled"
        and c["status"] == "False"
        and c.get("reason") == "Unschedulable"
        for c in pod["status"].get("conditions") or []
    )


def test_each_node_publishes_its_chips_and_only_its_own_slice(bed: DraTestbed) -> None:
    for node in NODES:
        published = bed.slice_of(node)
        assert published is not None
        spec = published["spec"]
        assert spec["nodeName"] == node and spec["pool"]["name"] == node
        assert [d["name"] for d in spec["devices"]] == [f"npu-{c}" for c in range(8)]
        first = attributes(bed, node, 5)
        assert first["hccsRing"] == 1 and first["ringFree"] == RING and first["healthy"] is True
        assert first["model"] == "Ascend910"
        assert "dropped fields" not in bed.hosts[node].log.read_text(), "all fields stored"
    stray = bed.slice_of(FILL_NODES[0])
    assert stray is not None
    stray["metadata"] = {"name": "stray"}
    stray["spec"]["nodeName"] = stray["spec"]["pool"]["name"] = FILL_NODES[1]
    driver = Rest(bed.plane.workdir / f"dra-{FILL_NODES[0]}.kubeconfig")
    with pytest.raises(RestError) as refused:
        driver.create(f"{RESOURCE}/resourceslices", stray)
    assert refused.value.status == 403
    assert "writes only the ResourceSlices of its own node" in refused.value.message


def test_the_admission_policy_refuses_claims_that_break_the_ring_rule(bed: DraTestbed) -> None:
    def claim(count: int, constrained: bool) -> Obj:
        devices: Obj = {
            "requests": [
                {
                    "name": "npus",
                    "exactly": {
                        "deviceClassName": "ascend910.npu.ascend.example.com",
                        "count": count,
                    },
                }
            ]
        }
        if constrained:
            devices["constraints"] = [
                {"requests": ["npus"], "matchAttribute": "npu.ascend.example.com/hccsRing"}
            ]
        return {
            "metadata": {"name": f"c{count}-{constrained}".lower()},
            "spec": {"devices": devices},
        }

    claims = f"{RESOURCE}/namespaces/{NS}/resourceclaims"
    for count, constrained in ((3, True), (2, False), (4, False)):
        with pytest.raises(RestError) as refused:
            bed.admin.create(claims, claim(count, constrained))
        assert refused.value.status in (403, 422), refused.value.message
        assert "ValidatingAdmissionPolicy 'ascend-npu-claims'" in refused.value.message
    bed.admin.create(claims, claim(2, True))
    bed.admin.delete(f"{claims}/c2-true")


def test_ring_claims_take_the_chips_first_fit_gives_within_one_ring(bed: DraTestbed) -> None:
    """As the stand-in: 2, 1, 4, 1 chips → [0, 1], [2], [4..7], [3]; a ninth chip waits
    until one is freed, and takes it."""
    for name, template in (("p0", "npu-2-ring"), ("p1", "npu-1"), ("p2", "npu-4-ring")):
        run(bed, name, template, RING_NODE)
    run(bed, "p3", "npu-1", RING_NODE)
    given = {name: chips(bed, name) for name in ("p0", "p1", "p2", "p3")}
    assert given == {"p0": [0, 1], "p1": [2], "p2": [4, 5, 6, 7], "p3": [3]}
    for held in given.values():
        assert len({c // RING for c in held}) == 1, "one HCCS ring"
    submit(bed, "late", "npu-1", (RING_NODE,))
    wait_until(lambda: unschedulable(bed, "late"), 120, "late: unschedulable, the node is full")
    bed.end(NS, "p1")
    bed.start(bed.bound(NS, "late"))
    assert chips(bed, "late") == [2]


def test_the_exact_fit_ladder_takes_the_ring_first_fit_would_split(bed: DraTestbed) -> None:
    """Ring 1 has two healthy chips, ring 0 three free: the ladder's 2 chips take ring 1
    whole (its rung fit2), plain first fit splits ring 0."""
    host = bed.hosts[LADDER_NODE]
    set_health(host.home / "state.yaml", frozenset({4, 5}))
    wait_until(
        lambda: (
            attributes(bed, LADDER_NODE, 6)["ringFree"] == 2
            and attributes(bed, LADDER_NODE, 4)["healthy"] is False
        ),
        60,
        "the faults published",
    )
    assert chips(bed, run(bed, "one", "npu-1", LADDER_NODE)["metadata"]["name"]) == [0]
    wait_until(lambda: attributes(bed, LADDER_NODE, 1)["ringFree"] == 3, 60, "ringFree of ring 0")
    fit = run(bed, "fit", "npu-2-fit", LADDER_NODE)
    assert allocated(bed, fit) == ([6, 7], {"npus/fit2"}), "the rung of a ring with 2 free"
    assert chips(bed, "fit") == [6, 7]
    assert chips(bed, run(bed, "plain", "npu-2-ring", LADDER_NODE)["metadata"]["name"]) == [1, 2]
    wait_until(lambda: attributes(bed, LADDER_NODE, 3)["ringFree"] == 1, 60, "ring 0: 1 free")
    one = run(bed, "single", "npu-1-fit", LADDER_NODE)
    assert allocated(bed, one) == ([3], {"npus/fit1"}), "the ring with one chip free"


def test_whole_rings_and_nodes_fill_two_nodes_without_giving_a_chip_twice(
    bed: DraTestbed,
) -> None:
    """8 + 4 + 2 + 1 + 1 chips on two 8-chip nodes, kube-scheduler choosing the node."""
    asks = [("whole", "npu-8"), ("four", "npu-4-ring"), ("two", "npu-2-ring")]
    asks += [("single-a", "npu-1"), ("single-b", "npu-1")]
    held: dict[tuple[str, int], str] = {}
    for name, template in asks:
        node = run(bed, name, template, *FILL_NODES)["spec"]["nodeName"]
        given = chips(bed, name)
        wanted = {"npu-8": 8, "npu-4-ring": 4, "npu-2-ring": 2, "npu-1": 1}[template]
        assert len(given) == wanted
        if wanted <= RING:
            assert len({c // RING for c in given}) == 1, f"{name}: one HCCS ring"
        for chip in given:
            owner = held.setdefault((node, chip), name)
            assert owner == name, f"chip {chip} of {node} given to {owner} and {name}"
    assert len(held) == 16, "both nodes full"
    submit(bed, "over", "npu-1", FILL_NODES)
    wait_until(lambda: unschedulable(bed, "over"), 120, "over: unschedulable, no chip left")


def test_the_node_whose_ring_fits_exactly_scores_higher(bed: DraTestbed) -> None:
    """Two nodes fit a ladder's 2 chips: the one with a ring of exactly 2 free gives the
    rung fit2 (score 8), the empty one fit4 (7); kube-scheduler's DynamicResources score
    (``computeScore``: 8 minus the rung's index, weight 2 in the default profile) takes the
    first. The other default scores are equal here but for the pods' default requests."""
    fitting, empty = SCORE_NODES
    run(bed, "half", "npu-2-ring", fitting)
    wait_until(lambda: attributes(bed, fitting, 2)["ringFree"] == 2, 60, "ringFree published")
    submit(bed, "chooser", "npu-2-fit", SCORE_NODES)
    pod = bed.bound(NS, "chooser")
    claim = claim_of(bed, pod)
    marks = {}
    for node in SCORE_NODES:
        choice = stand_in(bed, claim, node)
        assert choice is not None
        marks[node] = score([choice])
    assert marks == {fitting: 8, empty: 7}, "the stand-in's node score"
    assert pod["spec"]["nodeName"] == fitting, f"not {empty}: its best rung is fit4"
    bed.start(pod)
    assert allocated(bed, pod) == ([2, 3], {"npus/fit2"})
