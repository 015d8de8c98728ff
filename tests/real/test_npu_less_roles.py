"""A job with a role that asks no NPU on the real control plane, under kube-scheduler as
shipped (``managedResources``: kube-scheduler never sends such a pod to the extender): a
MindSpore-shaped group of one Scheduler and two 8-chip Workers whose PodGroup counts all three
(``minMember: 3``). The pods come with their ranks as the Ascend Operator writes them
(``hccl/rankIndex``: Scheduler-0 and Worker-0 both 0, Worker-1 1), which the admission policy
admits at creation only. The Scheduler runs where kube-scheduler puts it; the Workers are the
gang, on two whole nodes, at their ranks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.groups import COSCHEDULING_GROUP_LABEL
from testbed.cluster import SCHEDULER_PROFILE, Deployed, deployed, npu_pod, wait_pods
from testbed.control_plane import ControlPlane
from testbed.rest import Obj, RestError
from tests.real.test_gang_forms import install_podgroup_crd
from tests.real.test_kube_scheduler import check_chips


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Deployed]:
    install_podgroup_crd(control_plane.rest())
    with deployed(control_plane, control_plane.workdir, nodes=3) as running:
        yield running


def member(name: str, chips: int) -> Obj:
    # ascend-operator annotation.go setHcclRankIndex: the index within each replica type
    # when only Workers ask NPUs.
    rank = {"hccl/rankIndex": name.rsplit("-", 1)[1]}
    pod = npu_pod(chips, {"job": "ms", COSCHEDULING_GROUP_LABEL: "ms"}, rank)
    pod["metadata"]["name"] = name
    if not chips:
        pod["spec"]["containers"][0]["resources"] = {}
    return pod


def test_a_scheduler_role_runs_beside_its_two_workers_placed_as_the_gang(
    cluster: Deployed,
) -> None:
    # Before: every pod of the group was refused ("… pod ms-scheduler-0 asks for no NPU, the
    # others do") and kube-scheduler placed the Scheduler alone.
    admin = cluster.plane.rest()
    ns = admin.ensure_namespace("roles")
    admin.create(
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "ms"},
            "spec": {"minMember": 3},
        },
    )
    pods = f"/api/v1/namespaces/{ns}/pods"
    for name, chips in (("ms-scheduler-0", 0), ("ms-worker-0", 8), ("ms-worker-1", 8)):
        admin.create(pods, member(name, chips))
    running = wait_pods(cluster.plane, ns, "job=ms", 3)
    by_name = {p["metadata"]["name"]: p for p in running}
    scheduler = by_name.pop("ms-scheduler-0")
    assert scheduler["spec"]["schedulerName"] == SCHEDULER_PROFILE
    assert "huawei.com/Ascend910" not in scheduler["metadata"].get("annotations", {})
    workers = list(by_name.values())
    check_chips(cluster, workers)
    assert len({p["spec"]["nodeName"] for p in workers}) == 2, "8 × 2 chips: two whole nodes"
    assert sorted(p["metadata"]["annotations"]["hccl/rankIndex"] for p in workers) == ["0", "1"]
    # Set at creation, a rank is nobody's to change afterwards but our components'.
    with pytest.raises(RestError) as refused:
        admin.patch(f"{pods}/ms-worker-1", {"metadata": {"annotations": {"hccl/rankIndex": "0"}}})
    assert refused.value.status == 403 and "hccl/rankIndex" in str(refused.value)
