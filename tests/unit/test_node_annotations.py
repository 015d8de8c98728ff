"""The node annotations Huawei's device plugin writes (Ascend/mind-cluster 22bb3d98
component/ascend-device-plugin pkg/server/manager.go getNewNodeAnnotation), per product, read
back by the rules of their readers: ClusterD (component/clusterd/pkg/domain/node/
node_storage.go getBaseDevInfos, getNodeDevice) and Huawei's Volcano on the 950
(component/ascend-for-volcano/plugin/node.go buildPhyIdToDeviceIdMap)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from agent.node_annotations import NODE_ANNOTATIONS, node_annotations
from chip_drivers.chips import Chip, DriverError, NodeChips
from chip_drivers.fake import parse_fake_state

ROOT = Path(__file__).parents[2]
A3 = "product: superpod910a3x16\nsuper_pod_id: 2\nserver_index: 5\nchips:\n" + "".join(
    f"  - {{id: {i}, ip: 10.0.0.{i}, super_device_id: {80 + i}}}\n" for i in range(16)
)
A950 = (
    "chip_type: npu\nsuper_pod_id: 3\nserver_index: 7\nrack_id: 1\nchips:\n"
    "  - {id: 0, logic_id: 4, ip: 10.0.1.0, super_device_id: 200}\n"
    "  - {id: 1, logic_id: 5, ip: 10.0.1.1, super_device_id: 201}\n"
)


def clusterd_node_device(annotations: dict[str, str]) -> dict[str, str] | None:
    """ClusterD's NodeDevice.DeviceMap (physical id → super device id) of a non-950 node:
    the JSON decoded into map[string]*NpuBaseInfo{IP string; SuperDeviceID uint32}, each
    name with its "Ascend910-" prefix trimmed a number, else no device map at all."""
    raw = json.loads(annotations["baseDeviceInfos"])
    if not raw or len(raw) > 128:
        return None
    devices = {}
    for name, info in raw.items():
        assert isinstance(info["IP"], str)
        assert isinstance(info["SuperDeviceID"], int) and 0 <= info["SuperDeviceID"] < 2**32
        physical = name.removeprefix("Ascend910-")
        if not physical.isdigit():
            return None
        devices[physical] = str(info["SuperDeviceID"])
    return devices


def volcano_phy_to_device_id(annotations: dict[str, str]) -> dict[int, int]:
    """Volcano's PhyIDToDeviceIDMap on a 950 node: every entry must carry DeviceID."""
    mapped = {}
    for name, info in json.loads(annotations["baseDeviceInfos"]).items():
        assert info.get("DeviceID") is not None, "lack device id in baseDeviceInfos"
        mapped[int(name.split("-")[1])] = info["DeviceID"]
    return mapped


def test_a_910_server_without_superpod_information() -> None:
    node = NodeChips("Ascend910", "module910x8", (Chip(0, 0, ip="10.0.0.10"), Chip(1, 1)))
    written = node_annotations(node)
    assert written == {
        "baseDeviceInfos": '{"Ascend910-0":{"IP":"10.0.0.10","SuperDeviceID":0},'
        '"Ascend910-1":{"IP":"","SuperDeviceID":0}}',
        "superPodID": "-2",
        "serverIndex": "-2",
        "serverType": "",
    }
    assert clusterd_node_device(written) == {"0": "0", "1": "0"}


def test_an_a3_superpod_server() -> None:
    written = node_annotations(parse_fake_state(A3))
    assert (written["superPodID"], written["serverIndex"], written["serverType"]) == (
        "2",
        "5",
        "A3",
    )
    assert "rackID" not in written
    devices = clusterd_node_device(written)
    assert devices is not None and devices["15"] == "95" and len(devices) == 16
    # Go's encoding of a map: keys in byte order ("Ascend910-10" before "Ascend910-2").
    assert list(json.loads(written["baseDeviceInfos"]))[:3] == [
        "Ascend910-0",
        "Ascend910-1",
        "Ascend910-10",
    ]


def test_a_950_superpod_server_writes_device_ids_and_its_rack() -> None:
    written = node_annotations(parse_fake_state(A950))
    assert written["baseDeviceInfos"] == (
        '{"npu-0":{"DeviceID":4,"IP":"10.0.1.0","SuperDeviceID":200},'
        '"npu-1":{"DeviceID":5,"IP":"10.0.1.1","SuperDeviceID":201}}'
    )
    assert (written["serverType"], written["rackID"], written["superPodID"]) == ("npu", "1", "3")
    assert volcano_phy_to_device_id(written) == {0: 4, 1: 5}


def test_an_inference_node_gets_an_empty_server_type() -> None:
    written = node_annotations(parse_fake_state("chip_type: Ascend310P\nchips: [{id: 0}]\n"))
    assert written["serverType"] == "" and "Ascend310P-0" in written["baseDeviceInfos"]


def test_the_chart_lets_the_agent_write_every_annotation_it_writes() -> None:
    policy = (ROOT / "charts/ascend-npu/templates/admission-policy.yaml").read_text()
    (allowed,) = re.findall(r"- name: nodeAnnotations\n\s+expression: \"\[(.*)\]\"", policy)
    assert set(NODE_ANNOTATIONS) <= {key.strip(" '") for key in allowed.split(",")}


def test_the_fake_state_checks_its_superpod_and_expected_chips() -> None:
    node = parse_fake_state(
        "chips: [{id: 0, super_device_id: 3}, {id: 1}]\nexpected_chips: [0, 1, 2]\n"
    )
    assert [c.super_device_id for c in node.chips] == [3, None]
    assert node.missing == (2,)
    with pytest.raises(DriverError, match=r"chips\[0\]\.super_device_id: expected a number"):
        parse_fake_state("chips: [{id: 0, super_device_id: x}]\n")
    with pytest.raises(DriverError, match=r"state\.expected_chips\[0\]: expected a chip id"):
        parse_fake_state("chips: [{id: 0}]\nexpected_chips: [8]\n")
