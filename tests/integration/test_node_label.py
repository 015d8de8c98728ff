"""The node label ``servertype``: written only when the node lacks it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.builder import label_node
from chip_drivers.chips import DriverError, NodeChips
from chip_drivers.fake import parse_fake_state
from chip_drivers.npu_smi import discover
from simulation.memory import MemoryCluster

SAMPLES = Path(__file__).parents[1] / "data" / "npu_smi"


def cluster(labels: dict[str, str]) -> MemoryCluster:
    api = MemoryCluster()
    api.put("Node", {"metadata": {"name": "n1", "labels": labels}})
    return api


def test_servertype_is_set_when_absent() -> None:
    api = cluster({"accelerator": "huawei-Ascend910"})
    assert label_node(api, "n1", NodeChips("Ascend910", "module910x8", (), "Ascend910-32"))
    assert api.get_node("n1")["metadata"]["labels"] == {
        "accelerator": "huawei-Ascend910",
        "servertype": "Ascend910-32",
    }


def test_an_existing_servertype_is_never_overwritten() -> None:
    api = cluster({"servertype": "Ascend910B-20"})
    assert not label_node(api, "n1", NodeChips("Ascend910", "module910x8", (), "Ascend910-32"))
    assert api.get_node("n1")["metadata"]["labels"]["servertype"] == "Ascend910B-20"


def test_nothing_is_written_when_the_driver_does_not_know_the_server_type() -> None:
    api = cluster({})
    assert not label_node(api, "n1", NodeChips("Ascend910", "module910bx8", ()))
    assert api.get_node("n1")["metadata"]["labels"] == {}


def test_the_drivers_report_the_server_type_they_can_know() -> None:
    assert parse_fake_state("servertype: Ascend910B-24\nchips: []\n").server_type == "Ascend910B-24"
    with pytest.raises(DriverError, match=r"state\.servertype"):
        parse_fake_state("servertype: 3\nchips: []\n")
    a1 = discover((SAMPLES / "910-atlas800-9010-npu-smi-info-22.0.3.1.txt").read_text())
    b1 = discover((SAMPLES / "910b1-npu-smi-info-24.1.rc3.txt").read_text())
    assert (a1.server_type, b1.server_type) == ("Ascend910-32", None)
