"""NodeD's report on the real control plane, read under the chart's own RBAC: with
``scheduler.noded`` the chart grants the scheduler list and watch of ConfigMaps in ``mindx-dl``,
the service started with ``--noded`` reads ``mindx-dl-nodeinfo-<node>`` as NodeD writes it
(Ascend/mind-cluster component/noded/pkg/reporter/cmreporter/configmap_reporter.go), a node
NodeD reports UnHealthy takes no pod (kube-scheduler's event names why), and once the report
is gone the node serves again: behind the extender at kube-scheduler's next Node event, with
the plugin at once (it activates the pods it refused when the service frees a place)."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import pytest
import yaml

from contract import nodeinfo
from testbed.cluster import PLUGIN_OVERLAY, Deployed, deployed, npu_pod, wait_pods
from testbed.control_plane import running, wait_until
from testbed.manifests import helm_template

NODE = "node-00"
DEADLINE = 120.0  # seconds: a shared 2-core machine
DOWN = nodeinfo.NodeInfo(
    nodeinfo.UNHEALTHY, (nodeinfo.DeviceFault("CPU", 0, ("00000011",), "SeparateFault"),)
)


@pytest.fixture(
    scope="module", params=["kube-scheduler", PLUGIN_OVERLAY], ids=["extender", "plugin"]
)
def overlay(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def cluster(overlay: str) -> Iterator[Deployed]:
    with running(f"noded-{overlay}") as plane:
        admin = plane.rest()
        admin.ensure_namespace(nodeinfo.NAMESPACE)
        # The chart's objects in NodeD's namespace when the switch is on: its Role and binding.
        for document in yaml.safe_load_all(helm_template("scheduler.noded=true")):
            if document and document["metadata"].get("namespace") == nodeinfo.NAMESPACE:
                admin.apply(document)
        with deployed(
            plane, plane.workdir, nodes=1, overlay=overlay, service_flags=("--noded",)
        ) as running_:
            yield running_


def excluded_by_noded(cluster: Deployed) -> float:
    with urllib.request.urlopen(f"{cluster.metrics_url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(r'^ascend_scheduler_nodes_excluded\{reason="noded"\} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def failed_scheduling(cluster: Deployed, namespace: str, pod: str) -> str:
    events = cluster.plane.rest().get(
        f"/api/v1/namespaces/{namespace}/events",
        fieldSelector=f"involvedObject.name={pod},reason=FailedScheduling",
    )
    return " ".join(str(e.get("message", "")) for e in events["items"])


def test_a_node_noded_reports_unhealthy_takes_no_pod_until_the_report_is_gone(
    cluster: Deployed, overlay: str
) -> None:
    admin = cluster.plane.rest()
    configmaps = f"/api/v1/namespaces/{nodeinfo.NAMESPACE}/configmaps"
    report = {
        "metadata": {
            "name": nodeinfo.configmap_name(NODE),
            "labels": dict([nodeinfo.CONSUMER_LABEL]),
        },
        "data": nodeinfo.encode(DOWN),
    }
    admin.create(configmaps, report)
    # Read by the service as its own identity: a 403 would leave the node in.
    wait_until(lambda: excluded_by_noded(cluster) == 1, DEADLINE, "node-00 left out for NodeD")

    ns = admin.ensure_namespace("noded")
    pods = f"/api/v1/namespaces/{ns}/pods"
    pod = npu_pod(8, {"job": "noded"})
    pod["metadata"]["name"] = "whole"
    admin.create(pods, pod)
    wait_until(
        lambda: (
            "NodeD reports UnHealthy (CPU 0 00000011 SeparateFault)"
            in failed_scheduling(cluster, ns, "whole")
        ),
        DEADLINE,
        "whole: FailedScheduling naming NodeD's report",
    )
    assert admin.get(f"{pods}/whole")["spec"].get("nodeName") is None

    admin.delete(f"{configmaps}/{nodeinfo.configmap_name(NODE)}")
    wait_until(lambda: excluded_by_noded(cluster) == 0, DEADLINE, "node-00 back for NodeD")
    # A ConfigMap is no event kube-scheduler retries a pod on: behind the extender the pod
    # comes back from its unschedulable pods at the next Pod or Node event, or at their flush
    # 5 minutes on (podMaxInUnschedulablePodsDuration; pkg/scheduler/backend/queue/
    # scheduling_queue.go; docs/scheduler.md "When a refused pod is tried again"). A busy
    # cluster has such events every few seconds; this quiet one is given one. The plugin needs
    # none: it polls the service's count of places freed and activates the pods it refused.
    if overlay != PLUGIN_OVERLAY:
        admin.patch(f"/api/v1/nodes/{NODE}", {"metadata": {"labels": {"noded-test/event": "1"}}})
    (placed,) = wait_pods(cluster.plane, ns, "job=noded", 1, timeout=DEADLINE)
    assert placed["spec"]["nodeName"] == NODE


def test_the_simulated_kubelet_renews_its_nodes_lease(cluster: Deployed) -> None:
    # Every renewal was refused (a Lease's update must name its resourceVersion: 422) and the
    # node, its heartbeat stopped, was tainted unreachable once the grace ran out: a pod the
    # NodeD report had kept off it could then never be placed.
    admin = cluster.plane.rest()
    lease = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NODE}"
    first = admin.get(lease)["spec"]["renewTime"]
    wait_until(
        lambda: admin.get(lease)["spec"]["renewTime"] != first, DEADLINE, "the Lease renewed"
    )
    taints = admin.get(f"/api/v1/nodes/{NODE}")["spec"].get("taints") or []
    assert not [t for t in taints if t["key"] == "node.kubernetes.io/unreachable"]
