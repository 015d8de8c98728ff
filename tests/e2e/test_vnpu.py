"""End to end, dynamic vNPU: npu-core pods on a 310P node of the simulated cluster (its
agent in dynamic-vNPU mode on the fake driver, the kubelet simulator over real sockets, the
scheduler service over HTTP driven as kube-scheduler drives it)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import yaml

from contract.vnpu import TEMPLATES_310P, parse_core_choice, parse_virtual_name
from simulation.cluster import SimulatedCluster, simulated_cluster, wait_for
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import pod_object
from tests.e2e.helpers import run

NPU_CORE = "huawei.com/npu-core"
NODE = "infer-00"


def submit(cluster: SimulatedCluster, name: str, cores: int) -> None:
    cluster.store.put("Pod", pod_object("ns", name, None, cores, resource=NPU_CORE))


def driver_state(cluster: SimulatedCluster) -> dict[str, Any]:
    state: dict[str, Any] = yaml.safe_load((cluster.nodes[NODE].home / "state.yaml").read_text())
    return state


def test_vnpus_never_share_an_ai_core_and_are_destroyed_once_their_pods_are_gone() -> None:
    """Seeded waves of vNPU pods: while they run, the vNPUs the driver holds never take more
    AI cores than a chip has, each container runs on the chip the scheduler chose; once the
    pods end, every vNPU is destroyed."""
    rng = random.Random(3)
    with simulated_cluster(1, vnpu_nodes=1) as cluster:
        scheduler = KubeScheduler(cluster)
        cores = [rng.choice([1, 2, 2, 4]) for _ in range(14)]
        for i, n in enumerate(cores):
            submit(cluster, f"v{i:02d}", n)
        cluster.service.refresh()
        run(cluster, scheduler)
        placed = [k for k in cluster.admitted if k.startswith("ns/v")]
        assert len(placed) >= 8, placed
        used: Counter[int] = Counter()
        for vnpu in driver_state(cluster)["vnpus"]:
            used[vnpu["chip"]] += TEMPLATES_310P[vnpu["template"]].cores
        assert max(used.values()) <= 8, used
        for key in placed:
            notes = cluster.store.get_pod(*key.split("/"))["metadata"]["annotations"]
            chosen = parse_core_choice(notes[NPU_CORE])
            real = parse_virtual_name(notes["huawei.com/AscendReal"])
            visible = cluster.admitted[key].allocation.response.envs["ASCEND_VISIBLE_DEVICES"]
            assert (real.phy, str(real.vdev)) == (chosen.chips[0], visible), key
        for key in placed:
            cluster.finish(key, delete=True)
        assert wait_for(lambda: not driver_state(cluster).get("vnpus"), timeout=30)


def test_a_pod_whose_chip_fails_before_allocate_is_deleted_for_its_controller() -> None:
    """The scheduler gives a pod a whole chip; the chip fails before the kubelet admits the
    pod; the agent refuses (NoNPUResource), the kubelet fails the pod, and the scheduler
    deletes it with a chipDyCutErr Event."""
    with simulated_cluster(1, vnpu_nodes=1) as cluster:
        scheduler = KubeScheduler(cluster)
        submit(cluster, "whole", 8)
        cluster.service.refresh()
        assert scheduler.cycle() == 1
        notes = cluster.store.get_pod("ns", "whole")["metadata"]["annotations"]
        chip = parse_core_choice(notes[NPU_CORE]).chips[0]
        state = driver_state(cluster)
        state["chips"][chip]["health"] = "Unhealthy"
        path = cluster.nodes[NODE].home / "state.yaml"
        partial = path.with_name("state.tmp")
        partial.write_text(yaml.safe_dump(state))
        partial.replace(path)
        kubelet = cluster.nodes[NODE].kubelet
        assert kubelet.wait_for(lambda: kubelet.allocatable(NPU_CORE) == 3 * 8)
        cluster.admit()
        assert "NoNPUResource" in cluster.refused["ns/whole"]

        def deleted() -> bool:
            pods, _ = cluster.store.list_pods(None)
            return all(p["metadata"]["name"] != "whole" for p in pods)

        assert wait_for(deleted, timeout=20)
        assert wait_for(
            lambda: any(e["reason"] == "chipDyCutErr" for e in cluster.store.events), timeout=20
        )
