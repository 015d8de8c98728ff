"""npu-exporter's series from recorded ``npu-smi info`` tables (agent/npu_exporter.py through
the npu-smi driver's own poll): every served series, read back with prometheus_client's parser,
under npu-exporter's names and its seven chip labels; what npu-smi prints as NA gives no series."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from agent.metrics import AgentMetrics
from agent.npu_exporter import ExporterReadings, collect
from chip_drivers.chips import Chip, NodeChips
from chip_drivers.npu_smi_driver import NpuSmiDriver

SAMPLES = Path(__file__).parents[1] / "data" / "npu_smi"
NO_VNPUS = (SAMPLES.parent / "npu_smi_vnpu" / "info-vnpu-empty.txt").read_text(encoding="utf-8")
LABELS = {"id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name"}
PER_CHIP = {
    "npu_chip_info_health_status",
    "npu_chip_info_utilization",
    "npu_chip_info_temperature",
    "npu_chip_info_power",
    "npu_chip_info_hbm_used_memory",
    "npu_chip_info_hbm_total_memory",
    "npu_chip_info_used_memory",
    "npu_chip_info_total_memory",
    "container_npu_utilization",
    "container_npu_used_memory",
    "container_npu_total_memory",
}
Series = dict[str, dict[str, tuple[dict[str, str], float]]]  # name → chip id → labels, value


def scrape(table: str, holders: Mapping[int, str] | None = None) -> Series:
    """The exporter's series of a node whose npu-smi printed ``table``, by name and chip id."""
    text = (SAMPLES / table).read_text(encoding="utf-8")
    # A 310P's driver also asks for its vNPUs: none.
    driver = NpuSmiDriver(
        lambda args: text if args == ["info"] else NO_VNPUS if "info-vnpu" in args else None
    )
    node = driver.read()
    metrics = AgentMetrics()
    source = ExporterReadings(lambda: node, driver.readings, lambda: holders or {})
    metrics.registry.register(lambda: collect(source))
    series: Series = {}
    for family in text_string_to_metric_families(metrics.text()):
        for sample in family.samples:
            if sample.name in PER_CHIP:
                assert set(sample.labels) == LABELS, sample
                by_chip = series.setdefault(sample.name, {})
                assert sample.labels["id"] not in by_chip, "one series per chip"
                by_chip[sample.labels["id"]] = (sample.labels, sample.value)
            elif sample.name == "machine_npu_nums":
                series[sample.name] = {"": (sample.labels, sample.value)}
    return series


def values(series: Series, name: str) -> dict[str, float]:
    return {chip: value for chip, (_, value) in series.get(name, {}).items()}


def test_a_910b_server_shows_power_temperature_usage_and_hbm_per_chip() -> None:
    series = scrape("910b1-npu-smi-info-24.1.rc3.txt", {0: "team-a/train-0"})
    assert values(series, "machine_npu_nums") == {"": 8}
    assert values(series, "npu_chip_info_health_status") == {str(i): 1 for i in range(8)}
    power = values(series, "npu_chip_info_power")
    assert power["0"] == 94.6 and power["4"] == 100.6 and len(power) == 8
    assert values(series, "npu_chip_info_temperature")["1"] == 48
    assert values(series, "npu_chip_info_utilization") == {str(i): 0 for i in range(8)}
    assert values(series, "npu_chip_info_hbm_used_memory")["0"] == 3373
    assert values(series, "npu_chip_info_hbm_total_memory") == {str(i): 65536 for i in range(8)}
    # An A2 has no device DDR (npu-smi prints 0 / 0): no DDR series rather than zeros.
    assert "npu_chip_info_used_memory" not in series
    assert "npu_chip_info_total_memory" not in series
    labels, _ = series["npu_chip_info_power"]["0"]
    assert labels == {
        "id": "0",
        "model_name": "Ascend910B1",
        "vdie_id": "",
        "pcie_bus_info": "0000:C1:00.0",
        "namespace": "team-a",
        "pod_name": "train-0",
        "container_name": "",
    }
    assert series["npu_chip_info_power"]["1"][0]["pod_name"] == ""  # a free chip
    # Per container: only the held chip, its AI core usage and HBM.
    assert values(series, "container_npu_utilization") == {"0": 0}
    assert values(series, "container_npu_used_memory") == {"0": 3373}
    assert values(series, "container_npu_total_memory") == {"0": 65536}
    assert series["container_npu_used_memory"]["0"][0]["namespace"] == "team-a"


def test_busy_chips_show_their_ai_core_usage_and_full_hbm() -> None:
    series = scrape("910b1-npu-smi-info-23.0.rc3.3-procs-excerpt.txt", {1: "ns/p"})
    assert values(series, "npu_chip_info_utilization") == {"0": 55, "1": 66}
    assert values(series, "npu_chip_info_hbm_used_memory") == {"0": 65099, "1": 65098}
    assert values(series, "container_npu_utilization") == {"1": 66}


def test_an_a3_server_shows_each_die_and_no_power_where_npu_smi_prints_none() -> None:
    series = scrape("a3-910c-npu-smi-info-25.2.0-procs.txt")
    assert values(series, "machine_npu_nums") == {"": 16}
    assert len(values(series, "npu_chip_info_temperature")) == 16
    power = values(series, "npu_chip_info_power")
    assert power["0"] == 211.3 and "1" not in power  # "-": the card's power is on die 0
    assert series["npu_chip_info_temperature"]["1"][0]["pcie_bus_info"] == "0000:9F:00.0"
    assert series["npu_chip_info_temperature"]["0"][0]["model_name"] == "Ascend910"
    assert values(series, "npu_chip_info_hbm_used_memory")["1"] == 61625
    assert "container_npu_utilization" not in series  # no pod holds a chip


def test_inference_cards_show_ddr_memory_and_no_power_where_npu_smi_prints_na() -> None:
    series = scrape("310p3-300i-pro-npu-smi-info-25.2.0.txt")
    assert values(series, "machine_npu_nums") == {"": 6}
    assert "npu_chip_info_power" not in series  # NA on the 300I Pro
    assert values(series, "npu_chip_info_used_memory")["0"] == 1851
    assert values(series, "npu_chip_info_total_memory")["0"] == 21527
    assert "npu_chip_info_hbm_total_memory" not in series
    assert series["npu_chip_info_temperature"]["0"][0]["model_name"] == "Ascend310P3"


def test_a_910_server_shows_both_ddr_and_hbm() -> None:
    series = scrape("910-atlas800-9010-npu-smi-info-22.0.3.1.txt")
    assert values(series, "npu_chip_info_power")["0"] == 67.2
    assert values(series, "npu_chip_info_used_memory")["0"] == 1867
    assert values(series, "npu_chip_info_total_memory")["0"] == 15077
    assert values(series, "npu_chip_info_hbm_total_memory")["0"] == 32768
    assert series["npu_chip_info_power"]["0"][0]["model_name"] == "Ascend910A"


def test_without_npu_smi_only_the_count_and_health_are_served() -> None:
    node = NodeChips(
        "Ascend910", "module910x8", tuple(Chip(i, i, healthy=i != 2) for i in range(8))
    )
    metrics = AgentMetrics()
    source = ExporterReadings(lambda: node, None, None)
    metrics.registry.register(lambda: collect(source))
    names = {
        sample.name
        for family in text_string_to_metric_families(metrics.text())
        for sample in family.samples
        if sample.name in PER_CHIP or sample.name == "machine_npu_nums"
    }
    assert names == {"machine_npu_nums", "npu_chip_info_health_status"}
    health = {
        sample.labels["id"]: sample.value
        for family in text_string_to_metric_families(metrics.text())
        for sample in family.samples
        if sample.name == "npu_chip_info_health_status"
    }
    assert health == {str(i): float(i != 2) for i in range(8)}
