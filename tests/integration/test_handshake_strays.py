"""Defence in depth in the Allocate handshake: a pod put on the node by someone else (created
with ``spec.nodeName``, or bound by another scheduler) never gets the chips the scheduler gave
another pod. The kubelet does not say which pod an Allocate is for, so while such a pod waits
no Allocate of its resource is decided; once the kubelet has failed it, the pod the scheduler
chose gets its chips. Real gRPC over unix sockets, as tests/integration/test_handshake.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.objects import Obj
from simulation.cluster import wait_for
from simulation.kubelet import KubeletError
from simulation.memory import MemoryCluster, pod_object
from tests.integration.conftest import RESOURCE
from tests.integration.test_handshake import NODE, Cluster, StalledWatch, running
from tests.integration.test_inference_agent import agent, pod, state

REFUSED = "without the NPU scheduler's choice"
REASON = "NPUPodNotScheduledByAscend"


@pytest.fixture(params=["memory", "http"])
def cluster(short_dir: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with running(short_dir, MemoryCluster(), request.param == "http") as built:
        yield built


def thief(cluster: Cluster, name: str = "thief", npu: int = 2, resource: str = RESOURCE) -> None:
    """A pod created with ``spec.nodeName``: no scheduler chose its chips."""
    cluster.api.put("Pod", pod_object("other", name, NODE, npu, resource=resource))


def kubelet_rejects(api: MemoryCluster, namespace: str, name: str) -> None:
    """What the kubelet does with a pod whose admission failed (``rejectPod``)."""
    failed: Obj = api.get_pod(namespace, name)
    failed["status"] = {"phase": "Failed", "reason": "UnexpectedAdmissionError"}
    api.put("Pod", failed)


def events_about(cluster: Cluster, name: str) -> list[Obj]:
    return [e for e in cluster.api.events if e["involvedObject"]["name"] == name]


def test_a_pod_created_with_node_name_does_not_get_the_chips_bound_to_another(
    cluster: Cluster,
) -> None:
    cluster.bind("victim", "Ascend910-4,Ascend910-5", "100")
    thief(cluster)
    with pytest.raises(KubeletError, match=REFUSED):
        cluster.kubelet.allocate("other/thief", "main", RESOURCE, 2)
    assert cluster.annotations("victim")["predicate-time"] == "100", "the victim's chips wait"
    assert wait_for(lambda: bool(events_about(cluster, "thief")))
    event = events_about(cluster, "thief")[0]
    assert (event["reason"], event["type"]) == (REASON, "Warning")
    assert "other/thief asks huawei.com/Ascend910" in event["message"]
    assert not events_about(cluster, "victim"), "the pod the scheduler chose is not blamed"
    kubelet_rejects(cluster.api, "other", "thief")
    cluster.kubelet.release("other/thief")
    victim = cluster.kubelet.allocate("ns/victim", "main", RESOURCE, 2)
    assert victim.response.envs["ASCEND_VISIBLE_DEVICES"] == "4,5"
    assert cluster.annotations("victim")["huawei.com/AscendReal"] == "Ascend910-4,Ascend910-5"


def test_the_victim_waits_for_the_kubelet_to_fail_the_pod_it_refused(cluster: Cluster) -> None:
    # The kubelet writes a refused pod's Failed status asynchronously and goes on admitting
    # the next pod at once: the next Allocate waits a bounded moment for that status.
    cluster.bind("victim", "Ascend910-4,Ascend910-5", "100")
    thief(cluster, npu=1)
    failing = threading.Timer(0.1, kubelet_rejects, args=(cluster.api, "other", "thief"))
    failing.start()
    victim = cluster.kubelet.allocate("ns/victim", "main", RESOURCE, 2)
    failing.join()
    assert victim.response.envs["ASCEND_VISIBLE_DEVICES"] == "4,5"


def test_a_pod_the_agents_watch_has_not_shown_yet_is_still_refused(short_dir: Path) -> None:
    # The kubelet asks only for a pod it read from the API server: a list at each Allocate
    # shows it even when the agent's watch lags behind.
    with running(short_dir, StalledWatch(), over_http=False) as stalled:
        stalled.bind("victim", "Ascend910-4,Ascend910-5", "100")
        assert stalled.kubelet.allocate("ns/victim", "main", RESOURCE, 2)  # listed, served
        stalled.bind("second", "Ascend910-0,Ascend910-1", "200")
        thief(stalled)
        with pytest.raises(KubeletError, match=REFUSED):
            stalled.kubelet.allocate("other/thief", "main", RESOURCE, 2)
        assert stalled.annotations("second")["predicate-time"] == "200"


def test_one_event_per_version_of_the_pod_lacking_the_choice(cluster: Cluster) -> None:
    cluster.bind("victim", "Ascend910-4", "100")
    thief(cluster, npu=1)
    for _ in range(3):
        with pytest.raises(KubeletError, match=REFUSED):
            cluster.kubelet.allocate("other/thief", "main", RESOURCE, 1)
        cluster.kubelet.release("other/thief")
    assert wait_for(lambda: len(events_about(cluster, "thief")) == 1)
    changed = cluster.api.get_pod("other", "thief")
    changed["metadata"]["labels"] = {"tried": "again"}
    cluster.api.put("Pod", changed)
    with pytest.raises(KubeletError, match=REFUSED):
        cluster.kubelet.allocate("other/thief", "main", RESOURCE, 1)
    assert wait_for(lambda: len(events_about(cluster, "thief")) == 2)
    assert len(events_about(cluster, "thief")) == 2


def test_pods_of_other_npu_resources_and_finished_strays_do_not_block(cluster: Cluster) -> None:
    thief(cluster, "inference", npu=1, resource="huawei.com/Ascend310P")
    thief(cluster, "static-vnpu", npu=1, resource="huawei.com/Ascend910-16c")
    thief(cluster, "done")
    kubelet_rejects(cluster.api, "other", "done")
    cluster.bind("train", "Ascend910-2", "100")
    allocation = cluster.kubelet.allocate("ns/train", "main", RESOURCE, 1)
    assert allocation.response.envs["ASCEND_VISIBLE_DEVICES"] == "2"


def test_an_npu_core_pod_without_the_choice_blocks_the_ai_core_handshake(short_dir: Path) -> None:
    with agent(short_dir, state("Ascend310P", 2), preset_virtual=False) as (_, kubelet, api, _):
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/npu-core") == 16)
        notes = {"huawei.com/npu-core": "1-vir02_1c", "predicate-time": "5"}
        api.put("Pod", pod("victim", "huawei.com/npu-core", 2, notes))
        api.put("Pod", pod("thief", "huawei.com/npu-core", 2, {}))
        with pytest.raises(KubeletError, match=REFUSED):
            kubelet.allocate("ns/thief", "main", "huawei.com/npu-core", 2)
        assert api.get_pod("ns", "victim")["metadata"]["annotations"] == notes
        kubelet_rejects(api, "ns", "thief")
        kubelet.release("ns/thief")
        allocation = kubelet.allocate("ns/victim", "main", "huawei.com/npu-core", 2)
        assert allocation.response.envs["ASCEND_RUNTIME_OPTIONS"] == "VIRTUAL"


def test_a_pod_asking_chips_only_in_an_init_container_is_refused_too(cluster: Cluster) -> None:
    # The kubelet allocates devices to init containers as well: one asking chips (requests
    # only is enough for the kubelet's count) takes whatever the Allocate gives it.
    cluster.bind("victim", "Ascend910-4,Ascend910-5", "100")
    sneaky = pod_object("other", "init-thief", NODE, 0)
    sneaky["spec"]["initContainers"] = [
        {"name": "grab", "resources": {"requests": {RESOURCE: "2"}, "limits": {RESOURCE: "2"}}}
    ]
    cluster.api.put("Pod", sneaky)
    with pytest.raises(KubeletError, match=REFUSED):
        cluster.kubelet.allocate("other/init-thief", "grab", RESOURCE, 2)
    assert cluster.annotations("victim")["predicate-time"] == "100"
