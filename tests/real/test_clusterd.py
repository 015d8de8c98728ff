"""ClusterD's ``cluster-info-*`` ConfigMaps and Volcano's init-params on the real control plane,
read under the chart's own RBAC by the service's own token: without the Role that
``scheduler.clusterInfoManager`` adds the service refuses to start (exit 2, one line naming
it); with it, a public fault in ``cluster-info-device-<m>`` (as ClusterD writes it:
Ascend/mind-cluster component/ascend-for-volcano/common/k8s/cmmgr.go) keeps an 8-chip pod off
the node through the real kube-scheduler until it is gone; with the value off the agents'
DeviceInfo is read, and the fault is not seen. The chart's Volcano path's
``--volcano-config`` is read with the Role it grants, and its init-params taken."""

from __future__ import annotations

import re
import subprocess
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from contract import clusterd
from simulation.processes import free_port, service_command_with
from testbed.cluster import (
    NAMESPACE,
    SCHEDULER_ACCOUNT,
    Deployed,
    deployed,
    npu_pod,
    wait_pods,
)
from testbed.control_plane import running, wait_until
from testbed.manifests import helm_template
from tests.clusterd_maps import device_entry, devices, public_fault

NODE = "node-00"
DEADLINE = 120.0  # seconds: a shared 2-core machine
VOLCANO = "volcano-system"
CONFIGURATION = (
    "actions: enqueue, allocate, backfill\n"
    "tiers:\n- plugins:\n  - name: gang\n"
    "configurations:\n"
    "  - name: init-params\n"
    '    arguments: {"grace-over-time": "60", "useClusterInfoManager": "true"}\n'
)
DEVICES = f"/api/v1/namespaces/{clusterd.NAMESPACE}/configmaps"


def chart(*values: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(helm_template(*values)) if d]


def volcano_args(*values: str) -> tuple[str, ...]:
    """The flags the chart's Volcano path gives the service beyond its --config file."""
    (deployment,) = [
        d
        for d in chart("schedulerPath=volcano", *values)
        if d["kind"] == "Deployment" and d["metadata"]["name"] == SCHEDULER_ACCOUNT
    ]
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return tuple(a for a in args if a.startswith(("--use-cluster-info", "--volcano-config")))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Deployed]:
    """The chart's Volcano path with the value off (its flags), Volcano's ConfigMap readable by
    the Role that path grants, a ClusterD fault on the node; kube-scheduler places the pods."""
    with running("clusterd") as plane:
        admin = plane.rest()
        admin.ensure_namespace(clusterd.NAMESPACE)
        admin.ensure_namespace(VOLCANO)
        admin.create(
            f"/api/v1/namespaces/{VOLCANO}/configmaps",
            {
                "metadata": {"name": "volcano-scheduler-configmap"},
                "data": {"volcano-scheduler.conf": CONFIGURATION},
            },
        )
        # The chart's Volcano path's grant: Volcano's ConfigMap, by name, in its namespace.
        for document in chart("schedulerPath=volcano"):
            if document["metadata"]["name"] == f"{SCHEDULER_ACCOUNT}-volcano":
                admin.apply(document)
        # A public fault on chip 0 of the node, as ClusterD sums it.
        faulty = devices(0, device_entry(NODE, unhealthy={0}, faults=[public_fault(0)]))
        admin.create(DEVICES, faulty)
        flags = volcano_args()
        assert "--use-cluster-info-manager=false" in flags
        with deployed(plane, plane.workdir, nodes=1, service_flags=flags) as running_:
            yield running_


def metric(url: str, pattern: str) -> float | None:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found = re.search(rf"^{pattern} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def chips(cluster: Deployed, state: str) -> float | None:
    return metric(
        cluster.metrics_url,
        rf'ascend_scheduler_node_chips\{{node="{NODE}",product="[^"]+",state="{state}"\}}',
    )


def source(cluster: Deployed, name: str) -> float | None:
    return metric(cluster.metrics_url, rf'ascend_scheduler_fault_source\{{source="{name}"\}}')


def test_without_the_role_the_clusterd_source_refuses_to_start(cluster: Deployed) -> None:
    plane = cluster.plane
    command = service_command_with(
        plane.service_account(NAMESPACE, SCHEDULER_ACCOUNT),
        free_port(),
        f"--metrics-listen=127.0.0.1:{free_port()}",
        "--use-cluster-info-manager=true",
        policies_installed=True,
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE, check=False)
    assert done.returncode == 2, done.stderr
    (line,) = [e for e in done.stderr.splitlines() if e.startswith("error:")]
    assert "may not list ConfigMaps in mindx-dl" in line and "403" in line
    assert "scheduler.clusterInfoManager=true" in line


def test_with_the_value_off_the_agents_deviceinfo_is_read(cluster: Deployed) -> None:
    assert source(cluster, "deviceinfo") == 1 and source(cluster, "clusterd") is None
    # ClusterD's fault on chip 0 is not read: the agent's DeviceInfo has all 8 healthy.
    wait_until(lambda: chips(cluster, "free") == 8, DEADLINE, "node-00's 8 chips free")
    assert chips(cluster, "unhealthy") == 0
    log = cluster.service.log.read_text()
    assert "grace-over-time 60 (init-params)" in log, "init-params read by its own token"
    assert "use-cluster-info-manager false (flag)" in log
    assert "ClusterD's public faults are not seen" in log


def test_a_public_fault_clusterd_reports_keeps_a_whole_node_pod_off_until_gone(
    cluster: Deployed,
) -> None:
    plane = cluster.plane
    admin = plane.rest()
    # The chart's objects in ClusterD's namespace when the value is on: its Role and binding.
    for document in chart("scheduler.clusterInfoManager=true"):
        if document["metadata"].get("namespace") == clusterd.NAMESPACE:
            admin.apply(document)
    flags = volcano_args("scheduler.clusterInfoManager=true")
    assert "--use-cluster-info-manager=true" in flags
    # The service again with the value on (the chart's rollout of the changed args).
    cluster.service.stop()
    off = volcano_args()
    cluster.service.command = [a for a in cluster.service.command if a not in off] + list(flags)
    started = cluster.service.log.stat().st_size
    cluster.start_service()
    assert source(cluster, "clusterd") == 1 and source(cluster, "deviceinfo") is None
    wait_until(lambda: chips(cluster, "unhealthy") == 1, DEADLINE, "chip 0 unhealthy")
    log = cluster.service.log.read_bytes()[started:].decode()
    assert "grace-over-time 60 (init-params)" in log
    assert "use-cluster-info-manager true (flag)" in log

    ns = admin.ensure_namespace("clusterd")
    pods = f"/api/v1/namespaces/{ns}/pods"
    pod = npu_pod(8, {"job": "clusterd"})
    pod["metadata"]["name"] = "whole"
    admin.create(pods, pod)

    def refused() -> bool:
        events = admin.get(
            f"/api/v1/namespaces/{ns}/events",
            fieldSelector="involvedObject.name=whole,reason=FailedScheduling",
        )
        return bool(events["items"])

    wait_until(refused, DEADLINE, "whole: FailedScheduling")
    assert admin.get(f"{pods}/whole")["spec"].get("nodeName") is None

    healthy = devices(0, device_entry(NODE))  # ClusterD's next version: the fault gone
    admin.patch(f"{DEVICES}/{healthy['metadata']['name']}", {"data": healthy["data"]})
    wait_until(lambda: chips(cluster, "unhealthy") == 0, DEADLINE, "chip 0 healthy again")
    # A ConfigMap is no event kube-scheduler requeues an unschedulable pod on (it would try
    # again within its 5 minutes' podMaxInUnschedulablePodsDuration): the job's controller
    # makes the pod again, as a restarted job would.
    admin.request("DELETE", f"{pods}/whole", {"gracePeriodSeconds": 0})
    wait_until(lambda: not admin.get(pods)["items"], DEADLINE, "the refused pod gone")
    admin.create(pods, pod)
    (placed,) = wait_pods(plane, ns, "job=clusterd", 1, timeout=DEADLINE)
    assert placed["spec"]["nodeName"] == NODE
