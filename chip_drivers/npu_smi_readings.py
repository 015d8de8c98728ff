"""What ``npu-smi info``'s table says of each chip beyond its health: power, temperature, AI
core usage, memory (the device's DDR) and HBM used and total, and its PCIe bus id: the
readings the agent exports under npu-exporter's names (``agent/npu_exporter.py``).

Parsed from the same recorded outputs as the chips (``tests/data/npu_smi``); not run on real
hardware here. A value npu-smi prints as ``NA`` or ``-`` (a 310P's power, an A3's second die's
power) is None: no series.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chip_drivers.npu_smi import NpuSmiError, parse_table

_PAIR = re.compile(r"(\S+?)\s*/\s*(\S+)")  # "3373 / 65536", "61609/ 65536"


@dataclass(frozen=True, slots=True)
class ChipReading:
    card: tuple[int, int]  # npu-smi's (NPU ID, chip index)
    health: str  # npu-smi's Health column (OK, Warning, Alarm, Critical, ...)
    bus_id: str  # PCIe bus id, "" when npu-smi prints NA (an SoC)
    power: float | None  # W
    temperature: float | None  # °C
    aicore: float | None  # AI core usage, %
    memory: tuple[float, float] | None  # the device's DDR used, total (MB)
    hbm: tuple[float, float] | None  # HBM used, total (MB): only where the table has HBM


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # NA, -


def _pair(found: tuple[str, str]) -> tuple[float, float] | None:
    used, total = _number(found[0]), _number(found[1])
    return None if used is None or total is None else (used, total)


def _split(cell: str) -> tuple[list[str], list[tuple[str, str]]]:
    """A cell's single values and its ``used / total`` pairs, in order."""
    return _PAIR.sub(" ", cell).split(), _PAIR.findall(cell)


def chip_readings(text: str) -> dict[tuple[int, int], ChipReading]:
    """Each chip's readings by (NPU ID, chip index); NpuSmiError when there is no table."""
    table = parse_table(text)
    found = {}
    for row in table.chips:
        if len(row.top) < 3 or len(row.bottom) < 3:
            raise NpuSmiError(f"npu-smi row not understood: {' | '.join(row.top)}")
        top, _ = _split(row.top[2])  # Power(W) Temp(C) [Hugepages used / total]
        bottom, pairs = _split(row.bottom[2])  # AICore(%) Memory used / total [HBM u / t]
        bus = row.bottom[1]
        found[(row.npu_id, row.chip_index)] = ChipReading(
            (row.npu_id, row.chip_index),
            row.health,
            "" if bus.upper() == "NA" else bus,
            _number(top[0]) if top else None,
            _number(top[1]) if len(top) > 1 else None,
            _number(bottom[0]) if bottom else None,
            _pair(pairs[0]) if pairs else None,
            _pair(pairs[1]) if table.has_hbm and len(pairs) > 1 else None,
        )
    return found
