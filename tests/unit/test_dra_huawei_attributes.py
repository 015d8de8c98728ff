"""Each device carries Huawei's DRA driver's attributes beside ours (Ascend/mind-cluster
``component/ascend-dynamic-resource-allocation``, ``internal/device/generation_910.go``,
``generation_950.go``: ``deviceType`` the device manager's chip type, ``physicId`` the physical
id), in Huawei's domain whatever our driver's name, and ``group``, its product's group."""

from __future__ import annotations

import pytest

from chip_drivers.chips import Chip, NodeChips
from contract.dra import DEFAULT_DRIVER
from dra_driver.slices import HUAWEI_DOMAIN, desired_slice


def attributes(driver: str, chips: NodeChips, chip: int) -> dict[str, object]:
    published = desired_slice(driver, "n", "uid", chips)
    (device,) = [d for d in published["spec"]["devices"] if d["name"] == f"npu-{chip}"]
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


def node(resource: str, product: str | None, count: int = 8) -> NodeChips:
    return NodeChips(resource, product, tuple(Chip(i, i) for i in range(count)))


@pytest.mark.parametrize(
    ("chips", "device_type", "group"),
    [
        (node("Ascend910", "module910x8"), "Ascend910", 1),  # ring of 4
        (node("Ascend910", "module910bx8"), "Ascend910B", 0),
        (node("Ascend910", "module910bx16", 16), "Ascend910B", 0),  # half of 8
        (node("Ascend910", "module910a3x16", 16), "Ascend910A3", 2),  # die of 2
        (node("npu", "atlas350-4px8"), "Ascend910A5", 1),  # mesh of 4
        (node("npu", None), "Ascend910A5", 0),  # a 1p server: one group
    ],
)
def test_huaweis_attributes_and_the_group_are_published_beside_ours(
    chips: NodeChips, device_type: str, group: int | None
) -> None:
    found = attributes(DEFAULT_DRIVER, chips, 5)
    assert found[f"{HUAWEI_DOMAIN}/deviceType"] == device_type
    assert found[f"{HUAWEI_DOMAIN}/physicId"] == 5 == found["physicalID"]
    assert found.get("group") == group
    assert "deviceType" not in found, "ours stay in our domain"


def test_under_huaweis_name_they_are_the_drivers_own() -> None:
    found = attributes(HUAWEI_DOMAIN, node("Ascend910", "module910x8"), 6)
    assert (found["deviceType"], found["physicId"], found["hccsRing"]) == ("Ascend910", 6, 1)
    assert not [k for k in found if "/" in k]
