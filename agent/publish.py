"""What a node publishes in its DeviceInfo ConfigMap, from its chips and the held chips."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.chips import Network, NodeChips
from scheduler_core import deviceinfo
from scheduler_core.deviceinfo import DeviceInfo, Fault

# Without a fault-code table the level follows health, as the device plugin's defaults do.
CARD_FAULT_LEVEL = "SeparateNPU"
MINOR_FAULT_LEVEL = "NotHandleFault"
LINK_DOWN_CODE = "81078603"
LINK_DOWN_LEVEL = "PreSeparateNPU"


def faults_of(node: NodeChips) -> tuple[Fault, ...]:
    faults = []
    for chip in sorted(node.chips, key=lambda c: c.id):
        if not chip.healthy or chip.fault_codes:
            level = MINOR_FAULT_LEVEL if chip.healthy else CARD_FAULT_LEVEL
            faults.append(Fault(chip.id, network=False, level=level, codes=chip.fault_codes))
        if chip.network is Network.DOWN:
            faults.append(
                Fault(chip.id, network=True, level=LINK_DOWN_LEVEL, codes=(LINK_DOWN_CODE,))
            )
    return tuple(faults)


def device_info(node: NodeChips, held: Iterable[int], update_time: int) -> DeviceInfo:
    """Free = healthy chips no live pod holds; a held chip is never listed free."""
    taken = set(held)
    return DeviceInfo(
        free=frozenset(c.id for c in node.chips if c.healthy and c.id not in taken),
        unhealthy=frozenset(c.id for c in node.chips if not c.healthy),
        network_unhealthy=frozenset(c.id for c in node.chips if c.network is Network.DOWN),
        faults=faults_of(node),
        update_time=update_time,
        super_pod_id=node.super_pod_id,
        server_index=node.server_index,
    )


def configmap(node_name: str, info: DeviceInfo, separated: Iterable[int] = ()) -> dict[str, Any]:
    """The ConfigMap object the agent writes (label ``mx-consumer-cim: "true"`` for MindCluster
    Volcano, data as Huawei's device plugin writes it)."""
    label, value = deviceinfo.CONSUMER_LABEL
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": deviceinfo.configmap_name(node_name),
            "namespace": deviceinfo.NAMESPACE,
            "labels": {label: value},
        },
        "data": deviceinfo.encode(info, separated),
    }
