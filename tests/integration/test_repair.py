"""Missing chip records are repaired from the kubelet's PodResources."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.device_plugin import DevicePlugin
from agent.deviceinfo_publisher import DeviceInfoPublisher
from agent.pod_cache import PodCache
from agent.repair import RepairLoop, kubelet_devices, repairs
from chip_drivers.chips import Chip, NodeChips
from chip_drivers.fake import FakeDriver
from chip_drivers.state import DeviceState
from contract.annotations import CONSUMED
from contract.deviceinfo import decode
from contract.pods import PodView
from simulation.cluster import state_file
from simulation.kubelet import KubeletSimulator
from simulation.memory import MemoryCluster, pod_object
from tests.integration.conftest import RESOURCE

NODE = NodeChips("Ascend910", "module910x8", tuple(Chip(i, i, ip=f"10.0.0.{i}") for i in range(8)))


def pod(name: str, annotations: dict[str, str], phase: str = "Running") -> PodView:
    return PodView("ns", name, phase=phase, npu_limit=2, annotations=annotations)


def test_only_live_pods_holding_devices_without_a_record_are_repaired() -> None:
    pods = [
        pod(
            "by-other-plugin",
            {"huawei.com/Ascend910": "Ascend910-4,Ascend910-5", "predicate-time": CONSUMED},
        ),
        pod("kubelet-choice", {}),
        pod("pending", {"huawei.com/Ascend910": "Ascend910-6,Ascend910-7", "predicate-time": "9"}),
        pod("recorded", {"huawei.com/AscendReal": "Ascend910-0,Ascend910-1"}),
        pod("finished", {}, phase="Succeeded"),
    ]
    devices = {f"ns/{p.name}": ["Ascend910-2", "Ascend910-3"] for p in pods}
    found = {r.pod.name: r.annotations for r in repairs(pods, devices, NODE, "192.168.0.1")}
    assert set(found) == {"by-other-plugin", "kubelet-choice"}
    assert found["by-other-plugin"]["huawei.com/AscendReal"] == "Ascend910-4,Ascend910-5"
    assert found["by-other-plugin"]["huawei.com/kltDev"] == "Ascend910-2,Ascend910-3"
    assert found["kubelet-choice"]["huawei.com/AscendReal"] == "Ascend910-2,Ascend910-3"
    assert (
        '"device_id":"2"'
        in found["kubelet-choice"]["ascend.kubectl.kubernetes.io/ascend-910-configuration"]
    )


@pytest.fixture
def node(short_dir: Path) -> Iterator[tuple[MemoryCluster, KubeletSimulator, PodCache, Path]]:
    (short_dir / "state.yaml").write_text(state_file())
    api = MemoryCluster()
    kubelet = KubeletSimulator(short_dir / "plugins", short_dir / "podres.sock")
    kubelet.start()
    agent = DevicePlugin(
        FakeDriver(short_dir / "state.yaml"), short_dir / "plugins", ascend_runtime=True
    )
    agent.start()
    assert kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 8)
    cache = PodCache(api, "n1")
    yield api, kubelet, cache, short_dir / "podres.sock"
    agent.stop()
    kubelet.close()


def test_with_the_kubelets_choice_the_records_come_from_pod_resources(
    node: tuple[MemoryCluster, KubeletSimulator, PodCache, Path],
) -> None:
    api, kubelet, cache, socket = node
    api.put("Pod", pod_object("ns", "p", "n1", 3, phase="Running"))
    allocation = kubelet.allocate("ns/p", "main", RESOURCE, 3)
    assert kubelet_devices(socket) == {"ns/p": list(allocation.device_ids)}
    cache.resync()
    publisher = DeviceInfoPublisher(
        api,
        "n1",
        state=DeviceState(NODE),
        cache=cache,
        period=5,
        extra_held=lambda: {int(d.rsplit("-", 1)[1]) for d in allocation.device_ids},
    )
    publisher.publish_once()
    free = decode(api.get_configmap("kube-system", "mindx-dl-deviceinfo-n1")["data"]).free
    assert free.isdisjoint(int(d.rsplit("-", 1)[1]) for d in allocation.device_ids)
    loop = RepairLoop(api, cache, node=lambda: NODE, host_ip=lambda: "", socket=socket)
    assert loop.run_once() == 1
    written = api.get_pod("ns", "p")["metadata"]["annotations"]
    assert written["huawei.com/AscendReal"] == ",".join(allocation.device_ids)
    assert loop.run_once() == 0, "a repaired pod is left alone"


def test_without_pod_resources_nothing_is_repaired(
    node: tuple[MemoryCluster, KubeletSimulator, PodCache, Path],
) -> None:
    api, _, cache, socket = node
    cache.resync()
    loop = RepairLoop(
        api, cache, node=lambda: NODE, host_ip=lambda: "", socket=socket.with_name("none.sock")
    )
    assert loop.run_once() == 0
