"""The agent on inference nodes, end to end over real sockets: a 310 node's chips, a 310P
node's pre-created vNPUs (static) and a 310P node's AI cores (dynamic vNPU, created at
Allocate and destroyed once unused), and the hot reset of an unhealthy chip."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.builder import AgentConfig, KubeSettings, NodeAgent, start_node_agent
from chip_drivers.chips import DriverError
from chip_drivers.fake import FakeDriver
from simulation.cluster import wait_for
from simulation.kubelet import KubeletSimulator
from simulation.memory import MemoryCluster

NODE = "infer-1"
IDLE = 1.0  # seconds a reset group must stay idle (upstream's 60 s, shortened for tests)


def state(chip_type: str, chips: int, **extra: Any) -> str:
    return yaml.safe_dump(
        {"chip_type": chip_type, "chips": [{"id": i} for i in range(chips)], **extra}
    )


def pod(name: str, resource: str, count: int, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"uid-{name}",
            "annotations": annotations,
        },
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "main", "resources": {"limits": {resource: str(count)}}}],
        },
        "status": {"phase": "Pending"},
    }


@contextmanager
def agent(
    directory: Path, text: str, *, preset_virtual: bool = True, hot_reset: bool = False
) -> Iterator[tuple[NodeAgent, KubeletSimulator, MemoryCluster, Path]]:
    path = directory / "state.yaml"
    path.write_text(text)
    api = MemoryCluster()
    api.put("Node", {"metadata": {"name": NODE}})
    kubelet = KubeletSimulator(directory / "plugins", directory / "podres.sock")
    kubelet.start()
    config = AgentConfig(
        directory / "plugins",
        ascend_runtime=True,
        period=0.2,
        kube=KubeSettings(NODE, True, directory / "podres.sock", wait_for_pod=0.5),
        preset_virtual=preset_virtual,
        hot_reset=hot_reset,
        hot_reset_idle=IDLE,
    )
    running = start_node_agent(config, FakeDriver(path), api)
    try:
        assert running.plugin.wait_registered(30)
        yield running, kubelet, api, path
    finally:
        running.stop()
        kubelet.close()


def deviceinfo(api: MemoryCluster) -> dict[str, str]:
    data = api.get_configmap("kube-system", f"mindx-dl-deviceinfo-{NODE}")["data"]
    return dict(json.loads(data["DeviceInfoCfg"])["DeviceInfo"]["DeviceList"])


def test_a_310_node_serves_its_chips_and_publishes_their_keys(short_dir: Path) -> None:
    with agent(short_dir, state("Ascend310", 4)) as (_, kubelet, api, _):
        assert kubelet.resources() == ["huawei.com/Ascend310"]
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/Ascend310") == 4)
        assert set(kubelet.devices("huawei.com/Ascend310")) == {f"Ascend310-{i}" for i in range(4)}
        api.put(
            "Pod",
            pod(
                "p",
                "huawei.com/Ascend310",
                2,
                {"huawei.com/Ascend310": "Ascend310-2,Ascend310-3", "predicate-time": "1"},
            ),
        )
        allocation = kubelet.allocate("ns/p", "main", "huawei.com/Ascend310", 2)
        assert allocation.response.envs["ASCEND_VISIBLE_DEVICES"] == "2,3"
        assert api.get_pod("ns", "p")["metadata"]["annotations"]["huawei.com/AscendReal"] == (
            "Ascend310-2,Ascend310-3"
        )
        assert wait_for(
            lambda: deviceinfo(api).get("huawei.com/Ascend310") == "Ascend310-0,Ascend310-1"
        )
        assert "huawei.com/Ascend310-NetworkUnhealthy" not in deviceinfo(api)


def test_a_310p_node_serves_its_precreated_vnpus_as_their_own_resource(short_dir: Path) -> None:
    vnpus = [
        {"id": 100, "chip": 1, "template": "vir02_1c"},
        {"id": 101, "chip": 1, "template": "vir02_1c"},
    ]
    with agent(short_dir, state("Ascend310P", 2, vnpus=vnpus)) as (_, kubelet, api, _):
        assert wait_for(lambda: len(kubelet.resources()) == 2)
        assert sorted(kubelet.resources()) == [
            "huawei.com/Ascend310P",
            "huawei.com/Ascend310P-2c.1cpu",
        ]
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/Ascend310P-2c.1cpu") == 2)
        assert set(kubelet.devices("huawei.com/Ascend310P")) == {"Ascend310P-0"}
        assert set(kubelet.devices("huawei.com/Ascend310P-2c.1cpu")) == {
            "Ascend310P-2c.1cpu-100-1",
            "Ascend310P-2c.1cpu-101-1",
        }
        allocation = kubelet.allocate("ns/v", "main", "huawei.com/Ascend310P-2c.1cpu", 1)
        vdev = allocation.device_ids[0].split("-")[2]
        assert dict(allocation.response.envs) == {
            "ASCEND_VISIBLE_DEVICES": vdev,
            "ASCEND_RUNTIME_OPTIONS": "VIRTUAL",
        }
        # A chip with vNPUs is never free for whole-chip pods.
        assert wait_for(lambda: deviceinfo(api).get("huawei.com/Ascend310P") == "Ascend310P-0")


def test_dynamic_vnpu_is_created_at_allocate_recorded_and_destroyed_once_unused(
    short_dir: Path,
) -> None:
    with agent(short_dir, state("Ascend310P", 2), preset_virtual=False) as (
        running,
        kubelet,
        api,
        path,
    ):
        assert kubelet.resources() == ["huawei.com/npu-core"]
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/npu-core") == 16)
        api.put(
            "Pod",
            pod(
                "v",
                "huawei.com/npu-core",
                2,
                {"huawei.com/npu-core": "1-vir02_1c", "predicate-time": "5"},
            ),
        )
        allocation = kubelet.allocate("ns/v", "main", "huawei.com/npu-core", 2)
        envs = dict(allocation.response.envs)
        assert envs["ASCEND_RUNTIME_OPTIONS"] == "VIRTUAL"
        written = api.get_pod("ns", "v")["metadata"]["annotations"]
        assert (
            written["huawei.com/AscendReal"]
            == f"Ascend310P-2c.1cpu-{envs['ASCEND_VISIBLE_DEVICES']}-1_0"
        )
        assert written["predicate-time"] == "18446744073709551615"
        assert [v["chip"] for v in yaml.safe_load(path.read_text())["vnpus"]] == [1]
        assert wait_for(lambda: deviceinfo(api).get("huawei.com/Ascend310P") == "Ascend310P-0")
        # Whole chips through the same resource.
        api.put(
            "Pod",
            pod("w", "huawei.com/npu-core", 8, {"huawei.com/npu-core": "0", "predicate-time": "6"}),
        )
        whole = kubelet.allocate("ns/w", "main", "huawei.com/npu-core", 8)
        assert dict(whole.response.envs) == {
            "ASCEND_VISIBLE_DEVICES": "0",
            "ASCEND_RUNTIME_OPTIONS": "",
        }
        # The pod goes: its vNPU is destroyed by the upkeep loop.
        api.delete("Pod", "ns", "v")
        assert wait_for(lambda: not yaml.safe_load(path.read_text()).get("vnpus"))
        cores = running.cores
        assert cores is not None and cores.created == 1
        assert wait_for(lambda: cores.destroyed == 1)  # counted once the driver answered


def test_dynamic_vnpu_refuses_a_template_beyond_the_chips_ai_cores(short_dir: Path) -> None:
    vnpus = [
        {"id": 100, "chip": 0, "template": "vir04"},
        {"id": 101, "chip": 0, "template": "vir02"},
    ]
    text = state("Ascend310P", 1, vnpus=vnpus)
    with agent(short_dir, text, preset_virtual=False) as (_, kubelet, api, path):
        # Both vNPUs are in use (recorded by running pods), 2 of 8 AI cores are left.
        for i, vdev in enumerate((100, 101)):
            template = "4c" if vdev == 100 else "2c"
            api.put(
                "Pod",
                {
                    **pod(
                        f"r{i}",
                        "huawei.com/npu-core",
                        2,
                        {
                            "huawei.com/npu-core": "0-vir02",
                            "predicate-time": "18446744073709551615",
                            "huawei.com/AscendReal": f"Ascend310P-{template}-{vdev}-0_{i}",
                        },
                    ),
                    "status": {"phase": "Running"},
                },
            )
        api.put(
            "Pod",
            pod(
                "v",
                "huawei.com/npu-core",
                4,
                {"huawei.com/npu-core": "0-vir04_3c", "predicate-time": "9"},
            ),
        )
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/npu-core") == 8)
        try:
            kubelet.allocate("ns/v", "main", "huawei.com/npu-core", 4)
        except Exception as failed:
            assert "NPUSegmentFailed" in str(failed)
        else:
            raise AssertionError("a vNPU beyond the chip's AI cores was created")
        assert len(yaml.safe_load(path.read_text())["vnpus"]) == 2


def test_hot_reset_resets_an_unhealthy_chip_no_pod_uses(short_dir: Path) -> None:
    # A 310P (a ring of one) whose chip 1 reports 80E18008, a RestartNPU code of the fault
    # table; chip 0 is held by a pod and stays as it is. Once chip 1 was idle for IDLE s the
    # driver resets it alone (taking reset_seconds), then it is healthy and free again. A 310P's
    # DeviceInfo has no -Recovering key (upstream writes it for the 910 kinds only).
    raw = yaml.safe_load(state("Ascend310P", 2, reset_seconds=1.0))
    raw["chips"][1] |= {"health": "Unhealthy", "fault_codes": ["80E18008"]}
    with agent(short_dir, yaml.safe_dump(raw), hot_reset=True) as (running, kubelet, api, path):
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/Ascend310P") == 1)
        notes = {"huawei.com/Ascend310P": "Ascend310P-0", "predicate-time": "1"}
        api.put("Pod", pod("p", "huawei.com/Ascend310P", 1, notes))
        kubelet.allocate("ns/p", "main", "huawei.com/Ascend310P", 1)
        assert wait_for(lambda: yaml.safe_load(path.read_text()).get("resetting") == [1])
        assert wait_for(lambda: yaml.safe_load(path.read_text()).get("resets") == {1: 1})
        assert kubelet.wait_for(
            lambda: kubelet.devices("huawei.com/Ascend310P")["Ascend310P-1"] == "Healthy"
        )
        assert wait_for(lambda: deviceinfo(api).get("huawei.com/Ascend310P") == "Ascend310P-1")
        info = deviceinfo(api)
        assert "huawei.com/Ascend310P-Recovering" not in info
        assert info.get("huawei.com/Ascend310P-Unhealthy", "") == ""
        upkeep = running.upkeep
        assert upkeep is not None and upkeep.reset is not None
        reset = upkeep.reset
        # Counted once the reset's thread has also recorded its Event: after the chip shows
        # healthy (seen 0 beside three other test workers when read at once).
        assert wait_for(lambda: reset.resets == 1)


def test_a_failed_chip_costs_the_kubelet_exactly_its_own_ai_cores(short_dir: Path) -> None:
    # The kubelet's AI-core IDs are not the chips' own: a vNPU on chip 0 holds npu-core-0,1,
    # one on chip 1 npu-core-10,11. When chip 1 fails, its pod's IDs are the ones reported
    # unhealthy first (then free ones), never the healthy chip's, so the kubelet offers
    # exactly chip 0's six free cores.
    with agent(short_dir, state("Ascend310P", 2), preset_virtual=False) as (_, kubelet, api, path):
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/npu-core") == 16)
        given = {}
        for name, chip, when in (("a", 0, "5"), ("b", 1, "6")):
            notes = {"huawei.com/npu-core": f"{chip}-vir02", "predicate-time": when}
            api.put("Pod", pod(name, "huawei.com/npu-core", 2, notes))
            allocation = kubelet.allocate(f"ns/{name}", "main", "huawei.com/npu-core", 2)
            given[chip] = set(allocation.device_ids)
        assert given == {0: {"npu-core-0", "npu-core-1"}, 1: {"npu-core-10", "npu-core-11"}}
        raw = yaml.safe_load(path.read_text())
        raw["chips"][1]["health"] = "Unhealthy"
        path.write_text(yaml.safe_dump(raw))
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/npu-core") == 8)
        devices = kubelet.devices("huawei.com/npu-core")
        assert {devices[i] for i in given[1]} == {"Unhealthy"}, "the failed chip's pod's IDs"
        assert {devices[i] for i in given[0]} == {"Healthy"}, "the healthy chip's pod's IDs"
        assert kubelet.free("huawei.com/npu-core") == 6, "chip 0's free cores, all offered"


def test_a_910b_vnpu_is_created_at_allocate_over_grpc_and_named_as_910(short_dir: Path) -> None:
    """910B (A2) dynamic vNPU: a 910B3 node of 20 AI cores per chip serves npu-core; the
    scheduler's ``1-vir10_3c_32g`` becomes a vNPU on chip 1, recorded as a 910 vNPU."""
    text = state("Ascend910", 2, product="module910bx8", ai_cores=20, servertype="Ascend910B-20")
    with agent(short_dir, text, preset_virtual=False) as (running, kubelet, api, path):
        assert kubelet.resources() == ["huawei.com/npu-core"]
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/npu-core") == 40)
        notes = {"huawei.com/npu-core": "1-vir10_3c_32g", "predicate-time": "5"}
        api.put("Pod", pod("v", "huawei.com/npu-core", 10, notes))
        allocation = kubelet.allocate("ns/v", "main", "huawei.com/npu-core", 10)
        envs = dict(allocation.response.envs)
        assert envs["ASCEND_RUNTIME_OPTIONS"] == "VIRTUAL"
        written = api.get_pod("ns", "v")["metadata"]["annotations"]
        assert written["huawei.com/AscendReal"] == (
            f"Ascend910-10c.3cpu.32g-{envs['ASCEND_VISIBLE_DEVICES']}-1_0"
        )
        created = yaml.safe_load(path.read_text())["vnpus"]
        assert [(v["chip"], v["template"]) for v in created] == [(1, "vir10_3c_32g")]
        # The vNPU is the pod's: the upkeep loop keeps it while the pod lives.
        cores = running.cores
        assert cores is not None and cores.created == 1
        assert cores.destroy_unused() == 0
        api.delete("Pod", "ns", "v")
        assert wait_for(lambda: not yaml.safe_load(path.read_text()).get("vnpus"))


def test_dynamic_vnpu_is_refused_on_a_910_that_cuts_none(short_dir: Path) -> None:
    path = short_dir / "state.yaml"
    path.write_text(state("Ascend910", 2, ai_cores=32, servertype="Ascend910-32"))
    config = AgentConfig(
        short_dir / "plugins",
        ascend_runtime=True,
        period=0.2,
        kube=KubeSettings(NODE, True, short_dir / "podres.sock"),
        preset_virtual=False,
    )
    message = "^only 310p, 910a2 and 910a3 support to set presetVirtualDevice false$"
    with pytest.raises(DriverError, match=message):
        start_node_agent(config, FakeDriver(path), MemoryCluster())


def test_dynamic_vnpu_is_refused_on_an_atlas_300i_duo(short_dir: Path) -> None:
    path = short_dir / "state.yaml"
    path.write_text(state("Ascend310P", 4, ai_cores=8, product="chip310px2"))
    config = AgentConfig(
        short_dir / "plugins",
        ascend_runtime=True,
        period=0.2,
        kube=KubeSettings(NODE, True, short_dir / "podres.sock"),
        preset_virtual=False,
    )
    with pytest.raises(DriverError, match=r"^Atlas 300I Duo is not supported to dynamic virtual"):
        start_node_agent(config, FakeDriver(path), MemoryCluster())
