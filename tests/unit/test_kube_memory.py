"""The in-memory store keeps the API server's rules the agent relies on."""

from __future__ import annotations

import threading

import pytest

from contract.objects import node_address
from contract.pods import pod_view
from infra.kube.port import Conflict, Gone, KubeError, NotFound, Selection
from simulation.memory import MemoryCluster, pod_object


def cluster_with_pods() -> MemoryCluster:
    cluster = MemoryCluster(bookmark_seconds=0.05)
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


ON_NODE_1 = Selection("Pod", fields="spec.nodeName=node-1")


def changes(cluster: MemoryCluster, what: Selection, version: str) -> list[tuple[str, str]]:
    """What a watch from ``version`` sends before its first bookmark (everything written
    so far: a bookmark comes only once the feed is empty)."""
    seen = []
    for change in cluster.watch(what, version, timeout=5.0):
        if change.type == "BOOKMARK":
            break
        seen.append((change.type, change.object["metadata"]["name"]))
    return seen


def test_a_watch_delivers_every_change_after_its_version_for_its_node() -> None:
    cluster = cluster_with_pods()
    _, version = cluster.list_pods("node-1")
    cluster.put("Pod", pod_object("ns", "c", "node-1", 1))
    cluster.put("Pod", pod_object("ns", "d", "node-2", 1))
    cluster.delete("Pod", "ns", "a")
    assert changes(cluster, ON_NODE_1, version) == [("ADDED", "c"), ("DELETED", "a")]


def test_a_live_watch_hears_writes_made_while_it_is_open() -> None:
    cluster = cluster_with_pods()
    _, version = cluster.list_pods("node-1")
    seen: list[str] = []

    def follow() -> None:
        for change in cluster.watch(ON_NODE_1, version, timeout=5.0):
            if change.type != "BOOKMARK":
                seen.append(change.object["metadata"]["name"])
                return

    watcher = threading.Thread(target=follow)
    watcher.start()
    cluster.put("Pod", pod_object("ns", "late", "node-1", 1))
    watcher.join()
    assert seen == ["late"]


def test_a_pod_leaving_the_field_selector_is_deleted_for_the_watch_and_entering_is_added() -> None:
    cluster = cluster_with_pods()
    running = Selection("Pod", fields="status.phase!=Succeeded,status.phase!=Failed")
    _, version = cluster.list_pods(None)
    done = cluster.get_pod("ns", "a")
    done["status"]["phase"] = "Succeeded"
    cluster.put("Pod", done)
    again = cluster.get_pod("ns", "a")
    again["status"]["phase"] = "Running"
    cluster.put("Pod", again)
    assert changes(cluster, running, version) == [("DELETED", "a"), ("ADDED", "a")]


def test_lists_are_paginated_and_every_page_is_read_at_the_first_ones_version() -> None:
    cluster = MemoryCluster()
    for i in range(5):
        cluster.put("Pod", pod_object("ns", f"p{i}", "n", 1))
    first = cluster.list_page(Selection("Pod"), 2)
    cluster.put("Pod", pod_object("ns", "p9", "n", 1))  # after the list's version
    second = cluster.list_page(Selection("Pod"), 2, first.next)
    third = cluster.list_page(Selection("Pod"), 2, second.next)
    names = [p["metadata"]["name"] for page in (first, second, third) for p in page.items]
    assert names == ["p0", "p1", "p2", "p3", "p4"]
    assert third.next == ""
    assert first.resource_version == third.resource_version == "5"


def test_labels_select_configmaps() -> None:
    cluster = MemoryCluster()
    labelled = {"metadata": {"namespace": "kube-system", "name": "a", "labels": {"x": "true"}}}
    cluster.put("ConfigMap", labelled)
    cluster.put("ConfigMap", {"metadata": {"namespace": "kube-system", "name": "b"}})
    page = cluster.list_page(Selection("ConfigMap", "kube-system", labels="x=true"), 0)
    assert [c["metadata"]["name"] for c in page.items] == ["a"]
    with pytest.raises(KubeError, match="not supported"):
        cluster.list_page(Selection("ConfigMap", fields="data.k=v"), 0)


def test_a_version_older_than_the_history_is_gone_for_watches_and_continue_tokens() -> None:
    cluster = MemoryCluster(history=3, bookmark_seconds=0.05)
    for i in range(3):
        cluster.put("Pod", pod_object("ns", f"p{i}", "n", 1))
    page = cluster.list_page(Selection("Pod"), 1)
    assert changes(cluster, Selection("Pod"), "0") == [
        ("ADDED", "p0"),
        ("ADDED", "p1"),
        ("ADDED", "p2"),
    ]
    for i in range(3, 6):
        cluster.put("Pod", pod_object("ns", f"p{i}", "n", 1))
    with pytest.raises(Gone):
        next(iter(cluster.watch(Selection("Pod"), "0", timeout=1.0)))
    with pytest.raises(Gone):
        cluster.list_page(Selection("Pod"), 1, page.next)


def test_a_quiet_watch_sends_bookmarks_at_the_current_version() -> None:
    cluster = MemoryCluster(bookmark_seconds=0.05)
    cluster.put("Pod", pod_object("ns", "p", "n", 1))
    cluster.put("Node", {"metadata": {"name": "n"}})
    first = next(iter(cluster.watch(ON_NODE_1, "2", timeout=5.0)))
    assert (first.type, first.object["metadata"]["resourceVersion"]) == ("BOOKMARK", "2")


def test_an_unreachable_api_server_fails_every_call() -> None:
    cluster = cluster_with_pods()
    cluster.reachable = False
    with pytest.raises(KubeError, match="unreachable"):
        cluster.list_page(ON_NODE_1, 0)
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
