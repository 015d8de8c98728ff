"""End to end on the simulated cluster: sub-healthy nodes, NodeD heartbeats, one-pod fault
jobs, ``fault-retry-times`` and the ``grace`` restart (agents, kubelets, the API server and
the scheduler service all running)."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest

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
from tests.e2e.helpers import check_invariants, fault_nodes, run, submit


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
    nodes = [f"node-0{i}" for i in range(4)]
    with simulated_cluster(4, super_pods=dict.fromkeys(nodes, 0)) as cluster:
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
        run(cluster, scheduler)
        check_invariants(cluster, scheduler)
        assert sorted(node_of(cluster, f"sp-{r}") for r in range(2)) == ["node-01", "node-02"]
        notes = cluster.store.get_pod("ns", "sp-0")["metadata"]["annotations"]
        assert (notes["super-pod-rank"], notes["super-pod-id"]) == ("0", "0")
        # Sub-health is never a refusal: a job of all four nodes takes node-00 too.
        for r in range(2):
            submit(cluster, f"all-{r}", 8, gang="all", size=2, annotations=SP, selector=SP_NODES)
        run(cluster, scheduler)
        check_invariants(cluster, scheduler)
        assert sorted(node_of(cluster, f"all-{r}") for r in range(2)) == ["node-00", "node-03"]


class NodeD:
    """NodeD on one node: writes its heartbeat annotation every ``interval`` / 3 seconds."""

    def __init__(self, cluster: SimulatedCluster, node: str, interval: int) -> None:
        self._cluster, self._node, self._interval = cluster, node, interval
        self._stop = threading.Event()
        self._beat()
        cluster.store.patch_metadata("Node", "", node, {"labels": {"nodeDEnable": "on"}})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        self._cluster.store.patch_metadata(
            "Node",
            "",
            self._node,
            {
                "annotations": {
                    "noded/heartbeat": str(int(time.time())),
                    "noded/heartbeat-interval": str(self._interval),
                }
            },
        )

    def _run(self) -> None:
        while not self._stop.wait(self._interval / 3):
            self._beat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def test_a_node_whose_noded_heartbeat_stops_is_a_fault_node_and_its_job_restarts() -> None:
    with simulated_cluster(2) as cluster:
        noded = NodeD(cluster, "node-00", interval=2)
        scheduler = KubeScheduler(cluster)
        labels = {"fault-scheduling": "force"}
        for r in range(2):
            submit(cluster, f"train-{r}", 8, gang="train", size=2, labels=labels)
        run(cluster, scheduler)
        check_invariants(cluster, scheduler)
        assert {node_of(cluster, f"train-{r}") for r in range(2)} == {"node-00", "node-01"}
        noded.stop()  # NodeD dies: three intervals later node-00 is down
        assert wait_for(lambda: fault_nodes(cluster) == ["node-00"])
        assert wait_for(lambda: not pod_names(cluster) & {"train-0", "train-1"})
        cluster.reap()
        # node-00 is left out while its heartbeat stays old; node-01 is held for the job.
        probe = pod_object("ns", "probe", None, 1)
        answer = cluster.service.extender.filter({"Pod": probe, "NodeNames": ["node-00"]})
        assert "NodeD heartbeat missed" in answer.FailedNodes["node-00"]
        noded = NodeD(cluster, "node-00", interval=2)  # NodeD is back: so is the node
        for r in range(2):
            submit(cluster, f"train-{r}", 8, gang="train", size=2, labels=labels)
        assert wait_for(
            lambda: (
                cluster.service.extender.filter({"Pod": probe, "NodeNames": ["node-00"]}).NodeNames
                == ["node-00"]
            )
        )
        run(cluster, scheduler)
        check_invariants(cluster, scheduler)
        assert {node_of(cluster, f"train-{r}") for r in range(2)} == {"node-00", "node-01"}
        noded.stop()


def test_a_one_pod_job_labelled_fault_scheduling_restarts_off_its_faulty_chip() -> None:
    with simulated_cluster(1) as cluster:
        scheduler = KubeScheduler(cluster)
        submit(cluster, "solo-a", 2, labels={"fault-scheduling": "force"})
        run(cluster, scheduler)
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
        cluster.service.refresh()
        run(cluster, scheduler)
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
    caplog.set_level(logging.WARNING, "scheduler_core.service.fault_restarts")
    with simulated_cluster(1) as cluster:
        scheduler = KubeScheduler(cluster)

        def start(generation: int) -> None:
            for r in range(2):
                labels = {"fault-retry-times": "1"}
                uid = f"uid-job-{r}-{generation}"
                submit(cluster, f"job-{r}", 4, gang="job", size=2, labels=labels, uid=uid)
            run(cluster, scheduler)
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
        run(cluster, scheduler)
        check_invariants(cluster, scheduler)
        cluster.nodes[node_of(cluster, "train-1")].write_state(frozenset({5}))
        # First every pod is asked to stop with its own grace period (30 s): its containers
        # ignore SIGTERM here, so the pods stay, terminating.
        both = [("ns/train-0", 30), ("ns/train-1", 30)]
        assert wait_for(lambda: cluster.store.terminating() == both)
        # Past grace-over-time (5 s from the fault) they are deleted at once.
        assert wait_for(lambda: not pod_names(cluster) & {"train-0", "train-1"})
