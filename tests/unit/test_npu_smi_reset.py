"""The npu-smi driver's side of the hot reset (chip_drivers/npu_smi_driver.py): each chip's
processes from the process table of ``npu-smi info``, the board id from ``npu-smi info -t
board``, and the reset through ``npu-smi set -t reset``, on recorded outputs
(tests/data/npu_smi, tests/data/npu_smi_vnpu; their README names the sources)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chip_drivers.npu_smi import NpuSmiError, parse_board_id, parse_processes
from chip_drivers.npu_smi_driver import NpuSmiDriver

DATA = Path(__file__).parents[1] / "data"
A3 = "a3-910c-npu-smi-info-25.2.0-procs.txt"
A2 = "910b1-npu-smi-info-24.1.rc3.txt"  # 8 chips, "No running processes found" rows


def sample(name: str, folder: str = "npu_smi") -> str:
    return (DATA / folder / name).read_text()


def test_the_process_table_gives_each_chips_process_ids() -> None:
    a3 = parse_processes(sample(A3))
    assert a3[(0, 0)] == (935440, 936673, 930242, 934451, 931572, 941045, 942487, 929673)
    assert a3[(0, 1)] == (929405,)
    assert a3[(7, 1)] == (944268,)
    assert len(a3) == 16
    b1 = parse_processes(sample("910b1-npu-smi-info-23.0.rc3.3-procs-excerpt.txt"))
    assert b1 == {(0, 0): (576489,), (1, 0): (576491,)}
    assert parse_processes(sample(A2)) == {}, "no running processes: nothing listed"


def test_the_board_id_of_npu_smi_info_t_board() -> None:
    assert parse_board_id(sample("910-npu-smi-info-t-board-i-23.0.5.txt")) == 0x02
    assert parse_board_id(sample(A2)) is None
    with pytest.raises(NpuSmiError, match="8005"):
        parse_board_id(sample("npu-smi-error-dcmi-init-8005-container.txt"))


class Script:
    """npu-smi answering from recorded outputs; the calls it was asked, in order."""

    def __init__(self, info: str, board: str | None) -> None:
        self.info, self.board = info, board
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> str | None:
        self.calls.append(args)
        if args == ["info"]:
            return self.info
        if args[:3] == ["info", "-t", "board"]:
            return self.board
        if args[:3] == ["set", "-t", "reset"]:
            return sample("reset-ok.txt", "npu_smi_vnpu")
        return None  # info -m: not recorded


def test_the_driver_maps_processes_to_chips_and_asks_the_board_once() -> None:
    board = sample("910-npu-smi-info-t-board-i-23.0.5.txt")
    run = Script(sample(A3), board)
    driver = NpuSmiDriver(run)
    node = driver.read()
    assert node.board_id == 0x02
    assert driver.read().board_id == 0x02
    assert run.calls.count(["info", "-t", "board", "-i", "0"]) == 1
    processes = driver.processes()
    assert processes[0] == (935440, 936673, 930242, 934451, 931572, 941045, 942487, 929673)
    assert processes[15] == (944268,)  # NPU 7 chip 1: physical id 15


def test_a_reset_is_npu_smi_set_t_reset_of_the_faulty_chip() -> None:
    run = Script(sample(A3), None)
    driver = NpuSmiDriver(run)
    assert driver.read().board_id is None
    driver.reset_chips(5, frozenset({4, 5}))
    assert ["set", "-t", "reset", "-i", "2", "-c", "1"] in run.calls  # chip 5: NPU 2 chip 1
    assert not any(c[:3] == ["set", "-t", "reset"] and c[4] != "2" for c in run.calls)
