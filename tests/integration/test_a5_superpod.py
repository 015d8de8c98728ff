"""Atlas 850 SuperPoD (``chip8-node8-sp``) and Atlas 950 SuperPoD (``chip8-node8-ra64-sp``) jobs
on 8-NPU ``huawei.com/npu`` servers labelled only ``accelerator=huawei-npu``, through the extender
over HTTP and through the Volcano stand-in (``simulation/volcano.py``): Huawei's 950 sample job
(``tests/data/huawei_jobs/950-superpod-sp-block-8``) placed on a node with a rack, an 850 gang
inside one SuperPoD, and bad input refused once in upstream's words."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Mapping
from typing import Any

import pytest

from contract.annotations import REAL_ANNOTATION
from contract.chip_names import NPU
from contract.deviceinfo import DeviceInfo
from contract.groups import PODGROUP_APIS, VOLCANO, podgroups
from scheduler_core.engine.rescheduling import RA_BLOCK_STAGE, SUPER_POD_STAGE
from scheduler_core.service.extender import Extender
from scheduler_core.service.server import SchedulerService
from simulation.cluster import serving
from simulation.memory import MemoryCluster, pod_object, put_npu_node
from simulation.volcano import VolcanoScheduler
from tests.huawei_jobs import expand
from tests.integration.test_extender import Clock, schedule

SAMPLE_950 = "950-superpod-sp-block-8.mindcluster-deploy.yaml"
ALL_NPUS = ",".join(f"npu-{i}" for i in range(8))
POLICY = "huawei.com/schedule_policy"


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def npu_cluster(nodes: Mapping[str, tuple[int, int | None]]) -> MemoryCluster:
    """8-NPU servers: node → (SuperPodID, RackID or None when its DeviceInfo has none)."""
    store = MemoryCluster()
    for name, (super_pod, rack) in nodes.items():
        npu_server(store, name, super_pod, rack)
    return store


def npu_server(
    store: MemoryCluster, name: str, super_pod: int, rack: int | None, failed: int | None = None
) -> None:
    """One 8-NPU server and its DeviceInfo (``failed``: a chip its agent reports unhealthy)."""
    unhealthy = frozenset() if failed is None else frozenset({failed})
    info = DeviceInfo(
        frozenset(range(8)) - unhealthy,
        unhealthy,
        frozenset(),
        update_time=int(time.time()),
        super_pod_id=super_pod,
        rack_id=rack,
        kind=NPU,
    )
    labels = {"accelerator": "huawei-npu"}
    allocatable = 8 - len(unhealthy)
    put_npu_node(store, name, info, allocatable=allocatable, resource=NPU.resource, labels=labels)


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


def gang(
    store: MemoryCluster,
    name: str,
    size: int,
    notes: dict[str, str],
    npu: int = 8,
    *,
    labels: dict[str, str] | None = None,
) -> None:
    for r in range(size):
        pod = pod_object("ns", f"{name}-{r}", None, npu, resource=NPU.resource)
        pod["spec"]["schedulerName"] = "volcano"
        pod["metadata"]["labels"] = {"ascend.npu/gang": name, **(labels or {})}
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


def test_a_950_pod_level_job_widens_from_the_faulty_pod_to_its_ra_block_at_3_s() -> None:
    # One SuperPoD of two racks of two servers; 4 pods, ra-blocks of 2 pods, sp-block the job.
    nodes = {f"n{i}": (0, i // 2) for i in range(4)}
    store = npu_cluster(nodes)
    notes = {POLICY: "chip8-node8-ra64-sp", "sp-block": "32", "ra-block": "16"}
    gang(store, "ra", 4, notes, labels={"fault-scheduling": "force", "pod-rescheduling": "on"})
    clock = Clock()
    clock.now = time.time()  # the DeviceInfos' update time: a fresh report
    extender = Extender(store, clock=clock)
    service = SchedulerService(store, extender, clock=clock)
    service.refresh()
    on: dict[int, str] = {}
    for r in range(4):
        on[r] = str(schedule(extender, store.get_pod("ns", f"ra-{r}"), list(nodes)))
        pod = store.get_pod("ns", f"ra-{r}")  # started: its agent's record, Running
        pod["metadata"]["annotations"][REAL_ANNOTATION] = pod["metadata"]["annotations"][
            NPU.resource
        ]
        pod["status"]["phase"] = "Running"
        store.put("Pod", pod)
    assert sorted(on.values()) == sorted(nodes)

    def left() -> list[str]:
        service.refresh()
        return sorted(p["metadata"]["name"] for p in store.list_pods(None)[0])

    failed_node = on[3]
    npu_server(store, failed_node, *nodes[failed_node], failed=2)
    assert left() == ["ra-0", "ra-1", "ra-2"], "the faulty pod alone at first"
    clock.now += RA_BLOCK_STAGE - 0.5
    assert left() == ["ra-0", "ra-1", "ra-2"]
    clock.now += 0.5
    assert left() == ["ra-0", "ra-1"], "then its ra-block: ranks 2 and 3"
    clock.now += SUPER_POD_STAGE - RA_BLOCK_STAGE
    assert left() == [], "the virtual SuperPoD holds the master: the whole job"


@pytest.mark.parametrize(
    ("ra_block", "placed", "refusal"),
    [
        ("16", ["n1", "n2"], ""),
        ("32", ["", ""], "Parameter ra-block(32)/8 could not be bigger than sp-block(16)/8"),
    ],
)
def test_a_volcano_jobs_ra_block_on_its_pod_group_alone_is_the_jobs(
    ra_block: str, placed: list[str], refusal: str
) -> None:
    # Volcano copies a Job's annotations to its PodGroup, not to its pods: the 950 handler
    # reads ra-block from the job (ascend-for-volcano plugin/job_v2.go setTpBlock).
    store = npu_cluster({"n0": (0, 0), "n1": (0, 1), "n2": (0, 1)})
    job = expand(SAMPLE_950)
    assert job.podgroup is not None
    job.podgroup["metadata"]["annotations"].update({"sp-block": "16", "ra-block": ra_block})
    job.podgroup["spec"]["minMember"] = 2
    store.apis.add(PODGROUP_APIS[VOLCANO])
    store.create_object(podgroups(VOLCANO), job.podgroup)
    (first,) = job.pods
    assert "ra-block" not in first["metadata"]["annotations"]
    names = []
    for index in range(2):  # the sample's task with 2 replicas
        pod = json.loads(json.dumps(first))
        pod["metadata"]["name"] = first["metadata"]["name"].removesuffix("-0") + f"-{index}"
        pod["metadata"]["uid"] = f"uid-950-{index}"
        pod["metadata"]["annotations"]["volcano.sh/task-index"] = str(index)
        pod["metadata"]["labels"]["volcano.sh/task-index"] = str(index)
        store.put("Pod", pod)
        names.append(pod["metadata"]["name"])
    volcano = volcano_session(store)
    nodes = sorted(store.get_pod("vcjob", n)["spec"].get("nodeName") or "" for n in names)
    assert nodes == placed, volcano.reasons
    assert refusal in str(volcano.reasons)
