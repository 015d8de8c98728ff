"""Atlas 850 SuperPoD (``chip8-node8-sp``) and Atlas 950 SuperPoD (``chip8-node8-ra64-sp``) jobs
on 8-NPU ``huawei.com/npu`` servers labelled only ``accelerator=huawei-npu``, through the extender
over HTTP and through the Volcano stand-in (``simulation/volcano.py``): Huawei's 950 sample job
(``tests/data/huawei_jobs/950-superpod-sp-block-8``) placed on a node with a rack, an 850 gang
inside one SuperPoD, and bad input refused once in upstream's words."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from contract.annotations import REAL_ANNOTATION
from contract.chip_names import NPU
from contract.deviceinfo import DeviceInfo
from contract.groups import (
    COSCHEDULING,
    COSCHEDULING_GROUP_LABEL,
    PODGROUP_APIS,
    VOLCANO,
    podgroups,
)
from scheduler_core.engine.rescheduling import RA_BLOCK_STAGE, SUPER_POD_STAGE
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
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
    ranks: Iterable[int] | None = None,
) -> None:
    """The gang's pods (``ranks``: only those, as a controller makes deleted ones again)."""
    for r in range(size) if ranks is None else ranks:
        pod = pod_object("ns", f"{name}-{r}", None, npu, resource=NPU.resource)
        pod["metadata"]["uid"] += "" if ranks is None else "-again"
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


class RunningGang:
    """A 4-pod Atlas 950 pod-level job (ra-blocks of 2 pods, sp-block the job) placed through
    the extender and running, its scheduler's clock at the DeviceInfos' time."""

    def __init__(self, nodes: Mapping[str, tuple[int, int]]) -> None:
        self.nodes = nodes
        self.store = npu_cluster(nodes)
        notes = {POLICY: "chip8-node8-ra64-sp", "sp-block": "32", "ra-block": "16"}
        self.labels = {"fault-scheduling": "force", "pod-rescheduling": "on"}
        self.notes = notes
        gang(self.store, "ra", 4, notes, labels=self.labels)
        self.clock = Clock()
        self.clock.now = time.time()  # the DeviceInfos' update time: a fresh report
        self.extender = Extender(self.store, clock=self.clock)
        self.service = SchedulerService(self.store, self.extender, clock=self.clock)
        self.service.refresh()
        self.on = {r: self.place(r) for r in range(4)}

    def place(self, rank: int) -> str:
        """kube-scheduler's filter and bind; the pod started (its agent's record, Running)."""
        node = schedule(self.extender, self.store.get_pod("ns", f"ra-{rank}"), list(self.nodes))
        assert node is not None, f"rank {rank} was not placed"
        pod = self.store.get_pod("ns", f"ra-{rank}")
        notes = pod["metadata"]["annotations"]
        notes[REAL_ANNOTATION] = notes[NPU.resource]
        pod["status"]["phase"] = "Running"
        self.store.put("Pod", pod)
        return node

    def left(self) -> list[str]:
        self.service.refresh()
        return sorted(p["metadata"]["name"] for p in self.store.list_pods(None)[0])

    def fail(self, rank: int) -> None:
        """A chip of the rank's node fails: its agent reports it."""
        npu_server(self.store, self.on[rank], *self.nodes[self.on[rank]], failed=2)

    def made_again(self, rank: int) -> None:
        """The job's controller makes the deleted pod again (same name, new UID)."""
        gang(self.store, "ra", 4, self.notes, labels=self.labels, ranks=[rank])
        self.service.refresh()


def test_a_950_pod_level_job_widens_from_the_faulty_pod_to_its_ra_block_at_3_s() -> None:
    # One SuperPoD of two racks of two servers.
    job = RunningGang({f"n{i}": (0, i // 2) for i in range(4)})
    assert sorted(job.on.values()) == sorted(job.nodes)
    job.fail(3)
    assert job.left() == ["ra-0", "ra-1", "ra-2"], "the faulty pod alone at first"
    job.clock.now += RA_BLOCK_STAGE - 0.5
    assert job.left() == ["ra-0", "ra-1", "ra-2"]
    job.clock.now += 0.5
    assert job.left() == ["ra-0", "ra-1"], "then its ra-block: ranks 2 and 3"
    job.clock.now += SUPER_POD_STAGE - RA_BLOCK_STAGE
    assert job.left() == [], "the virtual SuperPoD holds the master: the whole job"


def test_a_950_faulty_rank_goes_back_into_its_rack_then_its_ra_block_into_a_whole_rack() -> None:
    # Two racks hold the job (2 servers each), the third has 2 free servers
    # (reschedule.go selectNodesByRack: same rack first, the whole ra-block from stage 3).
    nodes = {f"n{i}": (0, i // 2) for i in range(6)}
    job = RunningGang(nodes)
    by_rack = {nodes[job.on[r]][1] for r in (2, 3)}
    assert len(by_rack) == 1 and nodes[job.on[0]][1] == nodes[job.on[1]][1], job.on
    job.fail(3)
    assert job.left() == ["ra-0", "ra-1", "ra-2"]
    job.made_again(3)
    answer = job.extender.filter({"Pod": job.store.get_pod("ns", "ra-3"), "NodeNames": list(nodes)})
    assert answer.NodeNames == [], "its rack has no free server: it waits"
    rack = by_rack.pop()
    assert f"rank 3: no free node in rack {rack} of super-pod 0, where it ran" in str(answer)
    job.clock.now += RA_BLOCK_STAGE
    assert job.left() == ["ra-0", "ra-1", "ra-3"], "rank 2 deleted: the ra-block moves"
    job.made_again(2)
    moved = {job.place(r) for r in (2, 3)}
    assert moved == set(nodes) - set(job.on.values()), "the ra-block together in the free rack"
    kept = {r: job.store.get_pod("ns", f"ra-{r}")["spec"]["nodeName"] for r in (0, 1)}
    assert kept == {r: job.on[r] for r in (0, 1)}, "ranks 0 and 1 never moved"


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


def test_a_one_pod_950_job_without_sp_block_goes_to_the_least_idle_node_with_a_rack() -> None:
    # A PodGroup of one 1-NPU pod under chip8-node8-ra64-sp, no sp-block: upstream defaults
    # sp-block to the job's NPUs (plugin/job.go setSpBlock) and keeps the least idle nodes
    # (chip8node8ra64sp/score.go selectNodeForStandaloneJob); the filter passes only that node,
    # not every node Volcano would then draw among. Found by the differential against
    # Huawei's plugin in the real Volcano (benchmarks/differential.py, "950 SuperPoD").
    store = npu_cluster({"a0": (0, 0), "a1": (0, 0)})
    npu_server(store, "b0", 1, 0, failed=2)  # 7 idle NPUs
    store.apis.add(PODGROUP_APIS[COSCHEDULING])
    group = {"metadata": {"namespace": "ns", "name": "one"}, "spec": {"minMember": 1}}
    store.create_object(podgroups(COSCHEDULING), group)
    pod = pod_object("ns", "one-0", None, 1, resource=NPU.resource)
    pod["metadata"]["labels"] = {COSCHEDULING_GROUP_LABEL: "one"}
    pod["metadata"]["annotations"][POLICY] = "chip8-node8-ra64-sp"
    store.put("Pod", pod)
    extender = Extender(store)
    SchedulerService(store, extender).refresh()
    passing = extender.filter(
        {"Pod": store.get_pod("ns", "one-0"), "NodeNames": ["a0", "a1", "b0"]}
    )
    assert passing.NodeNames == ["b0"], passing
