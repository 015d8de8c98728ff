"""End to end on the simulated cluster, faults that move a job later or not at all: a job that
silences a fault level (``huawei.com/schedule.filter.faultLevel``, MindCluster docs api/k8s.md
Table 3; ClusterD's custom_filter_fault_processor.go) keeps running on it for the window, then
restarts, where a job without the annotation restarts at once; a link down for less than 20 s
(Huawei's faultCustomization.json, 81078603) moves nothing."""

from __future__ import annotations

import time

from contract.deviceinfo import configmap_name, decode
from simulation.cluster import SimulatedCluster, simulated_cluster, wait_for
from simulation.kube_scheduler import KubeScheduler
from tests.e2e.helpers import place, submit

RESTART_REQUEST = "80C98008"  # RestartRequest in Huawei's faultCode.json
WINDOW = 4  # seconds: short enough for a test, the mechanism is the 60 s default's


def chips_of(cluster: SimulatedCluster, pod: str) -> list[int]:
    real = cluster.store.get_pod("ns", pod)["metadata"]["annotations"]["huawei.com/AscendReal"]
    return [int(c.rsplit("-", 1)[1]) for c in real.split(",")]


def alive(cluster: SimulatedCluster, pod: str) -> bool:
    return any(p["metadata"]["name"] == pod for p in cluster.store.list_pods(None)[0])


def fault_published(cluster: SimulatedCluster, node: str, chip: int) -> bool:
    data = cluster.store.get_configmap("kube-system", configmap_name(node))["data"]
    return any(f.chip == chip and f.level == "RestartRequest" for f in decode(data).faults)


def test_a_silenced_restart_request_moves_the_pod_only_after_its_window() -> None:
    silence = {"huawei.com/schedule.filter.faultLevel": f"RestartRequest:{WINDOW}"}
    with simulated_cluster(2) as cluster:
        scheduler = KubeScheduler(cluster)
        force = {"fault-scheduling": "force"}
        submit(cluster, "quiet", 2, labels=force, annotations=silence)
        submit(cluster, "loud", 2, labels=force)
        faulty: dict[str, dict[int, str]] = {}  # node → chip → code: one state per node
        for pod, node in place(cluster, scheduler, "quiet", "loud").items():
            faulty.setdefault(node, {})[chips_of(cluster, pod)[0]] = RESTART_REQUEST
        written = time.time()  # the agents see the faults after this: their fault time
        for node, codes in faulty.items():
            cluster.nodes[node].write_state(frozenset(codes), codes=codes)
        assert wait_for(
            lambda: all(fault_published(cluster, n, c) for n, cs in faulty.items() for c in cs)
        )
        # The job that silences nothing restarts; the silenced one only once its window is over.
        assert wait_for(lambda: not alive(cluster, "loud"))
        assert wait_for(lambda: not alive(cluster, "quiet"), timeout=WINDOW + 30)
        assert time.time() >= written + WINDOW


def network_entry(cluster: SimulatedCluster, node: str, chip: int) -> str | None:
    """The level of the chip's network fault entry in the node's DeviceInfo (None: none)."""
    data = cluster.store.get_configmap("kube-system", configmap_name(node))["data"]
    info = decode(data)
    assert chip not in info.network_unhealthy, "listed network-unhealthy before 20 s"
    return next((f.level for f in info.faults if f.chip == chip and f.network), None)


def test_a_link_down_shorter_than_20_s_moves_nothing() -> None:
    with simulated_cluster(2) as cluster:
        scheduler = KubeScheduler(cluster)
        force = {"fault-scheduling": "force"}
        submit(cluster, "steady", 8, labels=force)
        submit(cluster, "hit", 8, labels=force)
        node_of = place(cluster, scheduler, "steady", "hit")
        uid = cluster.store.get_pod("ns", "steady")["metadata"]["uid"]
        steady = cluster.nodes[node_of["steady"]]
        steady.write_state(frozenset(), link_down={3})
        assert wait_for(lambda: network_entry(cluster, node_of["steady"], 3) == "NotHandleFault")
        # A chip failing outright under the other job afterwards: once the scheduler has acted
        # on that, it has read the link-down before it (one watch, in order).
        cluster.nodes[node_of["hit"]].write_state(frozenset({5}))
        assert wait_for(lambda: not alive(cluster, "hit"))
        assert cluster.store.get_pod("ns", "steady")["metadata"]["uid"] == uid
        steady.write_state(frozenset())  # up again well within 20 s
        assert wait_for(lambda: network_entry(cluster, node_of["steady"], 3) is None)
        assert cluster.store.get_pod("ns", "steady")["metadata"]["uid"] == uid
