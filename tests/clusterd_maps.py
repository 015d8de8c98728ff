"""ClusterD's ``mindx-dl/cluster-info-*`` ConfigMaps as ClusterD writes them, built from the Go
structs Volcano decodes them with (Ascend/mind-cluster component/ascend-for-volcano/common/k8s/
type.go ``NodeDeviceInfoWithID``, ``NodeDNodeInfo``, ``SwitchFaultInfo``) and the fields of
ClusterD's own tables (``CmName``, ``ServerIndex``): each JSON under the ConfigMap's own name,
labelled ``mx-consumer-volcano=true``. No CheckCode: ClusterD writes none for Volcano."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from contract import clusterd

UPDATE_TIME = 1_700_000_000


def chips(numbers: Iterable[int]) -> str:
    return ",".join(f"Ascend910-{c}" for c in sorted(numbers))


def device_entry(
    node: str,
    unhealthy: Iterable[int] = (),
    faults: Iterable[Mapping[str, Any]] = (),
    *,
    update_time: int = UPDATE_TIME,
    super_pod: int = 0,
) -> tuple[str, dict[str, Any]]:
    """One node's entry of a ``cluster-info-device-<m>``: its key and value."""
    bad = set(unhealthy)
    return f"mindx-dl-deviceinfo-{node}", {
        "DeviceList": {
            "huawei.com/Ascend910": chips(set(range(8)) - bad),
            "huawei.com/Ascend910-NetworkUnhealthy": "",
            "huawei.com/Ascend910-Unhealthy": chips(bad),
            "huawei.com/Ascend910-Fault": json.dumps(list(faults), separators=(",", ":")),
        },
        "UpdateTime": update_time,
        "CmName": f"mindx-dl-deviceinfo-{node}",
        "SuperPodID": super_pod,
        "ServerIndex": 0,
        "RackID": 0,
    }


def public_fault(chip: int, level: str = "SeparateNPU", code: str = "010001002") -> dict[str, Any]:
    """A public fault ClusterD merged into a chip's faults (its fault interface's)."""
    return {
        "fault_type": "PublicFault",
        "npu_name": f"Ascend910-{chip}",
        "large_model_fault_level": level,
        "fault_level": level,
        "fault_handling": level,
        "fault_code": code,
        "fault_time_and_level_map": {code: {"fault_time": 1_699_999_000, "fault_level": level}},
    }


def configmap(name: str, entries: Mapping[str, Any] | str) -> dict[str, Any]:
    text = entries if isinstance(entries, str) else json.dumps(entries, separators=(",", ":"))
    return {
        "metadata": {
            "name": name,
            "namespace": clusterd.NAMESPACE,
            "labels": {clusterd.CONSUMER_LABEL[0]: clusterd.CONSUMER_LABEL[1]},
        },
        "data": {name: text},
    }


def devices(index: int, *entries: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return configmap(f"{clusterd.DEVICE_PREFIX}{index}", dict(entries))


def nodes(reports: Mapping[str, tuple[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """``cluster-info-node-cm``: node → (NodeStatus, FaultDevList)."""
    return configmap(
        clusterd.NODE_NAME,
        {
            f"mindx-dl-nodeinfo-{node}": {
                "FaultDevList": faults,
                "NodeStatus": status,
                "CmName": f"mindx-dl-nodeinfo-{node}",
            }
            for node, (status, faults) in reports.items()
        },
    )


def switches(index: int, statuses: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    """A ``cluster-info-switch-<x>``: node → (NodeStatus, FaultLevel)."""
    return configmap(
        f"{clusterd.SWITCH_PREFIX}{index}",
        {
            f"mindx-dl-switchinfo-{node}": {
                "FaultCode": [],
                "FaultLevel": level,
                "UpdateTime": UPDATE_TIME,
                "NodeStatus": status,
            }
            for node, (status, level) in statuses.items()
        },
    )
