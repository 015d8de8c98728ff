"""End to end: pods go from creation to a container's environment in a simulated cluster
(loopback API server, agents over the official client, kubelet simulators over real
sockets, the scheduler service over HTTP driven as kube-scheduler drives it)."""

from __future__ import annotations

import gc
import os
import time

from contract.deviceinfo import decode
from simulation.cluster import simulated_cluster, tor_configmap, wait_for
from simulation.kube_scheduler import KubeScheduler
from simulation.volcano import VolcanoScheduler
from tests.e2e.helpers import check_invariants, place, ranks, restart_after_fault, run, submit


def test_mixed_jobs_fill_a_cluster_and_every_container_gets_its_pods_chips() -> None:
    with simulated_cluster(6) as cluster:
        scheduler = KubeScheduler(cluster)
        sizes = [1, 2, 4, 1, 8, 2, 1, 4, 2, 1, 1, 2]
        for i, npu in enumerate(sizes):
            submit(cluster, f"p{i:02d}", npu)
        submit(cluster, "g-0", 8, gang="g", size=2)
        submit(cluster, "g-1", 8, gang="g", size=2)
        place(cluster, scheduler, *(f"p{i:02d}" for i in range(len(sizes))), "g-0", "g-1")
        check_invariants(cluster, scheduler)
        assert len(cluster.admitted) == len(sizes) + 2


def test_two_hundred_pods_at_once_on_twenty_five_nodes() -> None:
    with simulated_cluster(25) as cluster:
        scheduler = KubeScheduler(cluster)
        sizes = [1, 1, 1, 1, 2, 1, 4, 1]
        for i in range(200):
            submit(cluster, f"p{i:03d}", sizes[i % len(sizes)])
        cluster.service.refresh()
        start = time.perf_counter()
        run(cluster, scheduler)
        assert time.perf_counter() - start < 600
        check_invariants(cluster, scheduler)
        used = sum(len(a.allocation.device_ids) for a in cluster.admitted.values())
        assert used == 200 or scheduler.pending(), (
            "the cluster is full, or someone waits with a reason"
        )
        assert len(cluster.admitted) >= 120


def test_a_chip_failing_while_pods_run_is_avoided_by_new_pods() -> None:
    with simulated_cluster(1) as cluster:
        scheduler = KubeScheduler(cluster)
        submit(cluster, "running", 2)
        place(cluster, scheduler, "running")
        node = cluster.nodes["node-00"]
        node.write_state(frozenset({3}))
        assert node.kubelet.wait_for(lambda: node.kubelet.allocatable("huawei.com/Ascend910") == 7)
        cluster.sync_node_status()

        def published_unhealthy() -> bool:
            data = cluster.store.get_configmap("kube-system", "mindx-dl-deviceinfo-node-00")["data"]
            return 3 in decode(data).unhealthy

        assert wait_for(published_unhealthy), "the agent republishes DeviceInfo on a health change"
        for i in range(5):
            submit(cluster, f"after-{i}", 1)
        place(cluster, scheduler, *(f"after-{i}" for i in range(5)))
        check_invariants(cluster, scheduler)
        given = [
            a.allocation.response.envs["ASCEND_VISIBLE_DEVICES"] for a in cluster.admitted.values()
        ]
        assert all("3" not in v.split(",") for v in given[1:]), given


def test_a_node_agent_restarting_keeps_scheduling_right() -> None:
    with simulated_cluster(2) as cluster:
        scheduler = KubeScheduler(cluster)
        for i in range(4):
            submit(cluster, f"before-{i}", 2)
        place(cluster, scheduler, *(f"before-{i}" for i in range(4)))
        cluster.restart_node_agent("node-00")
        assert cluster.nodes["node-00"].agent.plugin.wait_registered(10)
        assert cluster.wait_published(), "the restarted agent publishes its DeviceInfo again"
        for i in range(4):
            submit(cluster, f"after-{i}", 2)
        place(cluster, scheduler, *(f"after-{i}" for i in range(4)))
        check_invariants(cluster, scheduler)
        assert len(cluster.admitted) == 8


def test_a_deleted_pod_frees_its_chips_for_the_next_one() -> None:
    with simulated_cluster(1) as cluster:
        scheduler = KubeScheduler(cluster)
        submit(cluster, "big", 8)
        place(cluster, scheduler, "big")
        submit(cluster, "next", 4)
        run(cluster, scheduler)
        assert "ns/next" not in cluster.admitted
        # kube-scheduler's own NodeResourcesFit refuses the full node before the extender
        assert scheduler.reasons["ns/next"]["node-00"] == "Insufficient huawei.com/Ascend910"
        cluster.finish("ns/big", delete=True)
        assert wait_for(lambda: cluster.published_free("node-00") == 8)
        place(cluster, scheduler, "next")
        check_invariants(cluster, scheduler)


def test_a_pod_made_again_under_its_name_is_a_new_pod_to_its_kubelet() -> None:
    # Deleted and made again by its controller (a new UID) before the kubelet looked: the
    # old container goes with its chips and the new pod is admitted (the robustness run's
    # seed 44, where the old container stayed "running" under the new pod's name).
    with simulated_cluster(1) as cluster:
        scheduler = KubeScheduler(cluster)
        submit(cluster, "job-0", 8)
        place(cluster, scheduler, "job-0")
        cluster.store.delete("Pod", "ns", "job-0")
        submit(cluster, "job-0", 8, uid="uid-made-again")
        assert cluster.reap() == ["ns/job-0"]
        assert wait_for(lambda: cluster.published_free("node-00") == 8)
        place(cluster, scheduler, "job-0")
        check_invariants(cluster, scheduler)
        assert cluster.admitted["ns/job-0"].uid == "uid-made-again"


def test_a_tor_affine_job_restarts_after_a_chip_fault_and_only_the_faulty_rank_moves() -> None:
    # Two ToRs of 4 (node-00..03, node-04..07). Six pods, large-model-schema: the two whole
    # ToRs are not more than row + 1 = 2, so logical ToRs: ToR 0 whole + node-04, node-05.
    with simulated_cluster(8) as cluster:
        cluster.store.put("ConfigMap", tor_configmap(nodes=8, per_tor=4))
        cluster.service.refresh()
        scheduler = KubeScheduler(cluster)
        labels = {"tor-affinity": "large-model-schema", "fault-scheduling": "force"}
        for r in range(6):
            submit(cluster, f"train-{r}", 8, gang="train", size=6, labels=labels)
        place(cluster, scheduler, *(f"train-{r}" for r in range(6)))
        check_invariants(cluster, scheduler)
        first = ranks(cluster, "train", 6)
        assert sorted(first.values()) == [f"node-0{i}" for i in range(6)]
        assert [first[r] for r in range(6)] == [f"node-0{i}" for i in range(6)]

        faulty = first[5]
        # The service's refresh loop sees the fault, deletes the pods and records the fault.
        restart_after_fault(cluster, faulty, 6)
        assert not any(k.startswith("ns/train-") for k in cluster.admitted)
        # The agents publish the chips free again (chip 2 of the faulty node stays out).
        expected = {f"node-0{i}": 7 if i == 5 else 8 for i in range(6)}
        assert wait_for(lambda: {n: cluster.published_free(n) for n in expected} == expected)
        for r in range(6):  # the job controller recreates its pods
            submit(cluster, f"train-{r}", 8, gang="train", size=6, labels=labels)
        place(cluster, scheduler, *(f"train-{r}" for r in range(6)))
        check_invariants(cluster, scheduler)
        second = ranks(cluster, "train", 6)
        assert {r: second[r] for r in range(5)} == {r: first[r] for r in range(5)}
        assert second[5] == "node-06"  # the job's own ToR 1 first, best score then name


def test_nodes_run_the_agents_own_wiring_with_the_label_and_the_repair_loop() -> None:
    """Each simulated node is built by the agent's builder, as a real node: the agent labels
    its node, and a pod whose chip records were lost gets them back from PodResources."""
    with simulated_cluster(1) as cluster:
        assert cluster.store.get_node("node-00")["metadata"]["labels"]["servertype"] == (
            "Ascend910-32"
        )
        submit(cluster, "p", 2)
        place(cluster, KubeScheduler(cluster), "p")
        pod = cluster.store.get_pod("ns", "p")
        records = {k: pod["metadata"]["annotations"].pop(k) for k in RECORDS}
        cluster.store.put("Pod", pod)

        def repaired() -> bool:
            annotations = cluster.store.get_pod("ns", "p")["metadata"]["annotations"]
            return {k: annotations.get(k) for k in RECORDS} == records

        assert wait_for(repaired), "the repair loop writes the records again"


RECORDS = (
    "huawei.com/AscendReal",
    "huawei.com/kltDev",
    "ascend.kubectl.kubernetes.io/ascend-910-configuration",
)


def open_sockets() -> int:
    """The sockets this process holds open."""
    found = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            found += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue  # closed meanwhile
    return found


def test_a_cluster_and_its_callers_leave_no_socket_open_behind_them() -> None:
    """Once a cluster has stopped, the process holds no more sockets than before: its API
    clients (agents', the service's) and its callers' kept-alive connections are closed
    with it (a whole e2e run once held 673, each half closed once its server had gone)."""
    gc.collect()
    before = open_sockets()
    with simulated_cluster(3) as cluster:
        scheduler, volcano = KubeScheduler(cluster), VolcanoScheduler(cluster)
        submit(cluster, "a", 8)
        submit(cluster, "g-0", 8, gang="g", size=2, scheduler="volcano")
        submit(cluster, "g-1", 8, gang="g", size=2, scheduler="volcano")
        place(cluster, scheduler, "a")
        place(cluster, volcano, "g-0", "g-1")
        cluster.restart_node_agent("node-00")
        assert cluster.wait_published()
        scheduler.close()
        volcano.close()
    assert wait_for(lambda: open_sockets() <= before), (open_sockets(), before)
