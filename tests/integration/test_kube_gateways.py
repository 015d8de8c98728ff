"""Both gateway adapters keep one contract: the in-memory store, and the official kubernetes
client over HTTP against the loopback API server (real serialization, watch streams, field
selectors, resourceVersion preconditions and 409s)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from infra.kube.client import KubernetesGateway
from infra.kube.port import (
    Conflict,
    Gone,
    KubeError,
    KubeGateway,
    NotFound,
    Selection,
    WatchEvent,
    list_all,
)
from simulation.loopback import LoopbackApiServer
from simulation.memory import MemoryCluster, pod_object

HISTORY = 50  # changes the store keeps


@dataclass
class Setup:
    store: MemoryCluster
    gateway: KubeGateway
    server: LoopbackApiServer | None


@pytest.fixture(params=["memory", "http"])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    store = MemoryCluster(history=HISTORY)
    store.put("Pod", pod_object("ns", "a", "node-1", 2, annotations={"predicate-time": "1"}))
    store.put("Pod", pod_object("ns", "b", "node-2", 1))
    store.put("Node", {"metadata": {"name": "node-1", "labels": {"x": "1"}}})
    if request.param == "memory":
        yield Setup(store, store, None)
        return
    server = LoopbackApiServer(store)
    gateway = KubernetesGateway.for_url(server.start())
    yield Setup(store, gateway, server)
    server.stop()


ON_NODE_1 = Selection("Pod", fields="spec.nodeName=node-1")


def test_pods_are_listed_by_node_through_the_field_selector(setup: Setup) -> None:
    pods, version = list_all(setup.gateway, ON_NODE_1)
    assert [p["metadata"]["name"] for p in pods] == ["a"]
    assert pods[0]["spec"]["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend910": "2"}
    assert version == "3"


def test_a_patch_lands_and_a_stale_precondition_is_a_conflict(setup: Setup) -> None:
    pod = setup.gateway.get_pod("ns", "a")
    version = pod["metadata"]["resourceVersion"]
    patched = setup.gateway.patch_pod_annotations("ns", "a", {"k": "v"}, version)
    assert patched["metadata"]["annotations"] == {"predicate-time": "1", "k": "v"}
    with pytest.raises(Conflict):
        setup.gateway.patch_pod_annotations("ns", "a", {"k": "w"}, version)
    with pytest.raises(NotFound):
        setup.gateway.get_pod("ns", "missing")


def test_a_watch_streams_changes_of_its_node_from_a_version(setup: Setup) -> None:
    _, version = list_all(setup.gateway, ON_NODE_1)
    seen: list[WatchEvent] = []

    def follow() -> None:
        for event in setup.gateway.watch(ON_NODE_1, version, timeout=5.0):
            if event.type != "BOOKMARK":
                seen.append(event)
            if len(seen) == 2:
                return

    watcher = threading.Thread(target=follow)
    watcher.start()  # the watch replays what changed after ``version``, whenever it starts
    setup.store.put("Pod", pod_object("ns", "c", "node-1", 1))
    setup.store.put("Pod", pod_object("ns", "d", "node-2", 1))
    setup.store.patch_pod_annotations("ns", "a", {"x": "1"}, "")
    watcher.join()
    assert [(e.type, e.object["metadata"]["name"]) for e in seen] == [
        ("ADDED", "c"),
        ("MODIFIED", "a"),
    ]
    assert seen[1].object["metadata"]["annotations"]["x"] == "1"


def test_configmaps_are_created_read_and_replaced_with_a_precondition(setup: Setup) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "namespace": "kube-system",
            "name": "cm",
            "labels": {"mx-consumer-cim": "true"},
        },
        "data": {"k": "v"},
    }
    with pytest.raises(NotFound):
        setup.gateway.get_configmap("kube-system", "cm")
    created = setup.gateway.create_configmap(body)
    with pytest.raises(Conflict):
        setup.gateway.create_configmap(body)
    replaced = setup.gateway.update_configmap({**created, "data": {"k": "w"}})
    assert setup.gateway.get_configmap("kube-system", "cm")["data"] == {"k": "w"}
    with pytest.raises(Conflict):
        setup.gateway.update_configmap({**created, "data": {"k": "stale"}})
    assert replaced["metadata"]["labels"] == {"mx-consumer-cim": "true"}


def test_node_labels_are_merged_and_events_created(setup: Setup) -> None:
    node = setup.gateway.patch_node_labels("node-1", {"servertype": "Ascend910-32"})
    assert node["metadata"]["labels"] == {"x": "1", "servertype": "Ascend910-32"}
    assert setup.gateway.get_node("node-1")["metadata"]["labels"]["servertype"] == "Ascend910-32"
    setup.gateway.create_event(
        "ns",
        {
            "metadata": {"generateName": "a.", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "a"},
            "reason": "NPUAllocationFailed",
            "message": "m",
            "type": "Warning",
        },
    )
    assert setup.store.events[-1]["reason"] == "NPUAllocationFailed"


def test_an_api_server_that_is_down_fails_calls_quickly_and_comes_back(setup: Setup) -> None:
    if setup.server is None:
        setup.store.reachable = False
    else:
        setup.server.stop()
    start = time.monotonic()
    with pytest.raises(KubeError):
        list_all(setup.gateway, ON_NODE_1)
    assert time.monotonic() - start < 5
    if setup.server is None:
        setup.store.reachable = True
    else:
        setup.server.start()
    assert len(list_all(setup.gateway, ON_NODE_1)[0]) == 1


def test_everything_the_scheduler_reads_is_listed(setup: Setup) -> None:
    setup.store.put(
        "ConfigMap", {"metadata": {"namespace": "kube-system", "name": "cm"}, "data": {}}
    )
    setup.store.put(
        "ConfigMap",
        {"metadata": {"namespace": "kube-system", "name": "labelled", "labels": {"l": "x"}}},
    )

    def names(what: Selection) -> list[str]:
        return [o["metadata"]["name"] for o in list_all(setup.gateway, what, page_size=1)[0]]

    assert names(Selection("Pod")) == ["a", "b"]
    assert names(Selection("ConfigMap", "kube-system")) == ["cm", "labelled"]
    assert names(Selection("ConfigMap", "kube-system", labels="l=x")) == ["labelled"]
    assert names(Selection("ConfigMap", fields="metadata.name=cm")) == ["cm"]
    assert names(Selection("Node")) == ["node-1"]


def test_a_continue_token_older_than_the_history_is_gone(setup: Setup) -> None:
    first = setup.gateway.list_page(Selection("Pod"), 1)
    for i in range(HISTORY + 1):
        setup.store.put("Node", {"metadata": {"name": "churn"}, "spec": {"n": i}})
    with pytest.raises(Gone):
        setup.gateway.list_page(Selection("Pod"), 1, first.next)


def test_a_watch_from_a_version_older_than_the_history_is_gone(setup: Setup) -> None:
    for i in range(HISTORY + 1):
        setup.store.put("Node", {"metadata": {"name": "churn"}, "spec": {"n": i}})
    with pytest.raises(Gone):
        next(iter(setup.gateway.watch(Selection("Node"), "1", timeout=2.0)))


def test_bookmarks_carry_the_version_to_resume_from(setup: Setup) -> None:
    setup.store.bookmark_seconds = 0.05
    _, version = list_all(setup.gateway, ON_NODE_1)
    setup.store.put("Pod", pod_object("ns", "elsewhere", "node-2", 1))
    for event in setup.gateway.watch(ON_NODE_1, version, timeout=5.0):
        assert event.type == "BOOKMARK"
        assert int(event.object["metadata"]["resourceVersion"]) == int(version) + 1
        break


def test_a_binding_sets_the_node_and_the_annotations_at_once_and_only_once(setup: Setup) -> None:
    setup.store.put("Pod", pod_object("ns", "new", None, 2))
    uid = setup.store.get_pod("ns", "new")["metadata"]["uid"]
    setup.gateway.bind_pod("ns", "new", uid, "node-1", {"huawei.com/Ascend910": "Ascend910-0"})
    bound = setup.gateway.get_pod("ns", "new")
    assert bound["spec"]["nodeName"] == "node-1"
    assert bound["metadata"]["annotations"]["huawei.com/Ascend910"] == "Ascend910-0"
    with pytest.raises(Conflict):
        setup.gateway.bind_pod("ns", "new", uid, "node-2", {})
    with pytest.raises(NotFound):
        setup.gateway.bind_pod("ns", "ghost", "", "node-1", {})


def test_a_pod_is_deleted_only_while_it_keeps_its_uid(setup: Setup) -> None:
    with pytest.raises(Conflict):
        setup.gateway.delete_pod("ns", "a", "uid-of-an-older-pod", 0)
    setup.gateway.delete_pod("ns", "a", "uid-ns-a", 0)
    with pytest.raises(NotFound):
        setup.gateway.get_pod("ns", "a")
    with pytest.raises(NotFound):
        setup.gateway.delete_pod("ns", "a", "", None)
