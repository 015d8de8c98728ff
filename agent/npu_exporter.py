"""The series of Huawei's npu-exporter that ``npu-smi info`` can give (``--npu-exporter-series``),
under npu-exporter's names and label set, so dashboards and alerts written on them read the
agent: per chip ``id`` (the logic id), ``model_name``, ``vdie_id``, ``pcie_bus_info`` and the
holder's ``namespace``, ``pod_name``, ``container_name`` (Ascend/mind-cluster
component/npu-exporter collector/ and its docs' metric tables, recalled, not at hand here:
docs/operations.md lists what is served, what is not, and what is uncertain).

Values and units as npu-exporter's: health 1 healthy / 0 not, utilization in %, memory in MB,
temperature in °C, power in W. What the agent cannot read without DCMI is not served (no
series rather than a made-up 0): ``vdie_id`` and ``container_name`` are empty labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from chip_drivers.chips import Chip, NodeChips
from chip_drivers.npu_smi_readings import ChipReading
from infra.metrics import Family, Labels, capped

Readings = Mapping[tuple[int, int], ChipReading]


@dataclass(frozen=True, slots=True)
class ExporterReadings:
    """Read at each scrape: the chips the driver reported last, npu-smi's readings of them
    (None: a driver without npu-smi, only health is served) and chip id → holder pod
    (``namespace/name``; None: no Kubernetes API)."""

    chips: Callable[[], NodeChips | None]
    readings: Callable[[], Readings] | None
    holders: Callable[[], Mapping[int, str]] | None


def model_name(model: str) -> str:
    """npu-exporter's ``model_name``: DCMI's chip type and name (``Ascend`` + ``910B1``);
    npu-smi's Name column prints the name alone, or ``Ascend910`` on an A3."""
    return model if model.startswith("Ascend") else f"Ascend{model}"


def _labels(chip: Chip, reading: ChipReading | None, holder: str) -> Labels:
    namespace, _, pod = holder.partition("/")
    return (
        ("id", str(chip.logic_id)),
        ("model_name", model_name(chip.model)),
        ("vdie_id", ""),
        ("pcie_bus_info", "" if reading is None else reading.bus_id),
        ("namespace", capped(namespace)),
        ("pod_name", capped(pod)),
        ("container_name", ""),
    )


def exporter_families(
    node: NodeChips | None, readings: Readings | None, holders: Mapping[int, str] | None
) -> Iterable[Family]:
    chips = [] if node is None else list(node.chips)
    held = holders or {}
    rows = []
    for chip in chips:
        reading = None if readings is None or chip.card is None else readings.get(chip.card)
        rows.append((chip, reading, _labels(chip, reading, held.get(chip.id, ""))))
    yield Family(
        "machine_npu_nums",
        "gauge",
        "Amount of npu installed on the machine.",
        [("", (), len(chips))],
    )
    yield Family(
        "npu_chip_info_health_status",
        "gauge",
        "the npu health status (1: healthy, 0: unhealthy)",
        [("", labels, float(chip.healthy)) for chip, _, labels in rows],
    )
    if readings is None:
        return
    read = [(chip, r, labels) for chip, r, labels in rows if r is not None]

    def family(
        name: str,
        text: str,
        value: Callable[[ChipReading], float | None],
        among: list[tuple[Chip, ChipReading, Labels]] = read,
    ) -> Family:
        samples = [("", labels, v) for _, r, labels in among if (v := value(r)) is not None]
        return Family(name, "gauge", text, samples)

    def used(pair: tuple[float, float] | None) -> float | None:
        return None if pair is None or pair[1] <= 0 else pair[0]

    def total(pair: tuple[float, float] | None) -> float | None:
        return None if pair is None or pair[1] <= 0 else pair[1]

    yield family("npu_chip_info_utilization", "the ai core utilization (%)", lambda r: r.aicore)
    yield family("npu_chip_info_temperature", "the npu temperature (°C)", lambda r: r.temperature)
    yield family("npu_chip_info_power", "the npu power (W)", lambda r: r.power)
    yield family(
        "npu_chip_info_hbm_used_memory", "the npu hbm used memory (MB)", lambda r: used(r.hbm)
    )
    yield family(
        "npu_chip_info_hbm_total_memory", "the npu hbm total memory (MB)", lambda r: total(r.hbm)
    )
    # The device's DDR (npu-smi's Memory-Usage); an A2 or A3 prints 0 / 0: no DDR series.
    yield family("npu_chip_info_used_memory", "the npu used memory (MB)", lambda r: used(r.memory))
    yield family(
        "npu_chip_info_total_memory", "the npu total memory (MB)", lambda r: total(r.memory)
    )
    # Per container: the chips a pod holds (the chip's HBM, else its DDR).
    mine = [(chip, r, labels) for chip, r, labels in read if chip.id in held]

    def memory(r: ChipReading) -> tuple[float, float] | None:
        return r.hbm if r.hbm is not None else r.memory

    yield family(
        "container_npu_utilization",
        "the npu ai core utilization in container (%)",
        lambda r: r.aicore,
        mine,
    )
    yield family(
        "container_npu_used_memory",
        "the npu used memory in container (MB)",
        lambda r: used(memory(r)),
        mine,
    )
    yield family(
        "container_npu_total_memory",
        "the npu total memory in container (MB)",
        lambda r: total(memory(r)),
        mine,
    )


def collect(source: ExporterReadings) -> Iterable[Family]:
    """The families of one scrape."""
    return exporter_families(
        source.chips(),
        None if source.readings is None else source.readings(),
        None if source.holders is None else source.holders(),
    )
