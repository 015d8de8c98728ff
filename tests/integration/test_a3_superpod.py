"""An Atlas 900 A3 SuperPoD gang (2 pods × 16 chips, ``sp-block: 32``) on 16-chip servers,
through the extender over HTTP and through the Volcano stand-in (``simulation/volcano.py``):
both pods in one SuperPoD, each on a whole server, as MindCluster ``ascend910a3/superpod``."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

from contract.deviceinfo import DeviceInfo
from contract.groups import COSCHEDULING, COSCHEDULING_GROUP_LABEL, PODGROUP_APIS, podgroups
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.cluster import serving
from simulation.memory import MemoryCluster, pod_object, put_npu_node
from simulation.volcano import VolcanoScheduler

A3_SP = "module-a3-16-super-pod"
ALL_CHIPS = ",".join(f"Ascend910-{i}" for i in range(16))


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def a3_cluster(super_pods: dict[str, int]) -> MemoryCluster:
    """16-chip A3 SuperPoD servers (label ``accelerator-type``, DeviceInfo of 16 chips)."""
    store = MemoryCluster()
    for name, super_pod in super_pods.items():
        info = DeviceInfo(
            frozenset(range(16)),
            frozenset(),
            frozenset(),
            update_time=int(time.time()),
            super_pod_id=super_pod,
        )
        labels = {"accelerator-type": A3_SP}
        put_npu_node(store, name, info, allocatable=16, chips=16, labels=labels)
    return store


def gang(
    store: MemoryCluster, name: str, size: int, npu: int, *, sp_block: str, scheduler: str = ""
) -> None:
    for r in range(size):
        pod = pod_object("ns", f"{name}-{r}", None, npu)
        pod["spec"]["nodeSelector"] = {"accelerator-type": A3_SP}
        if scheduler:
            pod["spec"]["schedulerName"] = scheduler
        pod["metadata"]["labels"] = {"ascend.npu/gang": name}
        pod["metadata"]["annotations"].update(
            {"ascend.npu/gang-size": str(size), "sp-block": sp_block, "hccl/rankIndex": str(r)}
        )
        store.put("Pod", pod)


NODES = {"a0": 1, "a1": 1, "a2": 1, "b0": 2, "b1": 2}


def test_a_2x16_sp_block_32_gang_takes_two_whole_servers_of_one_super_pod_over_http() -> None:
    store = a3_cluster(NODES)
    gang(store, "sp", 2, 16, sp_block="32")
    service = SchedulerService(store, Extender(store), refresh_period=60)
    url = service.start()
    try:
        service.refresh()
        placed = []
        for r in range(2):
            pod = store.get_pod("ns", f"sp-{r}")
            answer = post(f"{url}/filter", {"Pod": pod, "NodeNames": list(NODES)})
            assert len(answer["NodeNames"]) == 1, answer
            (node,) = answer["NodeNames"]
            uid = pod["metadata"]["uid"]
            bind = {"PodName": f"sp-{r}", "PodNamespace": "ns", "PodUID": uid, "Node": node}
            assert post(f"{url}/bind", bind) == {"Error": ""}
            placed.append(node)
    finally:
        service.stop()
    # sp-block 32 = 2 servers of 16. Neither SuperPoD has a block beyond its reserve of 2
    # (3 − 2, 2 − 2 free): the reserve pass goes from the last grid row, SuperPoD 1 (row 1).
    assert placed == ["a0", "a1"]
    for r in range(2):
        notes = store.get_pod("ns", f"sp-{r}")["metadata"]["annotations"]
        assert notes["huawei.com/Ascend910"] == ALL_CHIPS
        assert notes["super-pod-rank"] == "0"
        assert notes["super-pod-id"] == str(NODES[placed[0]])


def test_sp_block_not_a_multiple_of_16_and_odd_chips_are_refused_in_upstreams_words() -> None:
    store = a3_cluster(NODES)
    gang(store, "bad", 2, 16, sp_block="24")
    gang(store, "odd", 2, 3, sp_block="6")
    service = SchedulerService(store, Extender(store), refresh_period=60)
    url = service.start()
    try:
        service.refresh()
        bad = post(f"{url}/filter", {"Pod": store.get_pod("ns", "bad-0"), "NodeNames": ["a0"]})
        odd = post(f"{url}/filter", {"Pod": store.get_pod("ns", "odd-0"), "NodeNames": ["a0"]})
    finally:
        service.stop()
    assert bad["NodeNames"] == [] and "sp-block(24) is not mutiple of node npu (16)" in str(bad)
    assert odd["NodeNames"] == [] and "should be equal to node npu(16)" in str(odd)
    pods, _ = store.list_pods(None)
    assert not any("huawei.com/Ascend910" in p["metadata"]["annotations"] for p in pods)


def test_volcano_enqueues_and_binds_the_a3_super_pod_gang() -> None:
    store = a3_cluster(NODES)
    gang(store, "sp", 2, 16, sp_block="32", scheduler="volcano")
    with serving(store) as cluster:
        asked = {"TotalRequest": {"ScalarResources": {"huawei.com/Ascend910": 32_000}}}
        assert post(f"{cluster.url}/volcano/jobEnqueueable", {"job": asked}) == {"status": 1}
        volcano = VolcanoScheduler(cluster)
        assert volcano.session().bound == 2, volcano.reasons
    pods = [store.get_pod("ns", f"sp-{r}") for r in range(2)]
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 2 and len({NODES[n] for n in nodes}) == 1
    assert all(p["metadata"]["annotations"]["huawei.com/Ascend910"] == ALL_CHIPS for p in pods)


def test_a_one_pod_super_pod_job_of_a_pod_group_goes_where_the_super_pod_choice_puts_it() -> None:
    # A PodGroup of one pod (a Volcano Job's, or coscheduling's) with sp-block: its node is
    # chosen as upstream's SuperPoD handler chooses a one-task job's (the frame's choice of
    # SuperPoD, then its least idle node), as for a gang, not left to the scheduler's draw
    # among equal scores. Found through the real Volcano (benchmarks/differential.py
    # --through ours): the filter passed every whole server, and Volcano drew n1.
    store = a3_cluster({"n0": 0, "n1": 1, "n2": 0})
    store.apis.add(PODGROUP_APIS[COSCHEDULING])
    group = {"metadata": {"namespace": "ns", "name": "one"}, "spec": {"minMember": 1}}
    store.create_object(podgroups(COSCHEDULING), group)
    pod = pod_object("ns", "one-0", None, 16)
    pod["spec"]["nodeSelector"] = {"accelerator-type": A3_SP}
    pod["metadata"]["labels"] = {COSCHEDULING_GROUP_LABEL: "one"}
    pod["metadata"]["annotations"]["sp-block"] = "16"
    store.put("Pod", pod)
    extender = Extender(store)
    SchedulerService(store, extender).refresh()
    passing = extender.filter(
        {"Pod": store.get_pod("ns", "one-0"), "NodeNames": ["n0", "n1", "n2"]}
    )
    assert passing.NodeNames == ["n0"], passing
