"""The real driver: chips from Huawei's ``npu-smi`` tool.

Parsing is pure and tested on recorded public outputs of every chip generation
(``tests/data/npu_smi``). It has not run against real NPU hardware in this project.

Table layouts differ by generation (80 to 116 columns, see the samples' README), so rows
are split on ``|``, never on column offsets. Row 2's header says which ids it carries:
``Chip`` (910 A1/A2), ``Chip  Phy-ID`` (A3: the physical id), ``Chip  Device`` (310
family: the logic id).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from chip_drivers.chips import LABEL_VALUE, Chip, DriverError, NodeChips
from chip_topology.products.a3.dies import DIE

HEALTHY_STATES = frozenset({"OK", "Warning"})  # Warning = minor alarm; the chip still works
_DCMI_ERROR = re.compile(r"dcmi .*initiali[sz]e[d]? failed.*ret is (-?\d+)", re.IGNORECASE)
_COLUMNS = re.compile(r"\s{2,}")


class NpuSmiError(DriverError):
    """npu-smi printed an error or no chip table."""


@dataclass(frozen=True, slots=True)
class TableChip:
    npu_id: int
    chip_index: int
    model: str
    health: str
    second_id: int | None  # Phy-ID (A3) or Device (310 family), when the layout has one
    # The row pair's cells as printed (power, temperature, usage: chip_drivers/npu_smi_readings)
    top: tuple[str, ...] = ()
    bottom: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MappingRow:
    npu_id: int
    chip_id: int
    logic_id: int
    phy_id: int | None
    model: str


@dataclass(frozen=True, slots=True)
class Table:
    second_column: str  # "", "Phy-ID" or "Device"
    has_hbm: bool
    chips: tuple[TableChip, ...]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _check_dcmi(text: str) -> None:
    for line in text.splitlines():
        if _DCMI_ERROR.search(line):
            raise NpuSmiError(f"npu-smi: {line.strip()}")


def parse_table(text: str) -> Table:
    """``npu-smi info``: one TableChip per chip, in table order."""
    _check_dcmi(text)
    second_column, has_hbm, in_header = "", False, False
    rows: list[list[str]] = []
    for line in text.splitlines():
        if "|" not in line:
            continue
        cells = _cells(line)
        first = cells[0].split()
        if first[:2] == ["NPU", "Name"]:
            in_header = True
            continue
        if first[:2] == ["NPU", "Chip"] or "Process id" in line:
            break  # the process table: its rows also start with integers
        if in_header and first and first[0] == "Chip":
            second_column = first[1] if len(first) > 1 else ""
            has_hbm = "HBM-Usage" in line
            in_header = False
            continue
        if first and first[0].isdigit():
            rows.append(cells)
    if not rows:
        raise NpuSmiError("npu-smi printed no chip table")
    if len(rows) % 2:
        raise NpuSmiError(f"npu-smi table is cut: chip row {len(rows) // 2} has no second row")
    chips = []
    for top, bottom in zip(rows[::2], rows[1::2], strict=True):
        head, ids = top[0].split(), bottom[0].split()
        if len(head) < 2 or len(top) < 2 or not ids[0].isdigit():
            raise NpuSmiError(f"npu-smi row not understood: {' | '.join(top)}")
        second = int(ids[1]) if second_column and len(ids) > 1 and ids[1].isdigit() else None
        if second_column and second is None:
            raise NpuSmiError(f"npu-smi row lacks its {second_column}: {' | '.join(bottom)}")
        chips.append(
            TableChip(
                int(head[0]),
                int(ids[0]),
                " ".join(head[1:]),
                top[1],
                second,
                tuple(top),
                tuple(bottom),
            )
        )
    return Table(second_column, has_hbm, tuple(chips))


def parse_mapping(text: str) -> list[MappingRow]:
    """``npu-smi info -m``: (NPU ID, Chip ID) → logic id (and physical id when printed).
    MCU rows (logic id ``-``) and invalid rows (NPU ID ``-1``) are skipped."""
    _check_dcmi(text)
    header: list[str] | None = None
    rows = []
    for line in text.splitlines():
        fields = _COLUMNS.split(line.strip())
        if fields[0] == "NPU ID":
            header = fields
            continue
        if header is None or len(fields) < len(header):
            continue
        row = dict(zip(header, fields, strict=False))
        npu, chip, logic = (
            row.get("NPU ID", ""),
            row.get("Chip ID", ""),
            row.get("Chip Logic ID", ""),
        )
        if not (npu.isdigit() and chip.isdigit() and logic.isdigit()):
            continue
        phy = row.get("Chip Phy-ID", "")
        rows.append(
            MappingRow(
                int(npu),
                int(chip),
                int(logic),
                int(phy) if phy.isdigit() else None,
                row.get("Chip Name", ""),
            )
        )
    if header is None:
        raise NpuSmiError("npu-smi info -m printed no mapping header")
    return rows


def parse_processes(text: str) -> dict[tuple[int, int], tuple[int, ...]]:
    """The process table of ``npu-smi info``: (NPU ID, chip index) → process ids, the
    listing upstream reads through DCMI (``dcmi_get_device_resource_info``,
    devmanager.go GetDevProcessInfo). ``No running processes found in NPU n`` rows list
    nothing; a chip without rows runs nothing."""
    _check_dcmi(text)
    found: dict[tuple[int, int], list[int]] = {}
    in_table = False
    for line in text.splitlines():
        if "|" not in line:
            continue
        cells = _cells(line)
        first = cells[0].split()
        if first[:2] == ["NPU", "Chip"] and any("Process id" in c for c in cells):
            in_table = True
            continue
        if not in_table or len(first) != 2 or len(cells) < 2:
            continue
        pid = cells[1].split()[0] if cells[1] else ""
        if first[0].isdigit() and first[1].isdigit() and pid.isdigit():
            found.setdefault((int(first[0]), int(first[1])), []).append(int(pid))
    return {card: tuple(pids) for card, pids in found.items()}


_BOARD_ID = re.compile(r"^\s*Board ID\s*:\s*(0x[0-9a-fA-F]+|\d+)\s*$", re.MULTILINE)


def parse_board_id(text: str) -> int | None:
    """``Board ID`` of ``npu-smi info -t board -i <NPU ID>`` (``Board ID : 0x02``; DCMI
    ``dcmi_get_board_info``), None when the output has none."""
    _check_dcmi(text)
    found = _BOARD_ID.search(text)
    return None if found is None else int(found.group(1), 0)


def resource_of(model: str, table: Table) -> str:
    """The device type the kubelet sees (Huawei's ``pkg/common/device.go`` names)."""
    upper = model.upper()
    if "310P" in upper:
        return "Ascend310P"
    if "310" in upper or upper == "MINID":
        return "Ascend310"
    if "910" in upper or table.has_hbm:
        return "Ascend910"
    raise NpuSmiError(f"npu-smi chip model {model!r} is not an Ascend 310/310P/910 chip")


def product_of(resource: str, model: str, table: Table, count: int) -> str | None:
    """The chip_topology product, when one is known for this hardware."""
    if resource != "Ascend910":
        return None  # inference cards have no HCCS rings
    if table.second_column == "Phy-ID":  # only an A3 prints it (it names its dies' chips)
        # npu-smi cannot tell a SuperPoD server (superpod910a3x16): --product says so.
        return {16: "module910a3x16", 8: "module910a3x8"}.get(count)
    if "910B" in model.upper():
        return {8: "module910bx8", 16: "module910bx16"}.get(count)
    # A container may see a subset of a server: only a full server's count is trusted.
    return {8: "module910x8"}.get(count)


def discover(info: str, mapping: str | None = None) -> NodeChips:
    """Chips from ``npu-smi info`` (and ``npu-smi info -m`` when given).

    Logic id: the ``-m`` mapping, else the table's Device column (310 family), else the
    chip's position (DCMI numbers logic ids 0..n-1 in table order). Physical id: the A3
    ``Phy-ID`` column or a ``Chip Phy-ID`` mapping column, else the logic id, which is what
    they are on a bare-metal host; the DCMI path is the authority where ids are remapped.
    """
    table = parse_table(info)
    by_card = {(r.npu_id, r.chip_id): r for r in parse_mapping(mapping)} if mapping else {}
    chips = []
    for position, row in enumerate(table.chips):
        mapped = by_card.get((row.npu_id, row.chip_index))
        if mapping and mapped is None:
            raise NpuSmiError(
                f"npu-smi info -m has no row for NPU {row.npu_id} chip {row.chip_index}"
            )
        if mapped is not None:
            logic = mapped.logic_id
        elif table.second_column == "Device" and row.second_id is not None:
            logic = row.second_id
        else:
            logic = position
        if table.second_column == "Phy-ID" and row.second_id is not None:
            phy = row.second_id
        elif mapped is not None and mapped.phy_id is not None:
            phy = mapped.phy_id
        else:
            phy = logic
        chips.append(
            Chip(
                phy,
                logic,
                healthy=row.health in HEALTHY_STATES,
                model=row.model,
                card=(row.npu_id, row.chip_index),
            )
        )
    ids = [c.id for c in chips]
    if len(set(ids)) != len(ids):
        raise NpuSmiError(f"npu-smi reports physical ids {ids}: some appear twice")
    resource = resource_of(chips[0].model, table)
    product = product_of(resource, chips[0].model, table, len(chips))
    # Only the 910A's AI-core count (32) is certain from the model name alone.
    server_type = "Ascend910-32" if chips[0].model.upper() == "910A" else None
    die_size = DIE if table.second_column == "Phy-ID" else 0
    # The Name column is DCMI's chip name, which upstream's plugin writes as the node label
    # node.kubernetes.io/npu.chip.name (pkg/server/manager.go updateChipNameToNode); a name
    # that cannot be a label value is skipped, as there (updateNode).
    name = chips[0].model
    chip_name = name if LABEL_VALUE.fullmatch(name) else None
    return NodeChips(
        resource, product, tuple(chips), server_type, die_size=die_size, chip_name=chip_name
    )


Runner = Callable[[list[str]], str | None]


def run_npu_smi(args: list[str], timeout: float = 10.0) -> str:
    """Run npu-smi without a shell; its failures become NpuSmiError."""
    try:
        done = subprocess.run(
            ["npu-smi", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise NpuSmiError("npu-smi not found on PATH (is the Ascend driver mounted?)") from None
    except subprocess.TimeoutExpired:
        raise NpuSmiError(f"npu-smi {' '.join(args)} did not answer within {timeout} s") from None
    if done.returncode != 0:
        _check_dcmi(done.stdout + done.stderr)
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise NpuSmiError(f"npu-smi {' '.join(args)} exited {done.returncode}: {last[0]}")
    return done.stdout


def replay_runner(directory: Path) -> Runner:
    """Answers from recorded outputs: ``info.txt`` and, when present, ``info-m.txt``
    (None when the mapping was not recorded)."""

    def run(args: list[str]) -> str | None:
        path = directory / ("info-m.txt" if "-m" in args else "info.txt")
        if not path.is_file():
            return None
        return path.read_text(encoding="utf-8", errors="replace")

    return run


def read_chips(run: Runner = run_npu_smi) -> NodeChips:
    info = run(["info"])
    if info is None:
        raise NpuSmiError("no npu-smi info output (replay directory without info.txt?)")
    return discover(info, run(["info", "-m"]))
