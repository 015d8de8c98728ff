"""npu-smi's vNPU commands (``chip_drivers.npu_smi_vnpu``) on the outputs in
``tests/data/npu_smi_vnpu``: a 310P chip and a 910B3 chip (dynamic vNPU on A2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chip_drivers.chips import Chip, NodeChips, VirtualDevice
from chip_drivers.npu_smi import NpuSmiError
from chip_drivers.npu_smi_vnpu import NpuSmiVnpus, check_status, parse_vnpus

DATA = Path(__file__).parent.parent / "data" / "npu_smi_vnpu"


def text(name: str) -> str:
    return (DATA / name).read_text()


def test_the_vnpus_of_a_310p_and_a_910b3_chip() -> None:
    assert parse_vnpus(text("info-vnpu-card0-chip0.txt"), 0) == (
        VirtualDevice(100, 0, "vir02_1c", 0),
        VirtualDevice(101, 0, "vir01", 1),
    )
    assert parse_vnpus(text("info-vnpu-910b3-card2-chip0.txt"), 4) == (
        VirtualDevice(100, 4, "vir10_3c_32g", 0),
        VirtualDevice(101, 4, "vir05_1c_16g", 1),
    )
    assert parse_vnpus(text("info-vnpu-empty.txt"), 0) == ()


def test_a_failed_create_names_npu_smis_message() -> None:
    check_status(text("create-vnpu-ok.txt"), "create")
    with pytest.raises(NpuSmiError, match="The remaining resources are insufficient"):
        check_status(text("create-vnpu-failed.txt"), "create")


def test_create_on_a_910b_chip_issues_create_vnpu_and_returns_the_new_vnpu() -> None:
    """Chip 4 is npu-smi's NPU 2 chip 0: create-vnpu with the 910B template; the vNPU is
    the one the list shows afterwards and not before."""
    after = text("info-vnpu-910b3-card2-chip0.txt")
    before = "\n".join(line for line in after.splitlines() if "vir05_1c_16g" not in line)
    listed = [before, after]
    calls: list[list[str]] = []

    def run(args: list[str]) -> str:
        calls.append(args)
        return text("create-vnpu-ok.txt") if "create-vnpu" in args else listed.pop(0)

    node = NodeChips("Ascend910", "module910bx8", (Chip(4, 4, card=(2, 0)),), ai_cores=20)
    made = NpuSmiVnpus(run).create(node, 4, "vir05_1c_16g")
    assert made == VirtualDevice(101, 4, "vir05_1c_16g", 1)
    assert calls[1] == ["set", "-t", "create-vnpu", "-i", "2", "-c", "0", "-f", "vir05_1c_16g"]
