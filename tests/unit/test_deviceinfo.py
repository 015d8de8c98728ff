"""The DeviceInfo ConfigMap: Huawei's layout and CheckCode, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.deviceinfo_publisher import configmap, device_info
from chip_drivers.chips import Chip, Network, NodeChips
from contract.chip_names import InvalidInput
from contract.deviceinfo import DeviceInfo, check_code, chip_list, decode, encode
from contract.go_json import go_json

EIGHT = ",".join(f"Ascend910-{i}" for i in range(8))


def test_upstream_case22_the_check_code_of_the_reference_vector() -> None:
    devices = {
        "huawei.com/Ascend910": EIGHT,
        "huawei.com/Ascend910-NetworkUnhealthy": "",
        "huawei.com/Ascend910-Unhealthy": "",
    }
    assert check_code(devices, 1657527526) == (
        "6b8de396fd9945be231d24720ca66ed950baf0a5972717f335aad7571cb6457a"
    )


def test_the_check_code_of_an_empty_device_list() -> None:
    assert check_code({}, 1657527526) == (
        "ef1abff02045b3c185193664567966e9bebef4c08fa4a7c7f2d861739a4041b8"
    )


def test_go_escapes_html_characters_and_line_separators_but_not_other_unicode() -> None:
    assert go_json({"b": "<&>", "a": "\u2028é"}) == '{"a":"\\u2028é","b":"\\u003c\\u0026\\u003e"}'


def test_chip_lists_are_sorted_as_strings_like_the_device_plugin() -> None:
    assert (
        chip_list([2, 10, 1, 9, 0])
        == "Ascend910-0,Ascend910-1,Ascend910-10,Ascend910-2,Ascend910-9"
    )


def test_the_configmap_layout_is_the_device_plugins() -> None:
    data = encode(
        DeviceInfo(frozenset({0, 1}), frozenset({7}), frozenset(), update_time=1700000000)
    )
    assert data["ManuallySeparateNPU"] == ""
    body = data["DeviceInfoCfg"]
    assert body.startswith(
        '{"DeviceInfo":{"DeviceList":{"huawei.com/Ascend910":"Ascend910-0,Ascend910-1",'
        '"huawei.com/Ascend910-Fault":"[]","huawei.com/Ascend910-NetworkUnhealthy":"",'
        # Written empty too, as upstream's ascend910.go updateDeviceInfo does.
        '"huawei.com/Ascend910-Recovering":"",'
        '"huawei.com/Ascend910-Unhealthy":"Ascend910-7"},"UpdateTime":1700000000},"CheckCode":"'
    )
    cache = json.loads(body)
    assert cache["CheckCode"] == check_code(cache["DeviceInfo"]["DeviceList"], 1700000000)


def test_what_is_encoded_decodes_to_the_same_chips() -> None:
    info = DeviceInfo(frozenset({0, 3, 12}), frozenset({5}), frozenset({3}), update_time=42)
    back = decode(encode(info))
    assert (back.free, back.unhealthy, back.network_unhealthy, back.update_time) == (
        info.free,
        info.unhealthy,
        info.network_unhealthy,
        42,
    )


def test_a_configmap_whose_check_code_does_not_match_is_refused() -> None:
    data = encode(DeviceInfo(frozenset({0, 1}), frozenset(), frozenset(), update_time=1))
    edited = {"DeviceInfoCfg": data["DeviceInfoCfg"].replace("Ascend910-1", "Ascend910-2")}
    with pytest.raises(InvalidInput, match="CheckCode does not match"):
        decode(edited)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({}, "no DeviceInfoCfg"),
        ({"DeviceInfoCfg": "{"}, "not a DeviceInfo cache"),
        (
            {"DeviceInfoCfg": '{"DeviceInfo":{"DeviceList":[],"UpdateTime":1},"CheckCode":""}'},
            "map of strings",
        ),
        (
            {"DeviceInfoCfg": '{"DeviceInfo":{"DeviceList":{},"UpdateTime":"1"},"CheckCode":""}'},
            "not an integer",
        ),
    ],
)
def test_a_malformed_configmap_is_refused_with_the_reason(data: dict[str, str], error: str) -> None:
    with pytest.raises(InvalidInput, match=error):
        decode(data)


def with_device_list(devices: dict[str, str]) -> dict[str, str]:
    cache = {
        "DeviceInfo": {"DeviceList": devices, "UpdateTime": 1},
        "CheckCode": check_code(devices, 1),
    }
    return {"DeviceInfoCfg": json.dumps(cache)}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (with_device_list({"huawei.com/Ascend910-Fault": "{}"}), "Ascend910-Fault] is malformed"),
        (with_device_list({"huawei.com/Ascend910-Fault": '[{"x": 1}]'}), "npu_name"),
        (
            with_device_list(
                {"huawei.com/Ascend910-Fault": '[{"npu_name": "Ascend910-0,Ascend910-1"}]'}
            ),
            "is not one ch",
        ),
        (with_device_list({"huawei.com/Ascend910-Fault": "[" * 5_000}), "is malformed"),
        ({**with_device_list({}), "SwitchInfoCfg": "[1]"}, "SwitchInfoCfg is malformed"),
        ({**with_device_list({}), "SwitchInfoCfg": " " * 70_000}, "SwitchInfoCfg has 70000"),
    ],
)
def test_a_malformed_fault_list_or_switch_info_names_what_is_wrong(
    data: dict[str, str], error: str
) -> None:
    with pytest.raises(InvalidInput, match=error):
        decode(data)


def test_fault_levels_are_read_back_and_sub_health_is_seen() -> None:
    chips = (Chip(0, 0), Chip(1, 1, fault_codes=("80E01801",)), Chip(2, 2, healthy=False))
    node = NodeChips("Ascend910", "module910x8", chips)
    info = decode(encode(device_info(node, (), 5, frozenset({"80E01801"}))))
    assert [(f.chip, f.level) for f in info.faults] == [(1, "SubHealthFault"), (2, "SeparateNPU")]
    assert info.sub_healthy
    assert not decode(encode(device_info(node, (), 5))).sub_healthy  # no sub-health codes


def test_the_free_list_never_names_a_chip_a_live_pod_holds() -> None:
    node = NodeChips(
        "Ascend910",
        "module910x8",
        (
            Chip(0, 0),
            Chip(1, 1, healthy=False, fault_codes=("80E18402",)),
            Chip(2, 2, network=Network.DOWN),
            Chip(3, 3),
        ),
    )
    info = device_info(node, held=[3], update_time=7)
    # A link just gone down is not (yet) network-unhealthy: 81078603 counts after 20 s
    # (faultCustomization.json FaultDuration); tests/unit/test_fault_escalation.py has the rest.
    assert (info.free, info.unhealthy, info.network_unhealthy) == (
        frozenset({0, 2}),
        frozenset({1}),
        frozenset(),
    )
    faults = json.loads(info.device_list()["huawei.com/Ascend910-Fault"])
    assert faults == [
        {
            "fault_type": "CardUnhealthy",
            "npu_name": "Ascend910-1",
            "large_model_fault_level": "SeparateNPU",
            "fault_level": "SeparateNPU",
            "fault_handling": "SeparateNPU",
            "fault_code": "80E18402",
            "fault_time_and_level_map": {
                "80E18402": {"fault_time": 7000, "fault_level": "SeparateNPU"}
            },
        },
        {
            "fault_type": "CardNetworkUnhealthy",
            "npu_name": "Ascend910-2",
            "large_model_fault_level": "NotHandleFault",
            "fault_level": "NotHandleFault",
            "fault_handling": "NotHandleFault",
            "fault_code": "81078603",
            "fault_time_and_level_map": {
                "81078603": {"fault_time": 7000, "fault_level": "NotHandleFault"}
            },
        },
    ]
    cm = configmap("node-a", info)
    assert cm["metadata"] == {
        "name": "mindx-dl-deviceinfo-node-a",
        "namespace": "kube-system",
        "labels": {"mx-consumer-cim": "true"},
    }


def test_superpod_fields_sit_beside_device_info_outside_the_check_code() -> None:
    plain = DeviceInfo(frozenset({0}), frozenset(), frozenset(), update_time=1657527526)
    a3 = DeviceInfo(
        frozenset({0}),
        frozenset(),
        frozenset(),
        update_time=1657527526,
        super_pod_id=3,
        server_index=17,
    )
    text = encode(a3)["DeviceInfoCfg"]
    assert '},"SuperPodID":3,"ServerIndex":17,"CheckCode":' in text
    assert json.loads(text)["CheckCode"] == json.loads(encode(plain)["DeviceInfoCfg"])["CheckCode"]
    broken = text.replace('"SuperPodID":3', '"SuperPodID":"3"')
    with pytest.raises(InvalidInput, match="SuperPodID '3' is not an integer"):
        decode({"DeviceInfoCfg": broken})


RECORDED = Path(__file__).parents[1] / "data" / "deviceinfo"


def test_a_recorded_a3_node_reporting_super_pod_minus_2_decodes_with_no_super_pod() -> None:
    # Published by Huawei's device plugin on an A3 node (see tests/data/deviceinfo/README.md):
    # its CheckCode is the real plugin's, and -2 means "cannot report a SuperPoD".
    text = (RECORDED / "a3-superpod-unknown.json").read_text().strip()
    info = decode({"DeviceInfoCfg": text})
    assert (info.super_pod_id, info.server_index, info.super_pod) == (-2, -2, None)
    assert (info.free, info.unhealthy, info.network_unhealthy) == (
        frozenset({0, 1, 2, 3, 5, 6, 7}),
        frozenset({4}),
        frozenset({0}),
    )
    assert '"SuperPodID":-2,"ServerIndex":-2,"CheckCode"' in encode(info)["DeviceInfoCfg"]


def test_a_recorded_huawei_deviceinfo_is_written_back_byte_for_byte() -> None:
    # Every field of Huawei's fault entries (fault_handling, fault_time_and_level_map in
    # struct order), the network entry first and the empty -Recovering key survive a
    # decode and encode: the same bytes, so the same CheckCode as Huawei's plugin.
    text = (RECORDED / "a3-superpod-unknown.json").read_text().strip()
    info = decode({"DeviceInfoCfg": text})
    assert encode(info)["DeviceInfoCfg"] == text
    assert info.faults[1].handling == "SeparateNPU"
    assert info.faults[1].times[1] == ("80E18402", 1744167455784, "SeparateNPU")


def test_entries_of_an_older_plugin_and_node_faults_decode() -> None:
    entries = [
        {
            "fault_type": "CardUnhealthy",
            "npu_name": "Ascend910-1",
            "fault_level": "RestartNPU",
            "large_model_fault_level": "RestartNPU",
            "fault_code": "80E18402",
        },
        {"fault_type": "NodeUnhealthy", "npu_name": "", "fault_level": "SeparateNPU"},
    ]
    devices = {"huawei.com/Ascend910-Fault": json.dumps(entries)}
    body = json.dumps(
        {
            "DeviceInfo": {"DeviceList": devices, "UpdateTime": 1},
            "CheckCode": check_code(devices, 1),
        }
    )
    (fault,) = decode({"DeviceInfoCfg": body}).faults
    assert (fault.chip, fault.level, fault.handling, fault.times) == (1, "RestartNPU", "", ())


@pytest.mark.parametrize(("raw", "super_pod"), [(None, None), (-1, None), (-2, None), (0, 0)])
def test_only_a_super_pod_id_of_zero_or_more_names_a_super_pod(
    raw: int | None, super_pod: int | None
) -> None:
    info = DeviceInfo(frozenset(), frozenset(), frozenset(), super_pod_id=raw, server_index=raw)
    assert info.super_pod == super_pod
