"""End to end on the simulated cluster: sub-healthy nodes, NodeD's reports, one-pod fault
jobs, ``fault-retry-times`` and the ``grace`` restart (agents, kubelets, the API server and
the scheduler service all running)."""

from __future__ import annotations

import json
import logging

import pytest

from contract import nodeinfo
from contract.deviceinfo import configmap_name, decode
from infra.kube.port import KubeError
from simulation.cluster import (
    A3_SUPER_POD_X8_TYPE,
    SUB_HEALTH_CODE,
    SimulatedCluster,
    simulated_cluster,
    wait_for,
)
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import pod_object
from tests.e2e.helpers import check_invariants, fault_nodes, place, submit


def pod_names(cluster: SimulatedCluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.store.list_pods(None)[0]}


def node_of(cluster: SimulatedCluster, name: str) -> str:
    return str(cluster.store.get_pod("ns", name)["spec"].get("nodeName") or "")


def published_sub_healthy(cluster: SimulatedCluster, node: str) -> bool:
    try:
        return decode(
            cluster.store.get_configmap("kube-system", configmap_name(node))["data"]
        ).sub_healthy
    except KubeError:
        return False


# A job of blocks of two 8-chip servers of an Atlas 9000 A3 SuperPoD (sp-block counts NPUs;
# the selector picks the x8 SuperPoD handler, as MindCluster's factory.go routes it).
SP = {"sp-block": "16"}
SP_NODES = {"accelerator-type": A3_SUPER_POD_X8_TYPE}


def test_a_sub_healthy_node_is_the_last_choice_inside_a_superpod() -> None:
    servers = [f"node-0{i}" for i in range(4)]
    with simulated_cluster(4, super_pods=dict.fromkeys(servers, 0)) as cluster:
        # node-00 reports a sub-health fault on a chip that stays healthy and free.
        cluster.nodes["node-00"].write_state(frozenset(), codes={3: SUB_HEALTH_CODE}, super_pod=0)
        assert wait_for(lambda: published_sub_healthy(cluster, "node-00"))
        assert cluster.published_free("node-00") == 8
        cluster.service.refresh()
        scheduler = KubeScheduler(cluster)
        # 2 nodes a block; SuperPoD 0 has 4 free, 2 kept in reserve: one block, by name
        # node-00 and node-01, but node-00 is sub-healthy.
        for r in range(2):
            submit(cluster, f"sp-{r}", 8, gang="sp", size=2, annotations=SP, selector=SP_NODES)
        nodes = place(cluster, scheduler, "sp-0", "sp-1")
        check_invariants(cluster, scheduler)
        assert sorted(nodes.values()) == ["node-01", "node-02"]
        notes = cluster.store.get_pod("ns", "sp-0")["metadata"]["annotations"]
        assert (notes["super-pod-rank"], notes["super-pod-id"]) == ("0", "0")
        # Sub-health is never a refusal: a job of all four nodes takes node-00 too.
        for r in range(2):
            submit(cluster, f"all-{r}", 8, gang="all", size=2, annotations=SP, selector=SP_NODES)
        nodes = place(cluster, scheduler, "all-0", "all-1")
        check_invariants(cluster, scheduler)
        assert sorted(nodes.values()) == ["node-00", "node-03"]


def report(cluster: SimulatedCluster, node: str, info: nodeinfo.NodeInfo) -> None:
    """NodeD writes its report of ``node`` (mindx-dl/mindx-dl-nodeinfo-<node>), as
    Ascend/mind-cluster component/noded/pkg/reporter/cmreporter/configmap_reporter.go does."""
    body = {
        "metadata": {
            "name": nodeinfo.configmap_name(node),
            "namespace": nodeinfo.NAMESPACE,
            "labels": dict([nodeinfo.CONSUMER_LABEL]),
        },
        "data": nodeinfo.encode(info),
    }
    try:
        cluster.store.create_configmap(body)
    except KubeError:  # there already: replaced
        cluster.store.update_configmap(body)


CPU_FAULT = nodeinfo.DeviceFault("CPU", 0, ("00000011",), "SeparateFault")


def test_a_node_noded_reports_unhealthy_is_a_fault_node_and_its_job_restarts() -> None:
    with simulated_cluster(2, noded=True) as cluster:
        report(cluster, "node-00", nodeinfo.NodeInfo(nodeinfo.HEALTHY))
        scheduler = KubeScheduler(cluster)
        labels = {"fault-scheduling": "force"}
        for r in range(2):
            submit(cluster, f"train-{r}", 8, gang="train", size=2, labels=labels)
        nodes = place(cluster, scheduler, "train-0", "train-1")
        check_invariants(cluster, scheduler)
        assert set(nodes.values()) == {"node-00", "node-01"}
        # NodeD finds a CPU fault: node-00 is a fault node, as Huawei's Volcano plugin reads it.
        report(cluster, "node-00", nodeinfo.NodeInfo(nodeinfo.UNHEALTHY, (CPU_FAULT,)))
        assert wait_for(lambda: fault_nodes(cluster) == ["node-00"])
        assert wait_for(lambda: not pod_names(cluster) & {"train-0", "train-1"})
        cluster.reap()
        # node-00 is left out, naming NodeD's report, while it stands. (The verbs decide from
        # the cluster's pod: the probe is one, taken away before the scheduler runs.)
        probe = cluster.store.create_pod(pod_object("ns", "probe", None, 1))
        answer = cluster.service.extender.filter({"Pod": probe, "NodeNames": ["node-00"]})
        assert answer.FailedNodes["node-00"] == (
            "node-00: NodeD reports UnHealthy (CPU 0 00000011 SeparateFault)"
        )
        report(cluster, "node-00", nodeinfo.NodeInfo(nodeinfo.HEALTHY))  # repaired
        assert wait_for(
            lambda: (
                cluster.service.extender.filter({"Pod": probe, "NodeNames": ["node-00"]}).NodeNames
                == ["node-00"]
            )
        )
        cluster.store.delete_pod("ns", "probe", "", 0)
        for r in range(2):
            submit(cluster, f"train-{r}", 8, gang="train", size=2, labels=labels)
        nodes = place(cluster, scheduler, "train-0", "train-1")
        check_invariants(cluster, scheduler)
        assert set(nodes.values()) == {"node-00", "node-01"}


def test_without_noded_on_the_service_reads_no_nodeinfo() -> None:
    with simulated_cluster(1) as cluster:
        report(cluster, "node-00", nodeinfo.NodeInfo(nodeinfo.UNHEALTHY, (CPU_FAULT,)))
        probe = cluster.store.create_pod(pod_object("ns", "probe", None, 1))
        cluster.service.refresh()
        answer = cluster.service.extender.filter({"Pod": probe, "NodeNames": ["node-00"]})
        assert answer.NodeNames == ["node-00"]


def test_a_one_pod_job_labelled_fault_scheduling_restarts_off_its_faulty_chip() -> None:
    with simulated_cluster(1) as cluster:
        scheduler = KubeScheduler(cluster)
        submit(cluster, "solo-a", 2, labels={"fault-scheduling": "force"})
        place(cluster, scheduler, "solo-a")
        real = cluster.store.get_pod("ns", "solo-a")["metadata"]["annotations"]
        chips = [int(c.rsplit("-", 1)[1]) for c in real["huawei.com/AscendReal"].split(",")]
        node = cluster.nodes["node-00"]
        node.write_state(frozenset({chips[0]}))
        assert node.kubelet.wait_for(lambda: node.kubelet.allocatable("huawei.com/Ascend910") == 7)
        cluster.sync_node_status()
        assert wait_for(lambda: "solo-a" not in pod_names(cluster))
        assert wait_for(lambda: fault_nodes(cluster) == ["node-00"])
        cluster.reap()
        submit(cluster, "solo-b", 2, labels={"fault-scheduling": "force"})  # its controller
        place(cluster, scheduler, "solo-b")
        check_invariants(cluster, scheduler)
        again = cluster.store.get_pod("ns", "solo-b")["metadata"]["annotations"]
        assert f"Ascend910-{chips[0]}" not in again["huawei.com/AscendReal"]
        # Once its pod is gone the one-pod fault job is no longer recorded.
        assert wait_for(lambda: fault_nodes(cluster) == [])


def remaining(cluster: SimulatedCluster) -> dict[str, int] | None:
    try:
        data = cluster.store.get_configmap("volcano-system", "vcjob-fault-npu-cm")["data"]
    except KubeError:
        return None
    raw = json.loads(data.get("remain-retry-times", "{}"))
    return {job: entry["Times"] for job, entry in raw.items()}


def test_fault_retry_times_bounds_the_restarts_after_pod_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, "scheduler_core.service.state.fault_restarts")
    # A distributed job's pods take a whole server each: two servers, 8 chips a pod (a job of
    # two 4-chip pods on one server never ran, and the test failed a pod only pending).
    with simulated_cluster(2) as cluster:
        scheduler = KubeScheduler(cluster)

        def start(generation: int) -> None:
            for r in range(2):
                labels = {"fault-retry-times": "1"}
                uid = f"uid-job-{r}-{generation}"
                submit(cluster, f"job-{r}", 8, gang="job", size=2, labels=labels, uid=uid)
            place(cluster, scheduler, "job-0", "job-1")
            check_invariants(cluster, scheduler)

        start(0)
        cluster.fail("ns/job-0")  # the process of rank 0 exits with an error
        assert wait_for(lambda: not pod_names(cluster) & {"job-0", "job-1"})
        assert wait_for(lambda: remaining(cluster) == {"ns/job": 0})
        cluster.reap()
        start(1)  # the job controller creates the pods again (new UIDs)
        cluster.fail("ns/job-1")
        assert wait_for(lambda: "job ns/job has no restarts left" in caplog.text)
        assert {"job-0", "job-1"} <= pod_names(cluster)  # left as it is: no restart left


def test_a_grace_fault_job_is_evicted_with_its_grace_period_then_forced() -> None:
    with simulated_cluster(2, graceful=True, grace_over=5) as cluster:
        scheduler = KubeScheduler(cluster)
        for r in range(2):
            submit(
                cluster, f"train-{r}", 8, gang="train", size=2, labels={"fault-scheduling": "grace"}
            )
        nodes = place(cluster, scheduler, "train-0", "train-1")
        check_invariants(cluster, scheduler)
        cluster.nodes[nodes["train-1"]].write_state(frozenset({5}))
        # First every pod is asked to stop with its own grace period (30 s): its containers
        # ignore SIGTERM here, so the pods stay, terminating.
        both = [("ns/train-0", 30), ("ns/train-1", 30)]
        assert wait_for(lambda: cluster.store.terminating() == both)
        # Past grace-over-time (5 s from the fault) they are deleted at once.
        assert wait_for(lambda: not pod_names(cluster) & {"train-0", "train-1"})


# The job's own reset-config, as Huawei's samples make it.
RESET = {"reset.json": '{"status":"initializing"}', "checkCode": ""}


TRAIN = [f"train-{r}" for r in range(4)]


def submit_train_job(cluster: SimulatedCluster, labels: dict[str, str]) -> None:
    """A 4-pod job ``train`` with its reset-config, its pods ranked 0..3."""
    meta = {"namespace": "ns", "name": "reset-config-train", "labels": {"reset": "true"}}
    cluster.store.put("ConfigMap", {"metadata": meta, "data": RESET})
    for r in range(4):
        submit_ranked(cluster, r, labels, f"uid-{r}-0")


def submit_ranked(cluster: SimulatedCluster, rank: int, labels: dict[str, str], uid: str) -> None:
    submit(
        cluster,
        f"train-{rank}",
        8,
        gang="train",
        size=4,
        labels=labels,
        annotations={"hccl/rankIndex": str(rank)},
        uid=uid,
    )


def uids(cluster: SimulatedCluster) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.store.list_pods(None)[0]}


@pytest.mark.parametrize(
    "labels",
    [
        {"fault-scheduling": "force", "pod-rescheduling": "on"},
        {"fault-scheduling": "force", "process-recover-enable": "on"},
    ],
    ids=["pod-rescheduling", "process-recover"],
)
def test_a_chip_fault_moves_only_the_faulty_pod_the_others_keep_uid_rank_and_node(
    labels: dict[str, str],
) -> None:
    with simulated_cluster(5) as cluster:
        scheduler = KubeScheduler(cluster)
        submit_train_job(cluster, labels)
        before = place(cluster, scheduler, *TRAIN)
        check_invariants(cluster, scheduler)
        pod_level = "pod-rescheduling" in labels
        if pod_level:  # Volcano's update once the job is placed: RetryTime 0
            assert wait_for(lambda: retry_time(cluster) == 0)
        faulty = before["train-2"]
        cluster.nodes[faulty].write_state(frozenset({3}))
        assert wait_for(lambda: "train-2" not in pod_names(cluster))
        # The three healthy pods were never deleted: same UIDs, ranks and nodes.
        kept = {f"train-{r}": f"uid-{r}-0" for r in (0, 1, 3)}
        assert {n: u for n, u in uids(cluster).items() if n in kept} == kept
        cluster.reap()
        submit_ranked(cluster, 2, labels, "uid-2-1")  # its controller makes it again
        moved = place(cluster, scheduler, "train-2")["train-2"]
        check_invariants(cluster, scheduler)
        assert {n: u for n, u in uids(cluster).items() if n in kept} == kept
        assert {n: node_of(cluster, n) for n in kept} == {n: before[n] for n in kept}
        assert moved != faulty, "the faulty pod left the failed chip's node"
        if pod_level:  # only the faulty pod placed again: RetryTime + 1
            assert wait_for(lambda: retry_time(cluster) == 1)
            data = cluster.store.get_configmap("ns", "reset-config-train")["data"]
            assert data["restartType"] == "podReschedule"
        else:  # ClusterD owns a process-level job's reset-config
            assert cluster.store.get_configmap("ns", "reset-config-train")["data"] == RESET


def retry_time(cluster: SimulatedCluster) -> int | None:
    data = cluster.store.get_configmap("ns", "reset-config-train")["data"]
    retry = json.loads(data["reset.json"]).get("RetryTime")
    return retry if isinstance(retry, int) else None


def test_rank_0_failing_under_pod_rescheduling_restarts_the_whole_job() -> None:
    labels = {"fault-scheduling": "force", "pod-rescheduling": "on"}
    with simulated_cluster(5) as cluster:
        scheduler = KubeScheduler(cluster)
        for r in range(4):
            submit_ranked(cluster, r, labels, f"uid-{r}-0")
        nodes = place(cluster, scheduler, *TRAIN)
        cluster.nodes[nodes["train-0"]].write_state(frozenset({0}))
        assert wait_for(lambda: not pod_names(cluster) & {f"train-{r}" for r in range(4)})


def test_grace_exit_writes_graceful_exit_then_moves_the_pod_off_the_sub_healthy_node() -> None:
    labels = {
        "fault-scheduling": "force",
        "pod-rescheduling": "on",
        "subHealthyStrategy": "graceExit",
    }
    with simulated_cluster(5) as cluster:
        scheduler = KubeScheduler(cluster)
        submit_train_job(cluster, labels)
        sick = place(cluster, scheduler, *TRAIN)["train-3"]
        cluster.nodes[sick].write_state(frozenset(), codes={3: SUB_HEALTH_CODE})

        def graceful_exit() -> object:
            data = cluster.store.get_configmap("ns", "reset-config-train")["data"]
            return json.loads(data["reset.json"]).get("GracefulExit")

        assert wait_for(lambda: graceful_exit() == 1), "checkpoint and exit, as upstream"
        assert wait_for(lambda: "train-3" not in pod_names(cluster))
        kept = {f"train-{r}": f"uid-{r}-0" for r in range(3)}
        assert {n: u for n, u in uids(cluster).items() if n in kept} == kept
        cluster.reap()
        submit_ranked(cluster, 3, labels, "uid-3-1")
        moved = place(cluster, scheduler, "train-3")["train-3"]
        check_invariants(cluster, scheduler)
        assert moved != sick
        assert wait_for(lambda: graceful_exit() == 0), "placed off it: back to 0"
