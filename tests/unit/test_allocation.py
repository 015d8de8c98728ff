"""The agent's pure answers: preferred chips and container responses."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.allocation.base import InvalidRequest
from agent.allocation.kubelet_requests import (
    check_allocate_request,
    check_device_ids,
    container_response,
    preferred_chips,
)
from chip_drivers.chips import Chip, NodeChips
from deviceplugin_api.v1beta1 import api_pb2 as dp


def node(count: int, product: str | None) -> NodeChips:
    return NodeChips("Ascend910", product, tuple(Chip(i, i) for i in range(count)))


def names(*ids: int) -> list[str]:
    return [f"Ascend910-{i}" for i in ids]


def test_two_chips_come_from_the_ring_with_exactly_two_free() -> None:
    assert preferred_chips(node(8, "module910x8"), names(0, 1, 2, 5, 6), [], 2) == names(5, 6)


def test_chips_the_kubelet_must_keep_are_kept_and_completed_inside_their_ring() -> None:
    chosen = preferred_chips(node(8, "module910x8"), names(0, 1, 2, 4, 5, 6, 7), names(5), 3)
    assert chosen == names(5, 4, 6)


def test_sixteen_chip_servers_pair_chip_i_with_i_plus_8_above_one_group() -> None:
    available = names(*range(16))
    assert preferred_chips(node(16, "module910bx16"), available, [], 10) == names(
        0, 8, 1, 9, 2, 10, 3, 11, 4, 12
    )


def test_without_a_known_topology_the_lowest_ids_are_suggested() -> None:
    assert preferred_chips(node(4, None), names(3, 1, 2), [], 2) == names(1, 2)


def test_the_ascend_runtime_gets_physical_ids_in_order() -> None:
    response = container_response([Chip(4, 0), Chip(5, 1)], ascend_runtime=True)
    assert dict(response.envs) == {"ASCEND_VISIBLE_DEVICES": "4,5", "ASCEND_RUNTIME_OPTIONS": ""}


def test_without_the_runtime_only_present_manager_devices_are_listed(tmp_path: Path) -> None:
    (tmp_path / "hisi_hdc").touch()
    response = container_response([Chip(2, 2)], ascend_runtime=False, dev_root=tmp_path)
    assert [(d.container_path, d.host_path) for d in response.devices] == [
        ("/dev/davinci_manager", str(tmp_path / "davinci_manager")),
        ("/dev/hisi_hdc", str(tmp_path / "hisi_hdc")),
        ("/dev/davinci2", str(tmp_path / "davinci2")),
    ]


def test_more_than_800_ids_in_one_container_request_are_refused() -> None:
    known = {f"Ascend910-{i}": Chip(i, i) for i in range(801)}
    with pytest.raises(InvalidRequest, match="801 device ids"):
        check_device_ids(list(known), known, "container request 0")


def test_one_allocate_never_gives_a_chip_to_two_containers() -> None:
    request = dp.AllocateRequest(
        container_requests=[
            dp.ContainerAllocateRequest(devices_ids=names(0, 1)),
            dp.ContainerAllocateRequest(devices_ids=names(1)),
        ]
    )
    with pytest.raises(InvalidRequest, match="container requests 0 and 1 both name Ascend910-1"):
        check_allocate_request(request, node(8, "module910x8"))
