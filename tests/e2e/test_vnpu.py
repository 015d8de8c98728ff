"""End to end, dynamic vNPU: npu-core pods on a 310P or 910B node of the simulated cluster (its
agent in dynamic-vNPU mode on the fake driver, the kubelet simulator over real sockets, the
scheduler service over HTTP driven as kube-scheduler, or Volcano, drives it)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
import yaml

from contract.vnpu import CHIP_NAME_LABEL, TEMPLATES_310P, parse_core_choice, parse_virtual_name
from simulation.cluster import SimulatedCluster, simulated_cluster, wait_for
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import pod_object
from simulation.volcano import SCHEDULER_NAME as VOLCANO
from simulation.volcano import VolcanoScheduler
from tests.e2e.helpers import PLACEMENT, place, run

NPU_CORE = "huawei.com/npu-core"
NODE = "infer-00"


B3_NODE = "vnpu-910b-00"


def submit(
    cluster: SimulatedCluster,
    name: str,
    cores: int,
    labels: dict[str, str] | None = None,
    scheduler: str | None = None,
) -> None:
    pod = pod_object("ns", name, None, cores, resource=NPU_CORE, labels=labels)
    if scheduler is not None:
        pod["spec"]["schedulerName"] = scheduler
    cluster.store.put("Pod", pod)


def driver_state(cluster: SimulatedCluster, node: str = NODE) -> dict[str, Any]:
    path = cluster.nodes[node].home / "state.yaml"
    state: dict[str, Any] = yaml.safe_load(path.read_text())
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
        placed: list[str] = []

        def eight_placed() -> bool:  # a node cuts one vNPU at a time: a round may bind none
            run(cluster, scheduler)
            placed[:] = [k for k in cluster.admitted if k.startswith("ns/v")]
            return len(placed) >= 8

        assert wait_for(eight_placed, timeout=PLACEMENT, step=0.05), placed
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


@pytest.mark.parametrize("caller", ["kube-scheduler", "volcano"])
def test_a_910b_vnpu_is_cut_for_its_container_and_destroyed_once_the_pod_is_gone(
    caller: str,
) -> None:
    """The agent labels its 910B3 node with the chip name (which picks the node's templates
    in the scheduler); a 10-core task of an ``ascend-910b`` job gets vir10_3c_32g cut on the
    chip the scheduler chose, its container sees that vNPU; a 20-core task a whole chip; the
    310P node is not for them. Once the pods are gone, the vNPU is destroyed."""
    with simulated_cluster(0, vnpu_nodes=1, vnpu_910b_nodes=1) as cluster:
        labels = cluster.store.get_node(B3_NODE)["metadata"]["labels"]
        assert (labels["servertype"], labels[CHIP_NAME_LABEL]) == ("Ascend910B-20", "910B3")
        ring = {"ring-controller.atlas": "ascend-910b"}
        scheduler = None if caller == "kube-scheduler" else VOLCANO
        submit(cluster, "cut", 10, ring, scheduler)
        submit(cluster, "whole", 20, ring, scheduler)
        by = KubeScheduler(cluster) if caller == "kube-scheduler" else VolcanoScheduler(cluster)
        place(cluster, by, "cut", "whole")
        assert {k: a.node for k, a in cluster.admitted.items()} == {
            "ns/cut": B3_NODE,
            "ns/whole": B3_NODE,
        }
        notes = cluster.store.get_pod("ns", "cut")["metadata"]["annotations"]
        chosen = parse_core_choice(notes[NPU_CORE])
        assert chosen.template == "vir10_3c_32g"
        real = parse_virtual_name(notes["huawei.com/AscendReal"])
        (vnpu,) = driver_state(cluster, B3_NODE)["vnpus"]
        assert (vnpu["chip"], vnpu["template"]) == (chosen.chips[0], "vir10_3c_32g")
        assert (real.phy, real.vdev) == (chosen.chips[0], vnpu["id"])
        envs = cluster.admitted["ns/cut"].allocation.response.envs
        assert envs["ASCEND_VISIBLE_DEVICES"] == str(vnpu["id"])
        whole = parse_core_choice(
            cluster.store.get_pod("ns", "whole")["metadata"]["annotations"][NPU_CORE]
        )
        assert whole.template is None and whole.chips[0] != chosen.chips[0]
        whole_envs = cluster.admitted["ns/whole"].allocation.response.envs
        assert whole_envs["ASCEND_VISIBLE_DEVICES"] == str(whole.chips[0])
        assert not driver_state(cluster).get("vnpus"), "nothing cut on the 310P node"
        cluster.finish("ns/cut", delete=True)
        assert wait_for(lambda: not driver_state(cluster, B3_NODE).get("vnpus"), timeout=30)
