"""The fake driver: YAML state, field-naming errors, and live reloads through watchdog."""

from __future__ import annotations

import os
import queue
from pathlib import Path

import pytest

from agent.deviceinfo_publisher import device_info
from chip_drivers.chips import DriverError, Network, NodeChips
from chip_drivers.fake import FakeDriver, parse_fake_state
from contract.deviceinfo import decode, encode

EIGHT = "product: module910x8\nchips:\n" + "".join(f"  - id: {i}\n" for i in range(8))


def test_everything_but_the_id_is_optional() -> None:
    state = parse_fake_state(EIGHT)
    assert state.product == "module910x8" and state.resource == "Ascend910"
    chip = state.chips[3]
    assert (chip.id, chip.logic_id, chip.healthy, chip.network, chip.ip) == (
        3,
        3,
        True,
        Network.UP,
        "",
    )


def test_all_fields_are_read() -> None:
    state = parse_fake_state(
        "chips:\n  - {id: 5, logic_id: 1, health: Unhealthy, network: down,"
        " fault_codes: ['80e18402'], ip: 10.0.0.15}\n"
    )
    chip = state.chips[0]
    assert (chip.id, chip.logic_id, chip.healthy, chip.network) == (5, 1, False, Network.DOWN)
    assert (chip.fault_codes, chip.ip) == (("80E18402",), "10.0.0.15")


def test_a_superpod_server_publishes_its_superpod_id_and_index() -> None:
    state = parse_fake_state(EIGHT + "super_pod_id: 3\nserver_index: 17\n")
    info = device_info(state, held=(), update_time=1_700_000_000)
    published = decode(encode(info))
    assert (published.super_pod_id, published.server_index) == (3, 17)
    assert decode(encode(device_info(parse_fake_state(EIGHT), (), 1))).super_pod_id is None


def test_an_a3_server_has_sixteen_chips_in_dies_of_two() -> None:
    state = parse_fake_state(
        "product: superpod910a3x16\nsuper_pod_id: 0\nserver_index: 1\nchips:\n"
        + "".join(f"  - id: {i}\n" for i in range(16))
    )
    assert (state.resource, len(state.chips), state.die_size) == ("Ascend910", 16, 2)
    assert [state.die_of(c) for c in (0, 1, 2, 15)] == [0, 0, 1, 7]
    assert (state.super_pod_id, state.server_index) == (0, 1)
    assert state.device_id(state.chips[15]) == "Ascend910-15"


def test_a_950_node_serves_npu_chips_named_by_their_npu_id() -> None:
    state = parse_fake_state(
        "chip_type: npu\nai_cores: 32\nchips:\n" + "".join(f"  - id: {i}\n" for i in range(16))
    )
    assert (state.resource, state.product, state.die_size) == ("npu", None, 0)
    assert state.device_id(state.chips[9]) == "npu-9"
    assert state.kind.resource == "huawei.com/npu"
    # Huawei's plugin labels a 950 node ``npu-<AI cores>`` (ascend-device-plugin
    # pkg/server/manager.go getNewNodeLabel).
    assert state.server_type == "npu-32"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("chip_type: npu\nchips:\n  - {id: 16}\n", "chips[0].id: 16 is outside npu (0-15)"),
        ("product: 7\nchips: []\n", "state.product: expected str, got 7"),
        ("chips: [", "not YAML"),
        ("- 1\n", "expected a mapping"),
        ("chips:\n  - {logic_id: 1}\n", "chips[0].id: missing"),
        ("chips:\n  - {id: 1}\n  - {id: 1}\n", "chips[1].id: chip 1 is named twice"),
        ("chips:\n  - {id: 8}\n", "chips[0].id: 8 is outside module910x8"),
        ("chips:\n  - {id: 1, health: Sick}\n", "chips[0].health: expected Healthy or Unhealthy"),
        ("chips:\n  - {id: 1, network: flaky}\n", "chips[0].network: expected up or down"),
        ("chips:\n  - {id: 1, fault_codes: [zz]}\n", "chips[0].fault_codes[0]"),
        ("chips:\n  - {id: '1'}\n", "chips[0].id: expected int"),
        ("product: gpu\nchips: []\n", "state.product: unknown product"),
        (
            "chips: []\nsuper_pod_id: -3\n",
            "state.super_pod_id: expected a number ≥ 0, -1 or -2, got -3",
        ),
    ],
)
def test_a_bad_state_file_names_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(DriverError) as raised:
        parse_fake_state(text)
    assert error in str(raised.value)


def test_a_bad_edit_keeps_the_last_good_state(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    path.write_text(EIGHT)
    driver = FakeDriver(path)
    good = driver.read()
    path.write_text("chips:\n  - {id: 1}\n  - {id: 1}\n")
    assert driver.read() == good
    assert "named twice" in driver.last_error


def test_an_unreadable_first_state_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DriverError, match=r"state\.yaml"):
        FakeDriver(tmp_path / "state.yaml").read()


def changes(path: Path) -> tuple[FakeDriver, queue.Queue[NodeChips]]:
    seen: queue.Queue[NodeChips] = queue.Queue()
    driver = FakeDriver(path)
    driver.read()
    driver.watch(seen.put)
    return driver, seen


def test_an_edit_in_place_is_noticed(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    path.write_text(EIGHT)
    driver, seen = changes(path)
    try:
        path.write_text(EIGHT.replace("id: 6\n", "{id: 6, health: Unhealthy}\n"))
        state = seen.get(timeout=5)
        assert not state.chips[6].healthy
    finally:
        driver.close()


def test_a_new_file_renamed_over_the_old_one_counts_as_a_change(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    path.write_text(EIGHT)
    driver, seen = changes(path)
    try:
        new = tmp_path / ".state.yaml.swp"
        new.write_text(EIGHT.replace("id: 2\n", "{id: 2, health: Unhealthy}\n"))
        os.replace(new, path)
        state = seen.get(timeout=5)
        assert not state.chips[2].healthy
        while not seen.empty():
            seen.get()
        path.write_text("not: [valid")  # a broken save is reported, not delivered
        with pytest.raises(queue.Empty):
            seen.get(timeout=1)
        assert "not YAML" in driver.last_error
    finally:
        driver.close()


def test_a_state_file_larger_than_any_server_is_refused_at_once(tmp_path: Path) -> None:
    path = tmp_path / "state.yaml"
    path.write_text(EIGHT)
    driver = FakeDriver(path)
    good = driver.read()
    path.write_text(EIGHT + "#" * (10 * 1024 * 1024))
    assert driver.read() == good
    assert "larger than 256 KiB" in driver.last_error
