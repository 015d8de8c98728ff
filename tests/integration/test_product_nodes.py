"""An Atlas A3 node (16 chips in dies of two) and an Ascend 950 node (``huawei.com/npu``):
the agent registers, lists and hands out their chips over real gRPC unix sockets, reading
the scheduler's choice from the pod annotation, and publishes Huawei's DeviceInfo keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.allocation.handshake import ChipHandshake
from agent.device_plugin import DevicePlugin
from agent.deviceinfo_publisher import device_info
from agent.pod_cache import PodCache
from chip_drivers.fake import FakeDriver
from contract.deviceinfo import DATA_KEY, encode
from simulation.kubelet import KubeletSimulator
from simulation.memory import MemoryCluster, pod_object

NODE = "node-1"
NPU = "huawei.com/npu"
ASCEND910 = "huawei.com/Ascend910"
A3 = "product: module910a3x16\nsuper_pod_id: 2\nserver_index: 5\nchips:\n" + "".join(
    f"  - {{id: {i}, ip: 10.0.0.{i + 10}, super_device_id: {80 + i}}}\n" for i in range(16)
)
A5 = "chip_type: npu\nai_cores: 32\nchips:\n" + "".join(
    f"  - {{id: {i}, ip: 10.0.1.{i + 10}{', health: Unhealthy' if i == 7 else ''}}}\n"
    for i in range(8)
)


@dataclass
class Node:
    api: MemoryCluster
    kubelet: KubeletSimulator
    driver: FakeDriver

    def bind(self, name: str, resource: str, chips: str) -> None:
        annotations = {resource: chips, "predicate-time": "100"}
        count = len(chips.split(","))
        pod = pod_object("ns", name, NODE, count, annotations=annotations, resource=resource)
        self.api.put("Pod", pod)

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.api.get_pod("ns", name)["metadata"]["annotations"])


def running(directory: Path, state: str, resource: str, listed: int) -> Iterator[Node]:
    path = directory / "state.yaml"
    path.write_text(state)
    api = MemoryCluster()
    api.put(
        "Node",
        {
            "metadata": {"name": NODE},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.10.11"}]},
        },
    )
    kubelet = KubeletSimulator(directory / "plugins")
    kubelet.start()
    cache = PodCache(api, NODE)
    cache.start()
    driver = FakeDriver(path)
    allocator = ChipHandshake(api, cache, lambda: "192.168.10.11", wait_for_pod=0.5)
    agent = DevicePlugin(driver, directory / "plugins", ascend_runtime=True, allocator=allocator)
    agent.start()
    try:
        assert agent.wait_registered(30)
        assert kubelet.wait_for(lambda: len(kubelet.devices(resource)) == listed)
        yield Node(api, kubelet, driver)
    finally:
        agent.stop()
        cache.stop()
        kubelet.close()


@pytest.fixture
def a3(short_dir: Path) -> Iterator[Node]:
    yield from running(short_dir, A3, ASCEND910, 16)


@pytest.fixture
def a5(short_dir: Path) -> Iterator[Node]:
    yield from running(short_dir, A5, NPU, 8)


def test_an_a3_node_serves_sixteen_ascend910_chips(a3: Node) -> None:
    assert a3.kubelet.registrations == [ASCEND910]
    assert a3.kubelet.devices(ASCEND910) == {f"Ascend910-{i}": "Healthy" for i in range(16)}


def test_an_a3_pod_gets_the_scheduler_die_and_its_rank_table(a3: Node) -> None:
    a3.bind("train", ASCEND910, "Ascend910-14,Ascend910-15")
    allocation = a3.kubelet.allocate("ns/train", "main", ASCEND910, 2)
    assert allocation.response.envs["ASCEND_VISIBLE_DEVICES"] == "14,15"
    written = a3.annotations("train")
    assert written["huawei.com/AscendReal"] == "Ascend910-14,Ascend910-15"
    table = json.loads(written["ascend.kubectl.kubernetes.io/ascend-910-configuration"])
    assert [d["device_id"] for d in table["devices"]] == ["14", "15"]
    # The Ascend Operator builds an A3 SuperPoD's hccl.json (version 1.2) from it.
    instance = operator_instance(written["ascend.kubectl.kubernetes.io/ascend-910-configuration"])
    pod_uid = a3.api.get_pod("ns", "train")["metadata"]["uid"]
    assert (instance["server_id"], instance["host_ip"], instance["server_ip"]) == (
        pod_uid,
        "192.168.10.11",
        "192.168.10.11",
    )
    assert (instance["super_pod_id"], instance["server_index"], instance["rack_id"]) == (2, "5", -2)
    assert operator_device_list_v1_2(instance, rank_index=3) == [
        {"device_id": "14", "device_ip": "10.0.0.24", "super_device_id": "94", "rank_id": "6"},
        {"device_id": "15", "device_ip": "10.0.0.25", "super_device_id": "95", "rank_id": "7"},
    ]


# The Ascend Operator's reading of the rank table annotation (Ascend/mind-cluster 22bb3d98
# component/ascend-operator/pkg/ranktable/common/server.go Instance and Dev, json.Unmarshal in
# common.go parseDeviceInfo): each field by its JSON name and Go type; a wrong type is an
# unmarshal error there, an assertion here. Unknown keys are ignored, as Go's decoder does.
OPERATOR_INSTANCE = {
    "pod_name": str,
    "server_id": str,
    "server_ip": str,
    "host_ip": str,
    "super_pod_id": int,
    "devices": list,
    "rack_id": int,
    "server_index": str,
}
OPERATOR_DEV = {"device_id": str, "device_ip": str, "super_device_id": str, "levelList": list}
INT32 = range(-(2**31), 2**31)


def operator_instance(text: str) -> dict[str, object]:
    raw = json.loads(text)
    decoded: dict[str, object] = {}
    for key, kind in OPERATOR_INSTANCE.items():
        value = raw.get(key)
        if value is None:
            continue  # Go leaves the zero value
        assert isinstance(value, kind) and not isinstance(value, bool), (key, value)
        if kind is int:
            assert value in INT32, (key, value)
        decoded[key] = value
    devices = []
    for device in raw.get("devices") or []:
        for key, kind in OPERATOR_DEV.items():
            assert device.get(key) is None or isinstance(device[key], kind), (key, device)
        devices.append({k: v for k, v in device.items() if k in OPERATOR_DEV})
    decoded["devices"] = devices
    return decoded


def operator_device_list_v1_2(instance: dict[str, object], rank_index: int) -> list[dict[str, str]]:
    """The hccl.json devices of one pod, as common.go getDeviceList builds them for version
    1.2 (the A3 SuperPoD's): rank = pod rank x chips per pod + index, super_device_id copied."""
    devices = instance["devices"]
    assert isinstance(devices, list)
    return [
        {
            "device_id": d["device_id"],
            "device_ip": d["device_ip"],
            "super_device_id": d.get("super_device_id", ""),
            "rank_id": str(rank_index * len(devices) + index),
        }
        for index, d in enumerate(devices)
    ]


def test_an_a3_node_publishes_its_superpod_beside_the_deviceinfo(a3: Node) -> None:
    published = json.loads(encode(device_info(a3.driver.read(), (), 1))[DATA_KEY])
    assert (published["SuperPodID"], published["ServerIndex"]) == (2, 5)
    free = published["DeviceInfo"]["DeviceList"][ASCEND910].split(",")
    assert len(free) == 16


def test_a_950_node_registers_huawei_npu_and_lists_its_npus_by_id(a5: Node) -> None:
    assert a5.kubelet.registrations == [NPU]
    assert a5.kubelet.devices(NPU) == {
        f"npu-{i}": "Unhealthy" if i == 7 else "Healthy" for i in range(8)
    }
    assert (a5.kubelet.plugin_dir / "npu.sock").exists()


def test_a_950_pod_gets_the_npus_the_scheduler_wrote_and_its_npu_rank_table(a5: Node) -> None:
    a5.bind("train", NPU, "npu-2,npu-3")
    allocation = a5.kubelet.allocate("ns/train", "main", NPU, 2)
    assert allocation.response.envs["ASCEND_VISIBLE_DEVICES"] == "2,3"
    written = a5.annotations("train")
    assert written["predicate-time"] == "18446744073709551615"
    assert written["huawei.com/AscendReal"] == "npu-2,npu-3"
    assert written["huawei.com/kltDev"] == "npu-2,npu-3"
    # Huawei's A5 rank table annotation (ascend-common api/default_name.go PodNPUDeviceAnno).
    assert "ascend.kubectl.kubernetes.io/ascend-910-configuration" not in written
    table = json.loads(written["ascend.kubectl.kubernetes.io/ascend-npu-configuration"])
    assert [(d["device_id"], d["device_ip"]) for d in table["devices"]] == [
        ("2", "10.0.1.12"),
        ("3", "10.0.1.13"),
    ]


def test_a_950_node_publishes_huawei_npu_deviceinfo_keys(a5: Node) -> None:
    devices = json.loads(encode(device_info(a5.driver.read(), (), 1))[DATA_KEY])["DeviceInfo"][
        "DeviceList"
    ]
    assert devices[NPU] == ",".join(sorted(f"npu-{i}" for i in range(8) if i != 7))
    assert devices[f"{NPU}-Unhealthy"] == "npu-7"
    assert devices[f"{NPU}-NetworkUnhealthy"] == ""
    assert "huawei.com/Ascend910" not in devices
