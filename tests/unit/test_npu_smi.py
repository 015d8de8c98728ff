"""npu-smi parsing on recorded public outputs of every chip generation (tests/data/npu_smi)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chip_drivers.chips import UNHEALTHY
from chip_drivers.npu_smi import (
    NpuSmiError,
    discover,
    parse_mapping,
    parse_table,
    read_chips,
    replay_runner,
)

DATA = Path(__file__).parents[1] / "data" / "npu_smi"


def sample(name: str) -> str:
    return (DATA / name).read_text()


TABLES = {
    # file: (resource, product, chip count, first physical ids)
    "310-atlas800-3000-npu-smi-info-20.2.0.txt": ("Ascend310", None, 4, [0, 1, 2, 3]),
    "310-atlas800-3000-npu-smi-info-21.0.4.txt": ("Ascend310", None, 4, [3, 4, 5, 6]),
    "310b-200ia2-npu-smi-info-23.0.rc3-doc.txt": ("Ascend310", None, 1, [0]),
    "310b-200ia2-npu-smi-info-24.1.rc3-doc.txt": ("Ascend310", None, 1, [0]),
    "310p3-300i-pro-npu-smi-info-25.2.0.txt": ("Ascend310P", None, 6, [0, 1, 2, 3, 4, 5]),
    "310p3-npu-smi-info-24.1.rc2-user-truncated.txt": ("Ascend310P", None, 1, [0]),
    "910-atlas800-9010-npu-smi-info-22.0.3.1.txt": ("Ascend910", "module910x8", 8, list(range(8))),
    "910-npu-smi-info-23.0.5-doc-elided.txt": ("Ascend910", None, 2, [0, 1]),
    "910b1-npu-smi-info-23.0.rc3.3-procs-excerpt.txt": ("Ascend910", None, 2, [0, 1]),
    "910b1-npu-smi-info-24.1.rc3.txt": ("Ascend910", "module910bx8", 8, list(range(8))),
    "910b2-npu-smi-info-24.1.0.3.txt": ("Ascend910", "module910bx8", 8, list(range(8))),
    "910b4-1-npu-smi-info-25.2.0-masked-busid.txt": ("Ascend910", None, 2, [0, 1]),
    "910b4-npu-smi-info-24.1.rc1-container.txt": ("Ascend910", None, 1, [0]),
    "a3-910c-npu-smi-info-25.2.0-procs.txt": (
        "Ascend910",
        "module910a3x16",
        16,
        list(range(16)),
    ),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_recorded_table_layout_parses(name: str) -> None:
    resource, product, count, ids = TABLES[name]
    chips = discover(sample(name))
    assert (chips.resource, chips.product, len(chips.chips)) == (resource, product, count)
    assert [c.id for c in chips.chips] == ids
    assert all(c.healthy for c in chips.chips)


def test_the_process_table_is_not_read_as_chips() -> None:
    table = parse_table(sample("910b1-npu-smi-info-23.0.rc3.3-procs-excerpt.txt"))
    assert [c.npu_id for c in table.chips] == [0, 1]


def test_a3_takes_the_physical_id_from_the_phy_id_column_of_both_dies() -> None:
    table = parse_table(sample("a3-910c-npu-smi-info-25.2.0-procs.txt"))
    assert table.second_column == "Phy-ID"
    assert [(c.npu_id, c.chip_index, c.second_id) for c in table.chips[:4]] == [
        (0, 0, 0),
        (0, 1, 1),
        (1, 0, 2),
        (1, 1, 3),
    ]


def test_an_a3_is_recognised_with_its_dies_of_two_chips() -> None:
    # npu-smi names an A3 chip only "Ascend910": the Phy-ID layout (8 NPUs x 2 chips) tells it.
    chips = discover(sample("a3-910c-npu-smi-info-25.2.0-procs.txt"))
    assert (chips.product, chips.die_size) == ("module910a3x16", 2)
    assert [chips.die_of(c.id) for c in chips.chips[:4]] == [0, 0, 1, 1]
    assert [c.card for c in chips.chips[-2:]] == [(7, 0), (7, 1)]
    a2 = discover(sample("910b1-npu-smi-info-24.1.rc3.txt"))
    assert (a2.die_size, a2.die_of(3)) == (0, None)


def test_310p_card_ids_are_not_chip_ids() -> None:
    table = parse_table(sample("310p3-300i-pro-npu-smi-info-25.2.0.txt"))
    assert [c.npu_id for c in table.chips] == [0, 32, 96, 32768, 32800, 32896]
    assert [c.second_id for c in table.chips] == [0, 1, 2, 3, 4, 5]


def test_a_hyphenated_chip_model_is_kept_whole() -> None:
    chips = discover(sample("910b4-1-npu-smi-info-25.2.0-masked-busid.txt"))
    assert chips.chips[0].model == "910B4-1"


@pytest.mark.parametrize(
    "name",
    ["npu-smi-error-dcmi-init-8005-container.txt", "npu-smi-error-dcmi-init-8020-device-used.txt"],
)
def test_a_dcmi_init_failure_is_an_error_not_zero_chips(name: str) -> None:
    with pytest.raises(NpuSmiError, match=r"ret is -80"):
        discover(sample(name))


def test_output_without_a_table_is_an_error() -> None:
    with pytest.raises(NpuSmiError, match="no chip table"):
        discover("npu-smi: command output was empty\n")


def test_a_table_cut_between_the_two_rows_of_a_chip_is_an_error() -> None:
    lines = sample("910b1-npu-smi-info-24.1.rc3.txt").splitlines()
    with pytest.raises(NpuSmiError, match="is cut"):
        discover("\n".join(lines[:7]))


def test_the_mapping_gives_logic_ids_and_skips_mcu_rows() -> None:
    rows = parse_mapping(sample("910b3-npu-smi-info-m-excerpt.txt"))
    assert [(r.npu_id, r.chip_id, r.logic_id) for r in rows] == [(3, 0, 0), (4, 0, 1)]
    assert rows[0].model == "Ascend 910B3"


@pytest.mark.parametrize(
    "name",
    [
        "310-atlas800-3000-npu-smi-info-m-20.2.0.txt",
        "310-atlas800-3000-npu-smi-info-m-21.0.x.txt",
        "910-atlas800-9010-npu-smi-info-m.txt",
        "310b-200ia2-npu-smi-info-m-doc.txt",
    ],
)
def test_every_recorded_mapping_layout_parses(name: str) -> None:
    rows = parse_mapping(sample(name))
    assert rows and all(r.model and r.model.lower() != "mcu" for r in rows)


def test_table_and_mapping_join_on_npu_and_chip() -> None:
    chips = discover(
        sample("910-atlas800-9010-npu-smi-info-22.0.3.1.txt"),
        sample("910-atlas800-9010-npu-smi-info-m.txt"),
    )
    assert [(c.id, c.logic_id) for c in chips.chips] == [(i, i) for i in range(8)]


def test_a_chip_missing_from_the_mapping_is_an_error() -> None:
    with pytest.raises(NpuSmiError, match="no row for NPU 0 chip 0"):
        discover(
            sample("910b1-npu-smi-info-24.1.rc3.txt"), sample("910b3-npu-smi-info-m-excerpt.txt")
        )


def test_an_alarmed_chip_is_unhealthy_and_a_warning_is_not() -> None:
    text = sample("910b1-npu-smi-info-24.1.rc3.txt").splitlines()
    text[6] = text[6].replace("| OK            |", "| Alarm         |")
    text[9] = text[9].replace("| OK            |", "| Warning       |")
    chips = discover("\n".join(text)).chips
    assert chips[0].health == UNHEALTHY
    assert chips[1].healthy


def test_replay_reads_info_and_the_optional_mapping(tmp_path: Path) -> None:
    (tmp_path / "info.txt").write_text(sample("910-atlas800-9010-npu-smi-info-22.0.3.1.txt"))
    assert len(read_chips(replay_runner(tmp_path)).chips) == 8
    (tmp_path / "info-m.txt").write_text(sample("910b3-npu-smi-info-m-excerpt.txt"))
    with pytest.raises(NpuSmiError):
        read_chips(replay_runner(tmp_path))


def test_replay_without_info_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(NpuSmiError, match=r"without info\.txt"):
        read_chips(replay_runner(tmp_path))
