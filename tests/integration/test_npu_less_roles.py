"""Jobs with roles that ask no NPU, as Huawei ships them (``tests/huawei_jobs.py`` expands its
samples as their controllers do): MindSpore's Scheduler beside its Workers, verl's master
beside its A3 SuperPoD workers, a Volcano Job whose master asks no NPU and whose ranks
Volcano's ``hcclrank`` plugin numbers. Each caller (``simulation/kube_scheduler.py``,
``simulation/volcano.py``) places the NPU-less pod without the extender; the extender
reserves the NPU pods as the gang, each at the rank its controller gave it."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from agent.deviceinfo_publisher import configmap
from contract.chip_names import ASCEND910, NPU, ChipKind
from contract.deviceinfo import DeviceInfo
from contract.groups import PODGROUP_APIS, VOLCANO, podgroups
from simulation.cluster import SimulatedCluster, wait_for
from simulation.cluster import serving as served
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import MemoryCluster, pod_object
from simulation.volcano import VolcanoScheduler
from tests.huawei_jobs import GROUP_NAME, RANK, Expanded, expand, npu_request

Obj = dict[str, Any]
MINDSPORE = "mindspore-scheduler1-worker2-16chips.mindcluster-deploy.yaml"
VERL = "verl-grpo-sp-block-32-pod-rescheduling.mindcluster-deploy.yaml"
KUBE_SCHEDULER = "ascend-npu-scheduler"
CALLERS = ("kube-scheduler", "volcano")


def put_nodes(
    store: MemoryCluster,
    names: dict[str, int | None],
    accelerator_type: str,
    chips: int,
    kind: ChipKind = ASCEND910,
) -> None:
    """Servers of ``chips`` chips labelled ``accelerator-type``; ``names``: node → its SuperPoD
    (None: none), with the DeviceInfo their agent publishes."""
    for name, super_pod in names.items():
        allocatable = {kind.resource: str(chips)}
        store.put(
            "Node",
            {
                "metadata": {"name": name, "labels": {"accelerator-type": accelerator_type}},
                "status": {"capacity": allocatable, "allocatable": dict(allocatable)},
            },
        )
        info = DeviceInfo(
            frozenset(range(chips)),
            frozenset(),
            frozenset(),
            update_time=int(time.time()),
            super_pod_id=super_pod,
            kind=kind,
        )
        store.put("ConfigMap", configmap(name, info))


def submit(store: MemoryCluster, job: Expanded, caller: str) -> None:
    """The job's PodGroup and pods as its controller creates them, for ``caller``."""
    assert job.podgroup is not None
    store.create_object(podgroups(VOLCANO), job.podgroup)
    for pod in job.pods:
        if caller == "kube-scheduler":
            pod["spec"]["schedulerName"] = KUBE_SCHEDULER
        store.put("Pod", pod)


@contextmanager
def serving(store: MemoryCluster) -> Iterator[SimulatedCluster]:
    """The scheduler service over HTTP on ``store`` (its Volcano PodGroups served)."""
    store.apis.add(PODGROUP_APIS[VOLCANO])
    with served(store) as cluster:
        yield cluster


def run(cluster: SimulatedCluster, caller: str, pods: list[Obj]) -> None:
    """Schedule with ``caller`` until every pod is bound (a deadline, not a count; the
    caller's reasons for the pods still pending when it passes)."""
    names = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods]

    def bound() -> bool:
        return all(cluster.store.get_pod(ns, n)["spec"].get("nodeName") for ns, n in names)

    cluster.service.refresh()
    scheduler: KubeScheduler | VolcanoScheduler
    if caller == "kube-scheduler":
        scheduler = KubeScheduler(cluster)
        cluster.stack.callback(scheduler.close)
    else:
        scheduler = VolcanoScheduler(cluster)

    def step() -> bool:
        if isinstance(scheduler, KubeScheduler):
            scheduler.cycle()
        else:
            scheduler.session()
        cluster.service.refresh()
        return bound()

    assert wait_for(step, timeout=60), scheduler.reasons  # room for a loaded machine


def post(url: str, body: Obj) -> Any:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def stored(cluster: SimulatedCluster, pod: Obj) -> Obj:
    return cluster.store.get_pod(pod["metadata"]["namespace"], pod["metadata"]["name"])


@pytest.mark.parametrize("caller", CALLERS)
def test_a_mindspore_scheduler_and_two_workers_run_with_the_workers_as_the_gang(
    caller: str,
) -> None:
    # Today: "… pod default-test-mindspore-scheduler-0 asks for no NPU, the others do".
    job = expand(MINDSPORE)
    assert job.podgroup is not None and job.podgroup["spec"]["minMember"] == 3
    store = MemoryCluster()
    put_nodes(store, {"a2-0": None, "a2-1": None, "a2-2": None}, "module-910b-16", 16)
    submit(store, job, caller)
    with serving(store) as cluster:
        run(cluster, caller, job.pods)
        pods = {p["metadata"]["name"]: stored(cluster, p) for p in job.pods}
    scheduler = pods.pop("default-test-mindspore-scheduler-0")
    assert "huawei.com/Ascend910" not in scheduler["metadata"]["annotations"]
    # The workers keep the ranks the Ascend Operator wrote (Scheduler-0 has 0 too: no NPU),
    # each on a server of its own with all 16 chips.
    assert {n: p["metadata"]["annotations"][RANK] for n, p in pods.items()} == {
        "default-test-mindspore-worker-0": "0",
        "default-test-mindspore-worker-1": "1",
    }
    assert len({p["spec"]["nodeName"] for p in pods.values()}) == 2
    every = {f"Ascend910-{i}" for i in range(16)}
    for pod in pods.values():
        assert set(pod["metadata"]["annotations"]["huawei.com/Ascend910"].split(",")) == every


@pytest.mark.parametrize("caller", CALLERS)
def test_a_verl_master_without_npus_and_two_a3_superpod_workers_run(caller: str) -> None:
    # The master carries huawei.com/skip-ascend-plugin: enabled, which MindCluster's A3
    # SuperPoD handler accepts for a task of no NPU (superpod/frame.go CheckTaskNPU).
    job = expand(VERL)
    store = MemoryCluster()
    put_nodes(store, {"sp1-0": 1, "sp1-1": 1, "sp2-0": 2}, "module-a3-16-super-pod", 16)
    submit(store, job, caller)
    with serving(store) as cluster:
        run(cluster, caller, job.pods)
        pods = {p["metadata"]["name"]: stored(cluster, p) for p in job.pods}
    master = pods.pop("mindspeed-rl-master-0")
    assert "huawei.com/Ascend910" not in master["metadata"]["annotations"]
    assert {p["spec"]["nodeName"] for p in pods.values()} == {"sp1-0", "sp1-1"}, "one SuperPoD"
    assert sorted(p["metadata"]["annotations"][RANK] for p in pods.values()) == ["0", "1"]


def test_an_a3_role_of_no_npu_without_upstreams_marks_is_refused_in_its_words() -> None:
    job = expand(VERL)
    master = next(p for p in job.pods if not npu_request(p))
    del master["metadata"]["annotations"]["huawei.com/skip-ascend-plugin"]
    store = MemoryCluster()
    put_nodes(store, {"sp1-0": 1, "sp1-1": 1}, "module-a3-16-super-pod", 16)
    submit(store, job, "volcano")
    with serving(store) as cluster:
        cluster.service.refresh()
        worker = stored(cluster, job.npu_pods()[0])
        answer = cluster.service.extender.filter({"Pod": worker, "NodeNames": ["sp1-0"]})
    assert answer.FailedAndUnresolvableNodes["sp1-0"] == (
        "expected: distributed super-pod job require npu(32) should be equal to node npu(16), "
        "actual: task<mindspeed-rl-master-0> req npu: 0, "
    )


def hcclrank_job(resource: str = ASCEND910.resource, npu: int = 8) -> list[Obj]:
    """A Volcano Job of one master asking no NPU and two workers, as its controller creates
    its pods with the ``hcclrank`` plugin (volcano-sh/volcano ``pkg/controllers/job/plugins/
    distributed-framework/hcclrank``: master i → i, worker i → replicas(master) + i)."""
    pods = []
    for task, index, rank, asked in (
        ("master", 0, 0, 0),
        ("worker", 0, 1, npu),
        ("worker", 1, 2, npu),
    ):
        name = f"ray-{task}-{index}"
        notes = {GROUP_NAME: "ray-uid", "volcano.sh/task-spec": task, RANK: str(rank)}
        labels = {"volcano.sh/task-index": str(index), "volcano.sh/job-name": "ray"}
        pod = pod_object(
            "ns", name, None, asked, annotations=notes, labels=labels, resource=resource
        )
        pod["spec"]["schedulerName"] = "volcano"
        if not asked:
            pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
        pods.append(pod)
    return pods


def ray_podgroup(annotations: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "ray-uid", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"minMember": 3, "minTaskMember": {"master": 1, "worker": 2}},
    }


def test_a_volcano_job_whose_master_asks_no_npu_keeps_hcclranks_one_and_two() -> None:
    store = MemoryCluster()
    put_nodes(store, {"a2-0": None, "a2-1": None}, "module-910b-8", 8)
    store.apis.add(PODGROUP_APIS[VOLCANO])
    store.create_object(
        podgroups(VOLCANO), ray_podgroup({"huawei.com/schedule_policy": "chip8-node8"})
    )
    pods = hcclrank_job()
    for pod in pods:
        store.put("Pod", pod)
    with serving(store) as cluster:
        run(cluster, "volcano", pods)
        placed = [stored(cluster, p) for p in pods]
    workers = {p["metadata"]["annotations"][RANK]: p["spec"]["nodeName"] for p in placed[1:]}
    assert sorted(workers) == ["1", "2"] and sorted(workers.values()) == ["a2-0", "a2-1"]
    assert "huawei.com/Ascend910" not in placed[0]["metadata"]["annotations"]


def test_a_gang_of_huawei_npu_pods_runs_on_950_servers() -> None:
    # Today: "gangs are of huawei.com/Ascend910 pods, not huawei.com/npu".
    store = MemoryCluster()
    put_nodes(store, {"a5-0": None, "a5-1": None}, "350-Atlas-8", 8, kind=NPU)
    store.apis.add(PODGROUP_APIS[VOLCANO])
    podgroup = ray_podgroup({"huawei.com/schedule_policy": "chip1-node8"})
    podgroup["spec"] = {"minMember": 2}
    store.create_object(podgroups(VOLCANO), podgroup)
    pods = hcclrank_job(NPU.resource, 8)[1:]  # the workers alone: every pod asks NPUs
    for pod in pods:
        store.put("Pod", pod)
    with serving(store) as cluster:
        run(cluster, "volcano", pods)
        placed = [stored(cluster, p) for p in pods]
    every = ",".join(f"npu-{i}" for i in range(8))
    assert all(p["metadata"]["annotations"]["huawei.com/npu"] == every for p in placed)
    assert sorted(p["spec"]["nodeName"] for p in placed) == ["a5-0", "a5-1"]


def test_a_role_of_no_npu_passes_every_node_whatever_its_job_says() -> None:
    # A caller without managedResources sends every pod. The master of a huawei.com/npu job
    # asks nothing (read as huawei.com/Ascend910, which chip1-node8 does not route), and a
    # pod naming a PodGroup not seen yet: neither is this scheduler's to hold back.
    store = MemoryCluster()
    put_nodes(store, {"a5-0": None}, "350-Atlas-8", 8, kind=NPU)
    store.apis.add(PODGROUP_APIS[VOLCANO])
    policy = {"huawei.com/schedule_policy": "chip1-node8"}
    store.create_object(podgroups(VOLCANO), ray_podgroup(policy))
    master = hcclrank_job(NPU.resource, 8)[0]
    orphan = pod_object("ns", "orphan", None, 0, annotations={GROUP_NAME: "not-yet"})
    orphan["spec"]["containers"][0]["resources"] = {}
    for pod in (master, orphan):
        store.put("Pod", pod)
    with serving(store) as cluster:
        cluster.service.refresh()
        for pod in (master, orphan):
            answer = post(
                f"{cluster.url}/filter", {"Pod": stored(cluster, pod), "NodeNames": ["a5-0"]}
            )
            assert answer["NodeNames"] == ["a5-0"], answer
