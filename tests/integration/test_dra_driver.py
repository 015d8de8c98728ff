"""The DRA driver's edges: a slice whose fields the API server drops, and a node's chips
never served by both the device plugin and the DRA driver."""

from __future__ import annotations

import copy
import signal
import subprocess
from pathlib import Path

import pytest

from agent.builder import AgentConfig, KubeSettings, start_node_agent
from chip_drivers.chips import Chip, DriverError, NodeChips
from chip_drivers.fake import FakeDriver
from contract.dra import DEFAULT_DRIVER, SLICE_KIND, slice_name
from contract.objects import Obj
from dra_driver.driver import DraConfig, ServedTwice, start_dra_driver
from dra_driver.publisher import SlicePublisher
from infra.kube.port import Selection
from simulation.cluster import state_file, wait_for
from simulation.dra_cluster import dra_node_object, driver_command
from simulation.kubelet_dra import KubeletDra
from simulation.loopback import LoopbackApiServer, kubeconfig, node_object
from simulation.memory import MemoryCluster

NODE = "node-00"
CHIPS = NodeChips("Ascend910", "module910x8", tuple(Chip(i, i) for i in range(8)))


class GateOff(MemoryCluster):
    """An API server with a feature gate off: it stores slices without ``ringFree``."""

    def _dropped(self, body: Obj) -> Obj:
        kept = copy.deepcopy(body)
        for device in kept.get("spec", {}).get("devices", []):
            device.get("attributes", {}).pop("ringFree", None)
        return kept

    def create_object(self, kind: str, body: Obj) -> Obj:
        return super().create_object(kind, self._dropped(body))

    def replace_object(self, kind: str, body: Obj) -> Obj:
        return super().replace_object(kind, self._dropped(body))


def test_fields_the_api_server_drops_are_reported_once_and_not_sent_again_and_again() -> None:
    store = GateOff()
    store.put("Node", dra_node_object(NODE, 0))
    publisher = SlicePublisher(store, DEFAULT_DRIVER, NODE, lambda: CHIPS, frozenset)
    publisher.publish()
    assert publisher.dropped == [f"spec.devices[{i}].attributes.ringFree" for i in range(8)]
    publisher.publish()
    publisher.slices.relist()
    publisher.publish()
    assert publisher.writes == 1, "what the server keeps is published: nothing to write"
    stored = store.get_object(SLICE_KIND, "", slice_name(NODE, DEFAULT_DRIVER))
    assert stored["metadata"]["ownerReferences"][0]["uid"] == "node-uid-0"


def test_a_deleted_slice_is_published_again_and_a_stray_one_of_the_driver_removed() -> None:
    store = MemoryCluster()
    store.put("Node", dra_node_object(NODE, 0))
    publisher = SlicePublisher(store, DEFAULT_DRIVER, NODE, lambda: CHIPS, frozenset)
    publisher.publish()
    stray = copy.deepcopy(store.get_object(SLICE_KIND, "", slice_name(NODE, DEFAULT_DRIVER)))
    stray["metadata"] = {"name": "node-00-old"}
    store.create_object(SLICE_KIND, stray)
    store.delete_object(SLICE_KIND, "", slice_name(NODE, DEFAULT_DRIVER))
    publisher.slices.relist()
    publisher.publish()
    names = {s["metadata"]["name"] for s in store.list_page(publisher.slices.what, 0).items}
    assert names == {slice_name(NODE, DEFAULT_DRIVER)}


def test_the_agent_refuses_a_node_whose_chips_the_dra_driver_publishes(tmp_path: Path) -> None:
    store = MemoryCluster()
    store.put("Node", node_object(0))
    SlicePublisher(store, DEFAULT_DRIVER, NODE, lambda: CHIPS, frozenset).publish()
    (tmp_path / "state.yaml").write_text(state_file(frozenset()))
    config = AgentConfig(
        tmp_path / "plugins", ascend_runtime=True, period=1, kube=KubeSettings(NODE, True)
    )
    with pytest.raises(DriverError, match="run either the device plugin or the DRA driver"):
        start_node_agent(config, FakeDriver(tmp_path / "state.yaml"), store)
    assert not (tmp_path / "plugins").exists(), "nothing was started"


def test_the_dra_driver_refuses_a_node_the_device_plugin_serves(tmp_path: Path) -> None:
    store = MemoryCluster()
    store.put("Node", node_object(0))  # its kubelet reports huawei.com/Ascend910: 8
    (tmp_path / "state.yaml").write_text(state_file(frozenset()))
    config = DraConfig(NODE, plugins_dir=tmp_path / "p", registry_dir=tmp_path / "r")
    with pytest.raises(ServedTwice, match="the device plugin serves its chips"):
        start_dra_driver(config, FakeDriver(tmp_path / "state.yaml"), store)
    assert not (tmp_path / "r").exists(), "nothing was registered"


def test_the_command_the_daemonset_runs_registers_publishes_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    store = MemoryCluster()
    store.put("Node", dra_node_object(NODE, 0))
    api = LoopbackApiServer(store)
    api.start()
    (tmp_path / "state.yaml").write_text(state_file(frozenset({6})))
    (tmp_path / "kubeconfig").write_text(kubeconfig(api.url))
    kubelet = KubeletDra(NODE, tmp_path / "registry", store, tmp_path / "cdi")
    kubelet.start()
    driver = subprocess.Popen(
        driver_command(NODE, tmp_path, kubeconfig_file=tmp_path / "kubeconfig")
    )
    try:
        assert wait_for(lambda: kubelet.plugin(DEFAULT_DRIVER) is not None, timeout=60)
        name = slice_name(NODE, DEFAULT_DRIVER)
        assert wait_for(lambda: bool(store.list_page(Selection(SLICE_KIND), 0).items))
        devices = store.get_object(SLICE_KIND, "", name)["spec"]["devices"]
        assert [d["attributes"]["healthy"]["bool"] for d in devices] == [c != 6 for c in range(8)]
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=20) == 0
        assert not (tmp_path / "registry" / f"{DEFAULT_DRIVER}-reg.sock").exists(), (
            "deregistered: its registration socket is gone"
        )
    finally:
        if driver.poll() is None:
            driver.kill()
        kubelet.stop()
        api.stop()
