"""The hot reset loop (agent/upkeep.py HotReset) on the fake driver and an in-memory API: a
910 ring of 4 with one faulty chip is reset only once no pod and no process is on the ring and
it stayed idle, lists the ring as recovering meanwhile, comes back healthy; the 4th fault in
6 h is left to an operator through the node annotation ResetInfo."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from agent.hot_reset import RESET_INFO_ANNOTATION
from agent.pod_cache import PodCache
from agent.upkeep import HotReset
from chip_drivers.fake import FakeDriver
from simulation.cluster import wait_for
from simulation.memory import MemoryCluster

NODE = "node-a"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def setup(tmp: Path, **extra: Any) -> tuple[HotReset, Path, MemoryCluster, Clock, PodCache]:
    path = tmp / "state.yaml"
    chips: list[dict[str, Any]] = [{"id": i} for i in range(8)]
    chips[1] |= {"health": "Unhealthy", "fault_codes": ["80E18008"]}
    path.write_text(yaml.safe_dump({"product": "module910x8", "chips": chips, **extra}))
    api = MemoryCluster()
    api.put("Node", {"metadata": {"name": NODE}})
    cache = PodCache(api, NODE)
    cache.start()
    assert wait_for(lambda: cache.synced)
    clock = Clock()
    driver = FakeDriver(path)
    reset = HotReset(
        driver,
        cache,
        levels=lambda: {c.id: "RestartNPU" for c in driver.read().chips if not c.healthy},
        kubelet_devices=list,
        gateway=api,
        node_name=NODE,
        clock=clock,
    )
    return reset, path, api, clock, cache


def pod_on(chip: int) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": "p",
            "uid": "u",
            "annotations": {"huawei.com/Ascend910": f"Ascend910-{chip}", "predicate-time": "1"},
        },
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "c", "resources": {"limits": {"huawei.com/Ascend910": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


def state(path: Path) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(path.read_text())
    return raw


def test_a_ring_is_reset_once_idle_and_comes_back(tmp_path: Path) -> None:
    reset, path, api, clock, cache = setup(tmp_path, reset_seconds=0.5)
    try:
        api.put("Pod", pod_on(3))
        assert wait_for(lambda: len(cache.pods()) == 1)
        for clock.now in (0.0, 61.0, 200.0):
            reset.run_once()
        assert reset.recovering() == frozenset() and "resets" not in state(path)
        api.delete_pod("ns", "p", "u", 0)
        assert wait_for(lambda: not cache.pods())
        clock.now = 300.0
        reset.run_once()  # idle from now
        clock.now = 359.0
        reset.run_once()
        assert reset.recovering() == frozenset()
        clock.now = 360.0
        reset.run_once()
        assert reset.recovering() == {0, 1, 2, 3}
        assert wait_for(lambda: state(path).get("resetting") == [0, 1, 2, 3])
        assert wait_for(lambda: reset.resets == 1)
        assert reset.recovering() == frozenset()
        assert state(path)["resets"] == {1: 1}
        assert all(c.get("health", "Healthy") == "Healthy" for c in state(path)["chips"])
    finally:
        reset.join(5)
        cache.stop()


def test_a_process_on_the_ring_holds_the_reset(tmp_path: Path) -> None:
    reset, path, _, clock, cache = setup(tmp_path)
    try:
        raw = state(path)
        raw["chips"][2]["processes"] = [4242]
        path.write_text(yaml.safe_dump(raw))
        for clock.now in (0.0, 100.0, 200.0):
            reset.run_once()
        assert reset.recovering() == frozenset() and "resets" not in state(path)
    finally:
        cache.stop()


def test_the_fourth_fault_in_6_h_goes_to_reset_info(tmp_path: Path) -> None:
    reset, path, api, clock, cache = setup(tmp_path, reset_fails=[1])
    try:
        for attempt in range(3):
            clock.now = attempt * 1000.0
            reset.run_once()
            clock.now += 60
            reset.run_once()
            done = attempt + 1
            assert wait_for(lambda: reset.resets == done)  # noqa: B023 (waited on here)
        # The failures themselves were listed for an operator (not an A3: no third party).
        info = json.loads(api.get_node(NODE)["metadata"]["annotations"][RESET_INFO_ANNOTATION])
        assert [d["PhyID"] for d in info["ManualResetDevs"]] == [1]
        clock.now = 5000.0
        reset.run_once()
        clock.now = 5100.0
        reset.run_once()
        assert reset.recovering() == frozenset() and state(path)["resets"] == {1: 3}
        raw = state(path)
        raw["chips"][1] = {"id": 1}
        path.write_text(yaml.safe_dump(raw))
        clock.now = 5200.0
        reset.run_once()
        info = json.loads(api.get_node(NODE)["metadata"]["annotations"][RESET_INFO_ANNOTATION])
        assert info == {"ThirdPartyResetDevs": [], "ManualResetDevs": []}
    finally:
        reset.join(5)
        cache.stop()
