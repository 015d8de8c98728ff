"""The node labels ``servertype`` and ``node.kubernetes.io/npu.chip.name``: written only when
the node lacks them."""

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


CHIP_NAME = "node.kubernetes.io/npu.chip.name"
B3 = NodeChips("Ascend910", "module910bx8", (), "Ascend910B-20", ai_cores=20, chip_name="910B3")


def test_a_910b_node_gets_its_chip_name_beside_its_servertype() -> None:
    api = cluster({"accelerator": "huawei-Ascend910"})
    assert label_node(api, "n1", B3)
    assert api.get_node("n1")["metadata"]["labels"] == {
        "accelerator": "huawei-Ascend910",
        "servertype": "Ascend910B-20",
        CHIP_NAME: "910B3",
    }


def test_an_admins_chip_name_stays_and_only_the_missing_label_is_written() -> None:
    api = cluster({CHIP_NAME: "910B4"})
    assert label_node(api, "n1", B3)
    assert api.get_node("n1")["metadata"]["labels"] == {
        CHIP_NAME: "910B4",
        "servertype": "Ascend910B-20",
    }
    assert not label_node(api, "n1", B3)


def test_a_chip_name_alone_is_written_without_a_server_type() -> None:
    api = cluster({})
    assert label_node(api, "n1", NodeChips("Ascend910", "module910bx8", (), chip_name="910B1"))
    assert api.get_node("n1")["metadata"]["labels"] == {CHIP_NAME: "910B1"}


def test_the_drivers_report_the_chip_name() -> None:
    state = parse_fake_state(
        "product: module910bx8\nai_cores: 20\nchip_name: 910B3\nchips: [{id: 0}]\n"
    )
    # Upstream's servertype of a 910B: Ascend910B-<AI cores>, not the chip type's Ascend910.
    assert (state.chip_name, state.server_type) == ("910B3", "Ascend910B-20")
    a3 = parse_fake_state("product: module910a3x16\nai_cores: 24\nchips: [{id: 0}]\n")
    assert (a3.chip_name, a3.server_type) == (None, "Ascend910A3-24")
    for bad in ("3", "''", "'910 B3'", "-910B3"):
        with pytest.raises(DriverError, match=r"state\.chip_name"):
            parse_fake_state(f"chip_name: {bad}\nchips: []\n")
    names = {
        sample: discover((SAMPLES / sample).read_text()).chip_name
        for sample in (
            "910-atlas800-9010-npu-smi-info-22.0.3.1.txt",
            "910b1-npu-smi-info-24.1.rc3.txt",
            "910b4-1-npu-smi-info-25.2.0-masked-busid.txt",
            "a3-910c-npu-smi-info-25.2.0-procs.txt",
            "310p3-300i-pro-npu-smi-info-25.2.0.txt",
        )
    }
    assert list(names.values()) == ["910A", "910B1", "910B4-1", "Ascend910", "310P3"]
