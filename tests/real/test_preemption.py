"""kube-scheduler's preemption with the extender, on the real control plane: a node the
extender marks unresolvable (``FailedAndUnresolvableNodes``) is never a candidate, so no pod is
evicted for a request no node can serve; a node that fails only for want of free chips
(``FailedNodes``) is, and the higher-priority pod takes the chips its victim frees
(kube-scheduler ``pkg/scheduler/framework/plugins/defaultpreemption``, ``extender.go``
``ProcessPreemption`` is not configured: the candidates are the nodes the filters left
resolvable).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.cluster import PLUGIN_OVERLAY, Deployed, deployed, npu_pod, wait_pods
from testbed.control_plane import running, wait_until
from tests.real.test_kube_scheduler import check_chips

NODES = 2


@pytest.fixture(
    params=[("kube-scheduler", True), ("kube-scheduler", False), (PLUGIN_OVERLAY, None)],
    ids=["node-cache", "node-list", "plugin"],
)
def cluster(request: pytest.FixtureRequest) -> Iterator[Deployed]:
    """With the node cache the victims go to the extender by UID, without it as pods. With
    the plugin (kube-scheduler-ascend) there is no preempt verb: its PreFilter answers
    UnschedulableAndUnresolvable where no node could ever serve the pod, which keeps every
    node out of preemption's candidates, and Unschedulable where chips are only taken; its
    PostFilter keeps the nominated pod from taking a second victim while the first's chips
    free (without it, one run in three evicted both low pods)."""
    overlay, node_cache = request.param
    with (
        running("pre") as plane,
        deployed(plane, plane.workdir, NODES, overlay=overlay, node_cache=node_cache) as cluster,
    ):
        yield cluster


def failed_scheduling(cluster: Deployed, namespace: str, pod: str) -> bool:
    events = cluster.plane.rest().get(
        f"/api/v1/namespaces/{namespace}/events",
        fieldSelector=f"involvedObject.name={pod},reason=FailedScheduling",
    )
    return bool(events["items"])


def test_preemption_evicts_only_where_the_extender_left_the_node_resolvable(
    cluster: Deployed,
) -> None:
    admin = cluster.plane.rest()
    for name, value in (("low", 10), ("high", 1000)):
        admin.apply(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    ns = admin.ensure_namespace("preemption")
    pods = f"/api/v1/namespaces/{ns}/pods"
    for i in range(NODES):
        pod = npu_pod(8, {"tier": "low"})
        pod["metadata"]["name"] = f"low-{i}"
        pod["spec"]["priorityClassName"] = "low"
        admin.create(pods, pod)
    low = wait_pods(cluster.plane, ns, "tier=low", NODES)
    check_chips(cluster, low)

    # 3 chips: no 8-chip 910 server serves it, full or empty: unresolvable everywhere.
    never = npu_pod(3, {"tier": "high"})
    never["metadata"]["name"] = "never"
    never["spec"]["priorityClassName"] = "high"
    admin.create(pods, never)
    wait_until(lambda: failed_scheduling(cluster, ns, "never"), 60, "never: FailedScheduling")

    # 8 chips: every node fails only for want of free chips: preemption frees one.
    whole = npu_pod(8, {"tier": "high"})
    whole["metadata"]["name"] = "whole"
    whole["spec"]["priorityClassName"] = "high"
    admin.create(pods, whole)
    wait_until(
        lambda: admin.get(f"{pods}/whole")["status"].get("phase") == "Running",
        120,
        "the 8-chip pod runs on its victim's chips",
    )
    remaining = admin.get(pods, labelSelector="tier=low")["items"]
    assert len(remaining) == NODES - 1, "one victim, for the 8-chip pod; none for 'never'"
    assert admin.get(f"{pods}/never")["spec"].get("nodeName") is None
    assert not admin.get(f"{pods}/never")["status"].get("nominatedNodeName")
    check_chips(cluster, [*remaining, admin.get(f"{pods}/whole")])
