"""With useClusterInfoManager the service reads faults from ClusterD's cluster-info-*
ConfigMaps (watched in mindx-dl by their label), as Huawei's Volcano plugin does; without it
from the DeviceInfo ConfigMaps. A fault only ClusterD knows (a public fault) keeps pods off
its chip exactly when the switch is on."""

from __future__ import annotations

from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.cluster import wait_for
from simulation.memory import MemoryCluster, pod_object
from tests.clusterd_maps import device_entry, devices, nodes, public_fault
from tests.integration.test_extender import Clock, add_node


def service(api: MemoryCluster, clusterd: bool) -> SchedulerService:
    clock = Clock()
    return SchedulerService(
        api, Extender(api, clock=clock), clock=clock, refresh_period=3600, clusterd=clusterd
    )


def cluster() -> MemoryCluster:
    api = MemoryCluster(history=30, bookmark_seconds=0.05)
    add_node(api, "n0")  # its agent's DeviceInfo: all 8 chips healthy
    add_node(api, "n1")
    # ClusterD: a public fault on n0's chip 3, which the agent does not know.
    api.put("ConfigMap", devices(0, device_entry("n0", {3}, [public_fault(3)]), device_entry("n1")))
    for name, npu in (("ask", 8), ("one", 1)):  # the pods asked about exist
        api.put("Pod", pod_object("q", name, None, npu))
    return api


def eight(svc: SchedulerService, node: str) -> list[str]:
    asking = pod_object("q", "ask", None, 8)
    return list(svc.extender.filter({"Pod": asking, "NodeNames": [node]}).NodeNames or [])


def test_a_fault_only_clusterd_has_keeps_pods_off_its_chip_with_the_switch_on() -> None:
    api = cluster()
    svc = service(api, clusterd=True)
    svc.start()
    try:
        assert wait_for(lambda: eight(svc, "n1") == ["n1"]), "n1 is read from ClusterD"
        assert eight(svc, "n0") == [], "chip 3 is faulty in ClusterD's view: 8 chips do not fit"
        one = pod_object("q", "one", None, 1)
        assert svc.extender.filter({"Pod": one, "NodeNames": ["n0"]}).NodeNames == ["n0"]
        # The fault recovers in ClusterD: the node is whole again, through the watch alone.
        api.put("ConfigMap", devices(0, device_entry("n0"), device_entry("n1")))
        assert wait_for(lambda: eight(svc, "n0") == ["n0"])
        # NodeD's report as ClusterD sums it: UnHealthy leaves the node out.
        api.put("ConfigMap", nodes({"n1": ("UnHealthy", [])}))
        assert wait_for(lambda: eight(svc, "n1") == [])
        # Malformed content: the last good one stays in force.
        bad = devices(0, device_entry("n0"))
        bad["data"] = {"cluster-info-device-0": "{garbled"}
        api.put("ConfigMap", bad)
        api.put("ConfigMap", nodes({}))
        assert wait_for(lambda: eight(svc, "n1") == ["n1"])
        assert eight(svc, "n0") == ["n0"]
    finally:
        svc.stop()


def test_without_the_switch_clusterds_configmaps_are_not_read() -> None:
    api = cluster()
    svc = service(api, clusterd=False)
    svc.start()
    try:
        assert wait_for(lambda: eight(svc, "n1") == ["n1"])
        assert eight(svc, "n0") == ["n0"], "the agent's DeviceInfo says all 8 are healthy"
    finally:
        svc.stop()
