"""Test-only readers of a DeviceInfo ConfigMap as MindCluster's ClusterD and Huawei's Volcano
plugin read it, written from their Go code (Ascend/mind-cluster at 22bb3d98) independently of
``contract/deviceinfo.py``, so that a test can check our agent's output against them.

- ClusterD: ``component/clusterd/pkg/domain/device/device_util.go`` ``ParseDeviceInfoCM``
  (struct ``DeviceInfoCM`` of ``pkg/common/constant/type.go``; the CheckCode
  ``util.EqualDataHash``: SHA-256 of ``json.Marshal(DeviceInfoNoName)``), then
  ``pkg/domain/faultdomain/fault_utils.go`` ``getFaultListInfo`` (``[]DeviceFault``, each entry
  split per fault code by ``splitDeviceFault``), ``getCardUnHealthy``,
  ``getNetworkUnhealthyCardList``.
- Volcano: ``component/ascend-for-volcano/internal/rescheduling/node.go``
  ``createFaultCardHandlers`` (a chip in ``-Unhealthy`` or ``-NetworkUnhealthy`` is a fault
  card), ``getNodeDeviceFaultFromDeviceInfo`` (``[]FaultDeviceList``, type.go) and
  ``setNodeHasCardSubHealthFault``; ``job.go`` ``IsNormalJobNeedRestart`` (a task's fault of
  handling ``PreSeparateNPU`` restarts the job only through the platform).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)


class Refused(ValueError):
    """What the Go reader answers with an error."""


def go_marshal(value: object) -> str:
    """encoding/json ``Marshal`` of maps, strings and integers: compact, map keys sorted,
    ``<``, ``>``, ``&``, U+2028 and U+2029 escaped (HTMLEscape)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _int(value: object, bounds: tuple[int, int], where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not bounds[0] <= value <= bounds[1]:
        raise Refused(f"json: cannot unmarshal {value!r} into {where}")
    return value


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise Refused(f"json: cannot unmarshal {value!r} into {where} of type string")
    return value


@dataclass(frozen=True, slots=True)
class ClusterDDevice:
    """constant.DeviceInfo as ParseDeviceInfoCM fills it."""

    device_list: Mapping[str, str]
    update_time: int
    super_pod_id: int
    rack_id: int
    server_index: int


def clusterd_device_info(data: Mapping[str, str]) -> ClusterDDevice:
    """ParseDeviceInfoCM: the ``DeviceInfoCfg`` key unmarshalled into DeviceInfoCM, its
    CheckCode checked; Refused where ClusterD returns an error."""
    text = data.get("DeviceInfoCfg")
    if text is None:
        raise Refused("configmap has no DeviceInfoCfg")
    raw = json.loads(text)
    info = raw.get("DeviceInfo") or {}
    devices = info.get("DeviceList") or {}
    if not isinstance(devices, dict):
        raise Refused("DeviceList is not a map")
    device_list = {_str(k, "key"): _str(v, "DeviceList value") for k, v in devices.items()}
    update_time = _int(info.get("UpdateTime", 0), INT64, "UpdateTime int64")
    code = _str(raw.get("CheckCode", ""), "CheckCode")
    payload = go_marshal({"DeviceList": device_list, "UpdateTime": update_time})
    if not code or hashlib.sha256(payload.encode()).hexdigest() != code:
        raise Refused("device info configmap is not valid")
    return ClusterDDevice(
        device_list,
        update_time,
        _int(raw.get("SuperPodID", 0), INT32, "SuperPodID int32"),
        _int(raw.get("RackID", 0), INT32, "RackID int32"),
        _int(raw.get("ServerIndex", 0), INT32, "ServerIndex int32"),
    )


@dataclass(frozen=True, slots=True)
class ClusterDFault:
    """One constant.DeviceFault after splitDeviceFault: one fault code."""

    fault_type: str
    npu_name: str
    code: str
    level: str  # FaultLevel = FaultHandling = LargeModelFaultLevel after the split
    fault_time: int | None  # from fault_time_and_level_map; None: the code was not in it


MANUALLY_SEPARATE = "ManuallySeparateNPU"
UNKNOWN_FAULT_TIME = -1  # clusterd constant.UnknownFaultTime


def clusterd_faults(device: ClusterDDevice, resource: str) -> list[ClusterDFault]:
    """getFaultListInfo: the ``<resource>-Fault`` list as []DeviceFault, split per code. A
    list that does not unmarshal is logged and read as none there; here it is Refused."""
    text = device.device_list.get(f"{resource}-Fault", "")
    if not text:
        return []
    entries = json.loads(text)
    if not isinstance(entries, list):
        raise Refused("fault list is not a list")
    split = []
    for entry in entries:
        fields = {
            key: _str(entry.get(key, ""), key)
            for key in (
                "fault_type",
                "npu_name",
                "large_model_fault_level",
                "fault_level",
                "fault_handling",
                "fault_code",
            )
        }
        times: dict[str, tuple[int, str]] = {}
        for code, value in (entry.get("fault_time_and_level_map") or {}).items():
            times[code] = (
                _int(value.get("fault_time", 0), INT64, "fault_time int64"),
                _str(value.get("fault_level", ""), "fault_level"),
            )
        for given in fields["fault_code"].replace(" ", "").split(","):
            code, found = given, times.get(given)
            if given == "" and fields["fault_level"] == MANUALLY_SEPARATE:
                code, found = MANUALLY_SEPARATE, (UNKNOWN_FAULT_TIME, MANUALLY_SEPARATE)
            level = found[1] if found else fields["fault_level"]
            split.append(
                ClusterDFault(
                    fields["fault_type"],
                    fields["npu_name"],
                    code,
                    level,
                    found[0] if found else None,
                )
            )
    return split


def clusterd_list(device: ClusterDDevice, key: str) -> list[str]:
    """getCardUnHealthy / getNetworkUnhealthyCardList: the key's value split at commas."""
    value = device.device_list.get(key, "")
    return value.split(",") if value else []


@dataclass(frozen=True, slots=True)
class VolcanoNode:
    """What Huawei's Volcano plugin makes of a node's DeviceInfo (FaultNode)."""

    fault_cards: dict[str, str]  # npu name → CardUnhealthy / CardNetworkUnhealthy
    handlings: dict[str, frozenset[str]]  # npu name → its entries' fault_handling
    sub_healthy: bool  # HasCardSubHealthFault

    def restarts_only_if_it_fails(self, npu: str) -> bool:
        """IsNormalJobNeedRestart: a task on this card has a PreSeparateNPU reason."""
        return "PreSeparateNPU" in self.handlings.get(npu, frozenset())


def volcano_node(device_list: Mapping[str, str], resource: str) -> VolcanoNode:
    """createFaultCardHandlers, getNodeDeviceFaultFromDeviceInfo, setNodeHasCardSubHealthFault
    over the DeviceList (node.Annotation holds its keys)."""

    def listed(suffix: str) -> list[str]:
        value = device_list.get(f"{resource}-{suffix}", "")
        return value.split(",") if value else []

    unhealthy, network = listed("Unhealthy"), listed("NetworkUnhealthy")
    cards: dict[str, str] = {}
    value = device_list.get(resource, "")
    every = dict.fromkeys([*(value.split(",") if value else []), *unhealthy, *network])
    for card in every:
        if card in unhealthy:
            cards[card] = "CardUnhealthy"
        elif card in network:
            cards[card] = "CardNetworkUnhealthy"
    entries: list[dict[str, Any]] = json.loads(device_list.get(f"{resource}-Fault", "[]"))
    handlings: dict[str, set[str]] = {}
    for entry in entries:
        handlings.setdefault(entry["npu_name"], set()).add(entry["fault_handling"])
    sub = any(e["fault_handling"] == "SubHealthFault" for e in entries)
    return VolcanoNode(cards, {k: frozenset(v) for k, v in handlings.items()}, sub)
