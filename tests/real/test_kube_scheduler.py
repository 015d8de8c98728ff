"""kube-scheduler as shipped, on the real control plane: the kube-scheduler overlay rendered by
real kustomize and applied, kube-scheduler (the pinned upstream binary) with the overlay's own
KubeSchedulerConfiguration under the overlay's ServiceAccount, the scheduler service beside it,
and pods made by the real Job, StatefulSet and Deployment controllers of kube-controller-manager.
The same with the kube-scheduler-plugin overlay: kube-scheduler-ascend (built from the pinned
Kubernetes module with ``kube_scheduler_plugin/``) with the AscendNPU plugin.

Each container must see exactly the chips the extender chose (the agent's handshake behind the
kubelet's random device IDs), and no chip may be given twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from contract.annotations import CHIPS_ANNOTATION, GANG_LABEL, GANG_SIZE_ANNOTATION
from testbed.cluster import PLUGIN_OVERLAY, Deployed, deployed, npu_pod, wait_pods
from testbed.control_plane import running
from testbed.rest import Obj


def chips_of(pod: Obj) -> set[int]:
    annotated = pod["metadata"]["annotations"][CHIPS_ANNOTATION]
    return {int(chip.rsplit("-", 1)[1]) for chip in annotated.split(",")}


def visible(cluster: Deployed) -> dict[str, set[int]]:
    seen: dict[str, str] = json.loads(cluster.nodes.ask("visible"))
    return {pod: {int(c) for c in devices.split(",") if c} for pod, devices in seen.items()}


def check_chips(cluster: Deployed, pods: list[Obj]) -> None:
    """Each container sees the extender's chips; no chip of a node is held twice."""
    containers = visible(cluster)
    held: dict[tuple[str, int], str] = {}
    for pod in pods:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        node = pod["spec"]["nodeName"]
        chips = chips_of(pod)
        assert containers[key] == chips, f"{key}: the container sees the extender's chips"
        for chip in chips:
            owner = held.setdefault((node, chip), key)
            assert owner == key, f"chip {chip} of {node} given twice"


@pytest.fixture(
    scope="module",
    params=[("kube-scheduler", True), ("kube-scheduler", False), (PLUGIN_OVERLAY, None)],
    ids=["node-cache", "node-list", "plugin"],
)
def cluster(request: pytest.FixtureRequest) -> Iterator[Deployed]:
    """As shipped (``nodeCacheCapable: true``: node names go to the extender), without the
    node cache (kube-scheduler's default: whole Node objects, read back as a NodeList), and
    the kube-scheduler-plugin overlay (kube-scheduler-ascend: the AscendNPU plugin asks the
    service and binds with the chips itself, its Bindings let through by the overlay's
    annotation policy), each on a control plane of its own."""
    overlay, node_cache = request.param
    with (
        running("ks") as plane,
        deployed(plane, plane.workdir, 6, overlay=overlay, node_cache=node_cache) as cluster,
    ):
        yield cluster


def test_an_indexed_job_runs_on_the_extenders_chips(cluster: Deployed) -> None:
    plane = cluster.plane
    ns = plane.rest().ensure_namespace("indexed-job")
    job = {
        "metadata": {"name": "train"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 3,
            "parallelism": 3,
            "template": npu_pod(2, {"job": "train"}),
        },
    }
    plane.rest().create(f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    pods = wait_pods(plane, ns, "job=train", 3)
    check_chips(cluster, pods)
    for pod in pods:
        chips = chips_of(pod)
        assert len(chips) == 2
        assert len({chip // 4 for chip in chips}) == 1, "2 chips stay in one HCCS ring"


def test_a_statefulset_and_a_deployment_run_on_the_extenders_chips(cluster: Deployed) -> None:
    plane = cluster.plane
    admin = plane.rest()
    ns = admin.ensure_namespace("controllers")
    admin.create(
        f"/apis/apps/v1/namespaces/{ns}/statefulsets",
        {
            "metadata": {"name": "infer"},
            "spec": {
                "replicas": 2,
                "serviceName": "infer",
                "selector": {"matchLabels": {"app": "infer"}},
                "template": _restartable(npu_pod(4, {"app": "infer"})),
            },
        },
    )
    admin.create(
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        {
            "metadata": {"name": "serve"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "serve"}},
                "template": _restartable(npu_pod(1, {"app": "serve"})),
            },
        },
    )
    infer = wait_pods(plane, ns, "app=infer", 2)
    serve = wait_pods(plane, ns, "app=serve", 3)
    check_chips(cluster, infer + serve)
    assert [len(chips_of(p)) for p in infer] == [4, 4]
    for pod in infer:
        assert chips_of(pod) in ({0, 1, 2, 3}, {4, 5, 6, 7}), "4 chips are one whole ring"


def test_a_gang_of_whole_nodes_starts_together(cluster: Deployed) -> None:
    plane = cluster.plane
    ns = plane.rest().ensure_namespace("gang")
    job = {
        "metadata": {"name": "big"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "template": npu_pod(8, {"job": "big", GANG_LABEL: "big"}, {GANG_SIZE_ANNOTATION: "2"}),
        },
    }
    plane.rest().create(f"/apis/batch/v1/namespaces/{ns}/jobs", job)
    pods = wait_pods(plane, ns, "job=big", 2)
    check_chips(cluster, pods)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2, "8 × 2 chips: two whole nodes"


def test_a_pod_asking_no_npu_is_bound_by_kube_scheduler_without_chips(cluster: Deployed) -> None:
    """Not the extender's (managedResources) nor the plugin's (its PreFilter skips it, the
    DefaultBinder after it binds)."""
    plane = cluster.plane
    ns = plane.rest().ensure_namespace("no-npu")
    template = npu_pod(1, {"app": "web"})
    (container,) = template["spec"]["containers"]
    container["resources"] = {"limits": {"cpu": "100m"}}
    template["metadata"]["name"] = "web"
    plane.rest().create(f"/api/v1/namespaces/{ns}/pods", template)
    (pod,) = wait_pods(plane, ns, "app=web", 1)
    assert pod["spec"]["nodeName"]
    assert CHIPS_ANNOTATION not in (pod["metadata"].get("annotations") or {})


def _restartable(pod_template: Obj) -> Obj:
    pod_template["spec"]["restartPolicy"] = "Always"
    return pod_template
