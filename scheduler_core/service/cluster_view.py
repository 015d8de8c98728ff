"""The scheduler's view of the NPU nodes, built from what the API server lists.

Pure: node, ConfigMap and pod objects (the API server's JSON) and the current time in, node
states (and the reason every other node is left out) back, as the Volcano plugin reads them
(``plugin/node.go``, ``common/k8s/cmmgr.go``):

- a node is an NPU node when its capacity has ``huawei.com/Ascend910`` and it publishes a
  DeviceInfo ConfigMap whose CheckCode matches and whose UpdateTime is recent;
- chips held by live pods come from ``huawei.com/AscendReal``, else the scheduler's
  ``huawei.com/Ascend910`` annotation;
- available chips are computed by the scheduler itself (``self-maintain-available-card``,
  the default): all chips minus held minus unhealthy; or taken from the published list;
- the stability check keeps a node out while the kubelet's idle count and the free list
  disagree (for instance right after a bind, before the agent has caught up).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from contract import deviceinfo
from contract.annotations import ACCELERATOR_TYPE_LABEL, SUPER_POD_ID_LABEL
from contract.chip_names import RESOURCE_NAME, InvalidInput, chip_name, parse_chip_list
from contract.deviceinfo import MAX_AGE
from contract.objects import Obj, node_address
from contract.pods import PodView
from scheduler_core.engine.model import NodeState
from scheduler_core.engine.products import product_for_selector

MAX_SKEW = 60  # seconds a node's clock may run ahead of the scheduler's


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[NodeState, ...]
    left_out: Mapping[str, str] = field(default_factory=dict)  # node → why it is not used
    addresses: Mapping[str, str] = field(default_factory=dict)  # node → InternalIP
    super_pods: Mapping[str, int] = field(default_factory=dict)  # node → SuperPodID
    down: frozenset[str] = frozenset()  # NPU nodes whose agent publishes nothing (recent)
    # Chips each publishing node reports failed (also on nodes left out as not stable).
    failed: Mapping[str, frozenset[int]] = field(default_factory=dict)


class Down(str):
    """Why a node is left out, when the reason is that its agent publishes nothing."""

    __slots__ = ()


def _quantity(node: Obj, where: str) -> int:
    value = ((node.get("status") or {}).get(where) or {}).get(RESOURCE_NAME, "0")
    text = str(value)
    return int(text) if text.isdigit() else 0


def build(
    nodes: Iterable[Obj],
    configmaps: Iterable[Obj],
    pods: Iterable[PodView],
    now: float,
    self_maintain: bool = True,
) -> Snapshot:
    infos: dict[str, Mapping[str, str]] = {}
    for cm in configmaps:
        meta = cm.get("metadata", {})
        node_name = deviceinfo.node_of(meta.get("name", ""))
        if meta.get("namespace") == deviceinfo.NAMESPACE and node_name:
            infos[node_name] = cm.get("data") or {}
    held: dict[str, set[int]] = {}
    requested: dict[str, int] = {}
    for pod in pods:
        if pod.node and pod.live:
            held.setdefault(pod.node, set()).update(pod.chips)
            requested[pod.node] = requested.get(pod.node, 0) + pod.npu_limit
    states: list[NodeState] = []
    left_out: dict[str, str] = {}
    addresses: dict[str, str] = {}
    super_pods: dict[str, int] = {}
    down: set[str] = set()
    failed: dict[str, frozenset[int]] = {}
    for node in nodes:
        name = node.get("metadata", {}).get("name", "")
        if _quantity(node, "capacity") == 0:
            continue  # not an NPU node: nothing to say about it
        info = _published(name, infos.get(name), now)
        if isinstance(info, str):
            if isinstance(info, Down):
                down.add(name)
            left_out[name] = str(info)
            continue
        failed[name] = info.unhealthy | info.network_unhealthy
        state = _node_state(
            node,
            info,
            infos[name],
            held=held.get(name, set()),
            requested=requested.get(name, 0),
            self_maintain=self_maintain,
        )
        if isinstance(state, str):
            left_out[name] = state
            continue
        states.append(state)
        if address := node_address(node):
            addresses[name] = address
        label = (node.get("metadata", {}).get("labels") or {}).get(SUPER_POD_ID_LABEL, "")
        super_pod = info.super_pod_id
        if super_pod is None and label.isdigit():
            super_pod = int(label)
        if super_pod is not None:
            super_pods[name] = super_pod
    return Snapshot(tuple(states), left_out, addresses, super_pods, frozenset(down), failed)


def _published(
    name: str, data: Mapping[str, str] | None, now: float
) -> deviceinfo.DeviceInfo | str:
    """What the node's agent publishes, or why it is not used (a ``Down`` when silent)."""
    if data is None:
        return Down(f"{name}: no {deviceinfo.configmap_name(name)} ConfigMap")
    try:
        info = deviceinfo.decode(data)
    except InvalidInput as bad:
        return f"{name}: DeviceInfo ignored: {bad}"
    if now - info.update_time > MAX_AGE:
        return Down(f"{name}: DeviceInfo is stale (updated {int(now - info.update_time)} s ago)")
    if info.update_time - now > MAX_SKEW:
        # Fresh for ever otherwise: a node whose agent died would never be seen down.
        return f"{name}: DeviceInfo UpdateTime is {int(info.update_time - now)} s in the future"
    return info


def _node_state(
    node: Obj,
    info: deviceinfo.DeviceInfo,
    data: Mapping[str, str],
    *,
    held: set[int],
    requested: int,
    self_maintain: bool,
) -> NodeState | str:
    """The node's state, or why it is left out."""
    name = node["metadata"]["name"]
    labels = node.get("metadata", {}).get("labels") or {}
    try:
        product = product_for_selector(
            {ACCELERATOR_TYPE_LABEL: labels.get(ACCELERATOR_TYPE_LABEL, "module")}
        )
    except InvalidInput as bad:
        return f"{name}: {bad}"
    allocatable = _quantity(node, "allocatable")
    if self_maintain:
        separated = _separated(data)
        free = set(range(product.capacity)) - held - set(info.unhealthy) - separated
    else:
        free = set(info.free) - held  # a bound pod holds its chips before they are published
    # Pods keep chips that failed under them: then the kubelet's count runs below zero.
    idle = max(allocatable - requested, 0)
    if len(free) != idle:
        return (
            f"{name}'s {RESOURCE_NAME} not stable: {len(free)} listed free, "
            f"{idle} idle at the kubelet"
        )
    return NodeState(
        name=name,
        product=product.name,
        free=tuple(sorted(free, key=chip_name)),  # the published (string) order
        allocatable=min(allocatable, product.capacity),
        unhealthy=frozenset(c for c in info.unhealthy if c < product.capacity),
        network_unhealthy=frozenset(c for c in info.network_unhealthy if c < product.capacity),
    )


def _separated(data: Mapping[str, str]) -> set[int]:
    text = data.get(deviceinfo.SEPARATED_KEY, "")
    try:
        return set(parse_chip_list(text))
    except InvalidInput:
        return set()
