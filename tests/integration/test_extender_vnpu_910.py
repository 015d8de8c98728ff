"""910B and A3 dynamic vNPU through the scheduler service over real HTTP: kube-scheduler's
filter, prioritize and bind, and Volcano's predicate and allocate (``/volcano/<verb>``), on a
cluster of a 910B3 node, an A3-24 node and a 310P vNPU node."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from agent.deviceinfo_publisher import configmap
from contract.chip_names import ASCEND310P, ASCEND910, ChipKind
from contract.deviceinfo import DeviceInfo
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.memory import MemoryCluster, pod_object

NPU_CORE = "huawei.com/npu-core"
RING_910B = {"ring-controller.atlas": "ascend-910b"}
NODES = ["b3", "a3", "p310"]


def put_node(
    store: MemoryCluster,
    name: str,
    kind: ChipKind,
    chips: int,
    *,
    cores: int,
    labels: dict[str, str],
) -> None:
    """A dynamic-vNPU node as the device plugin registers it: npu-core capacity, servertype
    and (910B) the chip name label, its DeviceInfo of ``kind`` chips."""
    offered = {NPU_CORE: str(chips * cores)}
    store.put(
        "Node",
        {
            "metadata": {"name": name, "labels": labels},
            "status": {"capacity": offered, "allocatable": dict(offered)},
        },
    )
    info = DeviceInfo(
        frozenset(range(chips)), frozenset(), frozenset(), update_time=int(time.time()), kind=kind
    )
    store.put("ConfigMap", configmap(name, info))


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def served() -> Iterator[tuple[MemoryCluster, str]]:
    store = MemoryCluster()
    b3 = {"servertype": "Ascend910B-20", "node.kubernetes.io/npu.chip.name": "910B3"}
    put_node(store, "b3", ASCEND910, 2, cores=20, labels=b3)
    put_node(store, "a3", ASCEND910, 2, cores=24, labels={"servertype": "Ascend910A3-24"})
    put_node(store, "p310", ASCEND310P, 2, cores=8, labels={"servertype": "Ascend310P-8"})
    service = SchedulerService(store, Extender(store), refresh_period=60)
    url = service.start()
    try:
        yield store, url
    finally:
        service.stop()


def submit(store: MemoryCluster, name: str, cores: int, labels: dict[str, str]) -> Any:
    store.put("Pod", pod_object("ns", name, None, cores, resource=NPU_CORE, labels=labels))
    return store.get_pod("ns", name)


def test_a_910b_vnpu_pod_is_filtered_scored_and_bound_over_http(
    served: tuple[MemoryCluster, str],
) -> None:
    store, url = served
    pod = submit(store, "p", 10, RING_910B)
    answer = post(f"{url}/filter", {"Pod": pod, "NodeNames": NODES})
    assert answer["NodeNames"] == ["b3"]  # A3-24 takes 6, 12 or ×24 AI cores
    assert answer["FailedAndUnresolvableNodes"] == {
        "a3": "p req err 10",
        "p310": "p310 cuts Ascend310P chips; p's ring-controller.atlas asks for Ascend910 vNPUs",
    }
    assert post(f"{url}/prioritize", {"Pod": pod, "NodeNames": ["b3"]}) == [
        {"Host": "b3", "Score": 10}
    ]
    bind = {"PodName": "p", "PodNamespace": "ns", "PodUID": pod["metadata"]["uid"], "Node": "b3"}
    assert post(f"{url}/bind", bind) == {"Error": ""}
    notes = store.get_pod("ns", "p")["metadata"]["annotations"]
    assert notes[NPU_CORE] == "0-vir10_3c_32g"
    # A 24-core A3 task takes a whole chip; a 12-core one a vNPU, both on the A3 node.
    whole = submit(store, "w", 24, {"ring-controller.atlas": "huawei.com.npu"})
    assert post(f"{url}/filter", {"Pod": whole, "NodeNames": NODES})["NodeNames"] == ["a3"]


def test_a_310p_vnpu_pod_never_lands_on_a_910b_node_and_labels_are_checked(
    served: tuple[MemoryCluster, str],
) -> None:
    store, url = served
    pod = submit(store, "q", 2, {"ring-controller.atlas": "ascend-310P"})
    answer = post(f"{url}/filter", {"Pod": pod, "NodeNames": NODES})
    assert answer["NodeNames"] == ["p310"]
    assert set(answer["FailedAndUnresolvableNodes"]) == {"b3", "a3"}
    high = submit(store, "h", 5, {**RING_910B, "vnpu-level": "high"})
    refused = post(f"{url}/filter", {"Pod": high, "NodeNames": ["b3"]})
    assert refused["FailedAndUnresolvableNodes"] == {
        "b3": "h req 5 ai-core and npu is 910B3, but cpu level is:high"
    }


def test_volcano_predicates_and_allocates_a_910b_vnpu_over_http(
    served: tuple[MemoryCluster, str],
) -> None:
    store, url = served
    pod = submit(store, "v", 5, RING_910B)
    task = {"task": {"Pod": pod, "NodeName": "b3"}}
    ok = post(f"{url}/volcano/predicate", {**task, "node": {"Name": "b3"}})
    assert ok["code"] == 0
    assert post(f"{url}/volcano/allocateFunc", task)["errorMessage"] == ""
    assert store.get_pod("ns", "v")["metadata"]["annotations"][NPU_CORE] == "0-vir05_1c_16g"
    ten = submit(store, "t", 10, RING_910B)
    busy = post(f"{url}/volcano/predicate", {"task": {"Pod": ten}, "node": {"Name": "b3"}})
    assert busy["status"] == "t is using b3, and not rewrite"
    other = post(f"{url}/volcano/predicate", {"task": {"Pod": ten}, "node": {"Name": "p310"}})
    assert other["code"] != 0 and "cuts Ascend310P chips" in other["status"]
