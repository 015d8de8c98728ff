"""The in-memory store keeps the API server's rules the agent relies on."""

from __future__ import annotations

import threading

import pytest

from contract.objects import node_address
from contract.pods import pod_view
from infra.kube.port import Conflict, KubeError, NotFound
from simulation.memory import MemoryCluster, pod_object


def cluster_with_pods() -> MemoryCluster:
    cluster = MemoryCluster()
    cluster.put("Pod", pod_object("ns", "a", "node-1", 2, annotations={"predicate-time": "1"}))
    cluster.put("Pod", pod_object("ns", "b", "node-2", 1))
    return cluster


def test_pods_are_listed_per_node_with_the_lists_resource_version() -> None:
    pods, version = cluster_with_pods().list_pods("node-1")
    assert [p["metadata"]["name"] for p in pods] == ["a"]
    assert version == "2"


def test_a_patch_with_a_stale_resource_version_is_a_conflict() -> None:
    cluster = cluster_with_pods()
    pod = cluster.get_pod("ns", "a")
    cluster.patch_pod_annotations("ns", "a", {"x": "1"}, pod["metadata"]["resourceVersion"])
    with pytest.raises(Conflict, match="is stale"):
        cluster.patch_pod_annotations("ns", "a", {"x": "2"}, pod["metadata"]["resourceVersion"])
    assert cluster.get_pod("ns", "a")["metadata"]["annotations"] == {
        "predicate-time": "1",
        "x": "1",
    }


def test_a_watch_delivers_every_change_after_its_version_for_its_node() -> None:
    cluster = cluster_with_pods()
    _, version = cluster.list_pods("node-1")
    seen = []

    def follow() -> None:
        for change in cluster.watch_pods("node-1", version, timeout=1.0):
            seen.append((change.type, change.object["metadata"]["name"]))

    watcher = threading.Thread(target=follow)
    watcher.start()
    cluster.put("Pod", pod_object("ns", "c", "node-1", 1))
    cluster.put("Pod", pod_object("ns", "d", "node-2", 1))
    cluster.delete("Pod", "ns", "a")
    watcher.join()
    assert seen == [("ADDED", "c"), ("DELETED", "a")]


def test_an_unreachable_api_server_fails_every_call() -> None:
    cluster = cluster_with_pods()
    cluster.reachable = False
    with pytest.raises(KubeError, match="unreachable"):
        cluster.list_pods("node-1")
    with pytest.raises(KubeError, match="unreachable"):
        cluster.patch_pod_annotations("ns", "a", {}, "")


def test_configmaps_are_created_once_and_updated_after() -> None:
    cluster = MemoryCluster()
    body = {"metadata": {"namespace": "kube-system", "name": "cm"}, "data": {"k": "v"}}
    with pytest.raises(NotFound):
        cluster.update_configmap(body)
    cluster.create_configmap(body)
    with pytest.raises(Conflict):
        cluster.create_configmap(body)
    cluster.update_configmap({**body, "data": {"k": "w"}})
    assert cluster.get_configmap("kube-system", "cm")["data"] == {"k": "w"}


def test_a_pod_object_becomes_the_pod_view() -> None:
    raw = pod_object("ns", "p", "n", 4, annotations={"huawei.com/Ascend910": "Ascend910-0"})
    raw["spec"]["containers"].append({"name": "side", "resources": {"limits": {"cpu": "1"}}})
    raw["metadata"]["deletionTimestamp"] = "2026-11-21T00:00:00Z"
    raw["status"]["reason"] = "UnexpectedAdmissionError"
    info = pod_view(raw)
    assert (info.key, info.npu_limit, info.deleting, info.reason) == (
        "ns/p",
        4,
        True,
        "UnexpectedAdmissionError",
    )
    assert info.node == "n"
    assert info.live, "a terminating pod's containers still run: its chips are not free yet"


def test_the_node_address_is_its_internal_ip() -> None:
    node = {
        "status": {
            "addresses": [
                {"type": "Hostname", "address": "n1"},
                {"type": "InternalIP", "address": "192.168.10.11"},
            ]
        }
    }
    assert node_address(node) == "192.168.10.11"
    assert node_address({}) == ""
