"""Atlas 850 SuperPoD (``chip8-node8-sp``) and Atlas 950 SuperPoD (``chip8-node8-ra64-sp``) jobs
on 8-NPU ``huawei.com/npu`` servers labelled only ``accelerator=huawei-npu``, through the extender
over HTTP and through the Volcano stand-in (``simulation/volcano.py``): Huawei's 950 sample job
(``tests/data/huawei_jobs/950-superpod-sp-block-8``) placed on a node with a rack, an 850 gang
inside one SuperPoD, and bad input refused once in upstream's words."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from contract.chip_names import NPU
from contract.deviceinfo import DeviceInfo
from contract.groups import PODGROUP_APIS, VOLCANO, podgroups
from scheduler_core.service.extender import Extender
from scheduler_core.service.server import SchedulerService
from simulation.cluster import serving
from simulation.memory import MemoryCluster, pod_object, put_npu_node
from simulation.volcano import VolcanoScheduler
from tests.huawei_jobs import expand

SAMPLE_950 = "950-superpod-sp-block-8.mindcluster-deploy.yaml"
ALL_NPUS = ",".join(f"npu-{i}" for i in range(8))
POLICY = "huawei.com/schedule_policy"


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def npu_cluster(nodes: dict[str, tuple[int, int | None]]) -> MemoryCluster:
    """8-NPU servers: node → (SuperPodID, RackID or None when its DeviceInfo has none)."""
    store = MemoryCluster()
    for name, (super_pod, rack) in nodes.items():
        info = DeviceInfo(
            frozenset(range(8)),
            frozenset(),
            frozenset(),
            update_time=int(time.time()),
            super_pod_id=super_pod,
            rack_id=rack,
            kind=NPU,
        )
        labels = {"accelerator": "huawei-npu"}
        put_npu_node(store, name, info, resource=NPU.resource, labels=labels)
    return store


def sample_950(store: MemoryCluster, scheduler: str = "") -> str:
    """Huawei's sample as Volcano's job controller expands it; the pod's name."""
    job = expand(SAMPLE_950)
    assert job.podgroup is not None
    store.apis.add(PODGROUP_APIS[VOLCANO])
    store.create_object(podgroups(VOLCANO), job.podgroup)
    (pod,) = job.pods
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    store.put("Pod", pod)
    return str(pod["metadata"]["name"])


def gang(store: MemoryCluster, name: str, size: int, notes: dict[str, str], npu: int = 8) -> None:
    for r in range(size):
        pod = pod_object("ns", f"{name}-{r}", None, npu, resource=NPU.resource)
        pod["spec"]["schedulerName"] = "volcano"
        pod["metadata"]["labels"] = {"ascend.npu/gang": name}
        pod["metadata"]["annotations"].update(
            {"ascend.npu/gang-size": str(size), "hccl/rankIndex": str(r), **notes}
        )
        store.put("Pod", pod)


def test_the_950_sample_job_goes_to_a_node_with_a_rack_over_http() -> None:
    store = npu_cluster({"a0": (0, None), "a1": (0, 3)})
    name = sample_950(store)
    service = SchedulerService(store, Extender(store), refresh_period=60)
    url = service.start()
    try:
        service.refresh()
        pod = store.get_pod("vcjob", name)
        answer = post(f"{url}/filter", {"Pod": pod, "NodeNames": ["a0", "a1"]})
        assert answer["NodeNames"] == ["a1"], answer
        assert "node rack-id is invalid for node=a0, id=-1" in str(answer)
        uid = pod["metadata"]["uid"]
        bind = {"PodName": name, "PodNamespace": "vcjob", "PodUID": uid, "Node": "a1"}
        assert post(f"{url}/bind", bind) == {"Error": ""}
    finally:
        service.stop()
    assert store.get_pod("vcjob", name)["metadata"]["annotations"][NPU.resource] == ALL_NPUS


def volcano_session(store: MemoryCluster) -> VolcanoScheduler:
    with serving(store) as cluster:
        volcano = VolcanoScheduler(cluster)
        volcano.session()
        return volcano


def test_volcano_binds_the_950_sample_and_an_850_gang_in_one_super_pod() -> None:
    store = npu_cluster({"r0": (0, 0), "a0": (1, 8), "a1": (1, 8), "a2": (1, 9), "b0": (2, 16)})
    name = sample_950(store, "volcano")
    gang(store, "sp", 2, {POLICY: "chip8-node8-sp", "sp-block": "16"})
    volcano = volcano_session(store)
    assert store.get_pod("vcjob", name)["spec"].get("nodeName"), volcano.reasons
    pods = [store.get_pod("ns", f"sp-{r}") for r in range(2)]
    nodes = [p["spec"].get("nodeName") for p in pods]
    # sp-block 16 = 2 servers: SuperPoD 1 (3 free, 1 beyond the reserve of 2) gives the block.
    assert nodes == ["a0", "a1"], volcano.reasons
    for pod in pods:
        notes = pod["metadata"]["annotations"]
        assert notes[NPU.resource] == ALL_NPUS
        assert (notes["super-pod-rank"], notes["super-pod-id"]) == ("0", "1")
    chips = [
        (p["spec"]["nodeName"], c)
        for p in [*pods, store.get_pod("vcjob", name)]
        for c in p["metadata"]["annotations"][NPU.resource].split(",")
    ]
    assert len(chips) == len(set(chips))


def test_a_950_gang_takes_one_rack_and_bad_blocks_are_refused_in_upstreams_words() -> None:
    store = npu_cluster({f"n{i}": (0, i // 2) for i in range(6)})
    gang(store, "ra", 2, {POLICY: "chip8-node8-ra64-sp", "sp-block": "16", "ra-block": "16"})
    gang(store, "odd", 3, {POLICY: "chip8-node8-ra64-sp", "sp-block": "24", "ra-block": "16"})
    gang(store, "half", 2, {POLICY: "chip8-node8-sp", "sp-block": "12"})
    service = SchedulerService(store, Extender(store), refresh_period=60)
    url = service.start()
    names = [f"n{i}" for i in range(6)]
    try:
        service.refresh()
        placed = []
        for r in range(2):
            pod = store.get_pod("ns", f"ra-{r}")
            answer = post(f"{url}/filter", {"Pod": pod, "NodeNames": names})
            assert len(answer["NodeNames"]) == 1, answer
            uid = pod["metadata"]["uid"]
            bind = {"PodName": f"ra-{r}", "PodNamespace": "ns", "PodUID": uid}
            assert post(f"{url}/bind", {**bind, "Node": answer["NodeNames"][0]}) == {"Error": ""}
            placed += answer["NodeNames"]
        odd = post(f"{url}/filter", {"Pod": store.get_pod("ns", "odd-0"), "NodeNames": names})
        half = post(f"{url}/filter", {"Pod": store.get_pod("ns", "half-0"), "NodeNames": names})
    finally:
        service.stop()
    # ra-block 16: both pods in one rack (racks of 2 free here: the first exact fit).
    assert placed == ["n0", "n1"]
    assert odd["NodeNames"] == []
    assert "number of tasks(3) must be multiple of nodes occupied by ra-block(2)" in str(odd)
    assert half["NodeNames"] == []
    assert "sp-block(12) is not mutiple of node npu (8)" in str(half)
    for r in range(3):
        assert NPU.resource not in store.get_pod("ns", f"odd-{r}")["metadata"]["annotations"]
