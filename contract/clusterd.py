"""ClusterD's ``mindx-dl/cluster-info-*`` ConfigMaps: the cluster's faults as ClusterD sums them.

Where ClusterD runs, Huawei's Volcano plugin reads these instead of the DeviceInfo and NodeD
ConfigMaps (``useClusterInfoManager``, true when absent: Ascend/mind-cluster
component/ascend-for-volcano/plugin/factory.go ``getUseClusterDConfig``). It lists and watches
the ConfigMaps of ``mindx-dl`` labelled ``mx-consumer-volcano=true``
(common/k8s/cmmgr.go ``initClusterCmInformer``) and reads three kinds, each keeping its
JSON under a data key that is the ConfigMap's own name (``getDataFromCM(cm, cm.Name)``):

- ``cluster-info-device-<m>`` (one per 1,000 nodes): ``{"mindx-dl-deviceinfo-<node>":
  {"DeviceList":{…},"UpdateTime":n,"SuperPodID":n,"RackID":n,…}}``, the device plugin's
  DeviceInfo per node with ClusterD's additions: public faults (``fault_type``
  ``PublicFault``) and manual separation (``ManuallySeparateNPU``) in the ``-Fault`` list, their
  chips in the unhealthy list; no CheckCode (common/k8s/type.go ``NodeDeviceInfoWithID``);
- ``cluster-info-node-cm``: ``{"mindx-dl-nodeinfo-<node>":{"FaultDevList":[…],
  "NodeStatus":…}}``, NodeD's report per node without its CheckCode (``NodeDNodeInfo``); each
  version replaces the whole set (``dealClusterNodeInfo``);
- ``cluster-info-switch-<x>`` (one per 2,000 nodes): ``{"mindx-dl-switchinfo-<node>":
  {"FaultCode":[…],"FaultLevel":…,"UpdateTime":n,"NodeStatus":…}}``, of which Volcano reads
  ``NodeStatus`` (``SubHealthy``: a sub-healthy node, internal/rescheduling/node.go).

Upstream decodes a ConfigMap whole and, when it cannot, logs and keeps what it had; an empty
value means no entries. Pure: data in, values out (``InvalidInput`` names what is wrong).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from contract import deviceinfo, fault_levels, nodeinfo
from contract.chip_names import InvalidInput, quoted

NAMESPACE = "mindx-dl"
CONSUMER_LABEL = ("mx-consumer-volcano", "true")  # common/util/type.go CmConsumer
DEVICE_PREFIX = "cluster-info-device-"
NODE_NAME = "cluster-info-node-cm"
SWITCH_PREFIX = "cluster-info-switch-"
SWITCH_ENTRY_PREFIX = "mindx-dl-switchinfo-"  # common/util/type.go SwitchCmInfoNamePrefix
# 1,000 nodes of 16 chips with a fault each run to about 4 MB: ConfigMaps stop at 1 MiB of
# data (the API server's limit), so a value much larger was never ClusterD's.
MAX_BYTES = 3 * 1024 * 1024
MAX_ENTRIES = 2000  # ClusterD's largest ConfigMap: 2,000 nodes' switches


@dataclass(frozen=True, slots=True)
class Switch:
    """What ClusterD says of a node's switch (its UnifiedBus devices)."""

    status: str
    level: str

    @property
    def sub_healthy(self) -> bool:
        return self.status == deviceinfo.SUB_HEALTHY_STATUS or fault_levels.SUB_HEALTH in (
            self.level,
            self.status,
        )


def kind_of(configmap: str) -> str | None:
    """``device``, ``node`` or ``switch`` for ClusterD's ConfigMaps, None for any other."""
    if configmap.startswith(DEVICE_PREFIX):
        return "device"
    if configmap == NODE_NAME:
        return "node"
    if configmap.startswith(SWITCH_PREFIX):
        return "switch"
    return None


def _entries(configmap: str, data: Mapping[str, str], prefix: str) -> dict[str, object]:
    """The ConfigMap's map of ``<prefix><node>`` → entry, by node (InvalidInput when it is
    not one). A key without the prefix names the node as it is (``strings.TrimPrefix``)."""
    text = data.get(configmap)
    if text is None:
        raise InvalidInput(f"no {configmap} key")
    if not text:
        return {}
    if len(text) > MAX_BYTES:
        raise InvalidInput(f"{configmap} has {len(text)} characters (at most {MAX_BYTES})")
    try:
        entries = json.loads(text)
    except RecursionError:
        raise InvalidInput(f"{configmap} nests too deep to be ClusterD's") from None
    except ValueError as bad:
        raise InvalidInput(f"{configmap} is not JSON: {quoted(str(bad))}") from None
    if entries is None:  # Go's nil map
        return {}
    if not isinstance(entries, dict) or len(entries) > MAX_ENTRIES:
        raise InvalidInput(f"{configmap} is not a map of at most {MAX_ENTRIES} nodes")
    return {key.removeprefix(prefix): entry for key, entry in entries.items()}


def _object(configmap: str, node: str, entry: object) -> Mapping[str, object]:
    if not isinstance(entry, dict):
        raise InvalidInput(f"{configmap}: node {quoted(node)}'s entry is not an object")
    return entry


def decode_devices(configmap: str, data: Mapping[str, str]) -> dict[str, deviceinfo.DeviceInfo]:
    """A ``cluster-info-device-<m>``: each node's DeviceInfo (``switch_sub_healthy`` unset:
    ClusterD keeps switches apart). One malformed entry refuses the whole ConfigMap, as Go's
    ``json.Unmarshal`` does upstream."""
    infos = {}
    for node, entry in _entries(configmap, data, deviceinfo.NAME_PREFIX).items():
        fields = _object(configmap, node, entry)
        devices, update_time = fields.get("DeviceList") or {}, fields.get("UpdateTime", 0)
        if not isinstance(devices, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in devices.items()
        ):
            raise InvalidInput(
                f"{configmap}: node {quoted(node)}: DeviceList is not a map of strings"
            )
        if not isinstance(update_time, int) or isinstance(update_time, bool):
            raise InvalidInput(
                f"{configmap}: node {quoted(node)}: UpdateTime {update_time!r} is not an integer"
            )
        try:
            infos[node] = deviceinfo.from_fields(devices, update_time, fields)
        except InvalidInput as bad:
            raise InvalidInput(f"{configmap}: node {quoted(node)}: {bad}") from None
    return infos


def decode_nodes(configmap: str, data: Mapping[str, str]) -> dict[str, nodeinfo.NodeInfo]:
    """``cluster-info-node-cm``: what NodeD reports of each node it lists (a node it does not
    list is healthy). A status NodeD does not write is refused, as ``nodeinfo.decode`` does."""
    nodes = {}
    for node, entry in _entries(configmap, data, nodeinfo.NAME_PREFIX).items():
        fields = _object(configmap, node, entry)
        try:
            nodes[node] = nodeinfo.from_fields(fields)
        except InvalidInput as bad:
            raise InvalidInput(f"{configmap}: node {quoted(node)}: {bad}") from None
    return nodes


def decode_switches(configmap: str, data: Mapping[str, str]) -> dict[str, Switch]:
    """A ``cluster-info-switch-<x>``: each node's switch status and fault level."""
    switches = {}
    for node, entry in _entries(configmap, data, SWITCH_ENTRY_PREFIX).items():
        fields = _object(configmap, node, entry)
        status, level = fields.get("NodeStatus", ""), fields.get("FaultLevel", "")
        if not isinstance(status, str) or not isinstance(level, str):
            raise InvalidInput(
                f"{configmap}: node {quoted(node)}: NodeStatus and FaultLevel must be strings"
            )
        switches[node] = Switch(status, level)
    return switches
