"""The scheduler's view of the NPU nodes, built from what the API server lists.

Pure: node, ConfigMap and pod objects (the API server's JSON) and the current time in, node
states (and the reason every other node is left out) back, as the Volcano plugin reads them
(``plugin/node.go``, ``common/k8s/cmmgr.go``):

- a node is an NPU node when its capacity has chips of a kind (``huawei.com/Ascend910``,
  ``huawei.com/Ascend310``, ``huawei.com/Ascend310P``) or AI cores (``huawei.com/npu-core``,
  a dynamic-vNPU node) and it publishes a DeviceInfo ConfigMap of that kind whose CheckCode
  matches and whose UpdateTime is recent;
- chips held by live pods come from ``huawei.com/AscendReal``, else the scheduler's
  annotation (``huawei.com/Ascend910`` …); a vNPU node is replayed from its pods'
  ``huawei.com/npu-core`` annotations (``vnpu_nodes``);
- available chips are computed by the scheduler itself (``self-maintain-available-card``,
  the default): all chips minus held minus unhealthy; or taken from the published list;
- the stability check keeps a node out while the kubelet's idle count and the free list
  disagree (for instance right after a bind, before the agent has caught up).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chip_topology.routing import product_of_node
from contract import deviceinfo, nodeinfo
from contract.annotations import (
    INFER_CARD_TYPE_LABEL,
    SUPER_POD_ID_LABEL,
)
from contract.chip_names import (
    KIND_OF_RESOURCE,
    ChipKind,
    InvalidInput,
    chip_name,
    parse_chip_list,
)
from contract.deviceinfo import MAX_AGE
from contract.fault_levels import SUB_HEALTH
from contract.node_affinity import DO_NOT_SCHEDULE, NodeFacts, node_facts
from contract.objects import PLACED_RESOURCES, Obj, node_address
from contract.vnpu import NPU_CORE_RESOURCE, VNPU_KINDS
from scheduler_core.engine.chip_faults import NodeFaults, handling, node_faults
from scheduler_core.engine.model import NodeState
from scheduler_core.engine.vnpu import VNode, VPod
from scheduler_core.service.state.vnpu_nodes import vnode_of

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
    vnodes: Mapping[str, VNode] = field(default_factory=dict)  # dynamic-vNPU nodes


def _quantity(node: Obj, where: str, resource: str) -> int:
    value = ((node.get("status") or {}).get(where) or {}).get(resource, "0")
    text = str(value)
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else 0


def npu_resource(node: Obj) -> str | None:
    """The NPU resource the node offers (None: it is not an NPU node)."""
    return next((r for r in PLACED_RESOURCES if _quantity(node, "capacity", r) > 0), None)


def kinds_of(resource: str) -> tuple[ChipKind, ...]:
    """The chips a resource's DeviceInfo may list (npu-core: 310P's, or 910B / A3's)."""
    return VNPU_KINDS if resource == NPU_CORE_RESOURCE else (KIND_OF_RESOURCE[resource],)


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the scheduler makes of one NPU node: its state, or why it is left out."""

    name: str
    state: NodeState | None
    reason: str = ""  # why it is left out (state None)
    # Its agent publishes nothing (recent), or NodeD reports it UnHealthy: its pods fail.
    down: bool = False
    # Chips whose fault stops a running pod (``chip_faults``), if its DeviceInfo was read.
    failed: frozenset[int] | None = None
    address: str = ""
    super_pod: int | None = None
    sub_healthy: bool = False  # a chip or its switch reports sub-health: a last choice
    # The view holds while ``now`` is in [valid_from, valid_until): the DeviceInfo's age.
    valid_from: float = float("-inf")
    valid_until: float = float("inf")
    vnode: VNode | None = None  # a dynamic-vNPU node's model (state None, reason "")
    rack: int | None = None  # its DeviceInfo's RackID (Atlas 950 SuperPoD), when set
    # Its chip faults in detail (levels, codes, fault times): what a job's silencing reads.
    faults: NodeFaults | None = None
    notice: str = ""  # a problem with its inputs that does not leave it out (NodeD's)
    # Its labels and the taints that keep pods off: what pods' constraints read of it.
    facts: NodeFacts | None = None


@dataclass(frozen=True, slots=True)
class NodeD:
    """What NodeD reports of a node (``mindx-dl-nodeinfo-<node>``): the last good content
    (None: none, the node is healthy) and why the current one is not read, if it is not."""

    info: nodeinfo.NodeInfo | None = None
    error: str = ""


def trim_node(node: Obj) -> Obj:
    """The fields of a node the view reads (a node object carries kilobytes of images,
    conditions and managed fields): its labels, all of them, and the taints that keep pods
    off (``NoSchedule``, ``NoExecute``) and ``unschedulable``, which pods' constraints read
    (``contract.node_affinity``)."""
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    spec = node.get("spec") or {}
    taints = [
        {k: t[k] for k in ("key", "value", "effect") if k in t}
        for t in spec.get("taints") or ()
        if isinstance(t, dict) and t.get("effect") in DO_NOT_SCHEDULE
    ]

    def npu(where: str) -> dict[str, Any]:
        quantities = status.get(where) or {}
        return {r: quantities[r] for r in PLACED_RESOURCES if r in quantities}

    address = node_address(node)
    return {
        "metadata": {
            "name": meta.get("name", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
            "labels": dict(meta.get("labels") or {}),
        },
        "spec": {
            **({"taints": taints} if taints else {}),
            **({"unschedulable": True} if spec.get("unschedulable") is True else {}),
        },
        "status": {
            "capacity": npu("capacity"),
            "allocatable": npu("allocatable"),
            "addresses": [{"type": "InternalIP", "address": address}] if address else [],
        },
    }


def published(data: Mapping[str, str] | None) -> deviceinfo.DeviceInfo | str | None:
    """A DeviceInfo ConfigMap's content, decoded once per change (None: there is none)."""
    if data is None:
        return None
    try:
        return deviceinfo.decode(data)
    except InvalidInput as bad:
        return f"DeviceInfo ignored: {bad}"


def node_view(
    node: Obj,
    data: Mapping[str, str] | None,
    info: deviceinfo.DeviceInfo | str | None,
    *,
    held: Collection[int],
    requested: int,
    now: float,
    self_maintain: bool = True,
    vpods: Iterable[VPod] = (),
    noded: NodeD = NodeD(),
    facts: NodeFacts | None = None,
    clusterd: bool = False,
) -> NodeView | None:
    """One node's view (None when it is not an NPU node): ``data`` is its DeviceInfo
    ConfigMap's data, ``info`` that data decoded (``published``), ``held`` the chips its live
    pods hold, ``requested`` how many of the node's resource they request, ``vpods`` the
    shares of its npu-core pods, ``noded`` what NodeD reports of it and ``facts`` its labels
    and taints as ``node_facts`` read them when the node changed (read here when not given).

    NodeD's status acts as Huawei's Volcano plugin reads it (Ascend/mind-cluster
    component/ascend-for-volcano/internal/rescheduling/node.go ``setNodeHealthyByNodeD``,
    reschedule.go ``checkNodeCurNodeIsFault``): ``UnHealthy`` makes the node a fault node (its
    pods fail, it takes none), ``PreSeparate`` takes no new pod and leaves the running ones.
    Its ``FaultDevList`` is named in the reason; upstream too only reports it.

    ``clusterd``: the DeviceInfo is ClusterD's copy (``contract.clusterd``): its UpdateTime is
    not checked (ClusterD rewrites an entry when its chips change, not its time), and it may
    list fewer chips free than the kubelet counts (a public fault the agent does not know), as
    upstream's stability check allows (ascend-for-volcano plugin/node.go: "public fault
    occurred, device info <= k8s")."""
    view = _view(
        node,
        data,
        info,
        held=held,
        requested=requested,
        now=now,
        self_maintain=self_maintain,
        vpods=vpods,
        noded=noded,
        clusterd=clusterd,
    )
    if view is None:
        return None
    return dataclasses.replace(view, facts=node_facts(node) if facts is None else facts)


def _view(
    node: Obj,
    data: Mapping[str, str] | None,
    info: deviceinfo.DeviceInfo | str | None,
    *,
    held: Collection[int],
    requested: int,
    now: float,
    self_maintain: bool,
    vpods: Iterable[VPod],
    noded: NodeD,
    clusterd: bool = False,
) -> NodeView | None:
    name = node.get("metadata", {}).get("name", "")
    resource = npu_resource(node)
    if resource is None:
        return None
    if info is None:
        return NodeView(name, None, f"{name}: no {deviceinfo.configmap_name(name)} ConfigMap", True)
    if isinstance(info, str):
        return NodeView(name, None, f"{name}: {info}")
    age = 0.0 if clusterd else now - info.update_time
    if age > MAX_AGE:
        # The reason holds as long as the view: it names the time, not the age.
        reason = (
            f"{name}: DeviceInfo is stale (UpdateTime {info.update_time}, over {MAX_AGE} s ago)"
        )
        return NodeView(name, None, reason, True, valid_from=info.update_time + MAX_AGE)
    if -age > MAX_SKEW:
        # Fresh for ever otherwise: a node whose agent died would never be seen down.
        reason = (
            f"{name}: DeviceInfo UpdateTime {info.update_time} is over {MAX_SKEW} s in the future"
        )
        return NodeView(name, None, reason, valid_until=info.update_time - MAX_SKEW)
    since, until = float(info.update_time - MAX_SKEW), float(info.update_time + MAX_AGE)
    if clusterd:
        since, until = float("-inf"), float("inf")
    faults = node_faults(info)
    failed, notice = faults.failed, noded.error and f"{name}: {noded.error}"
    if noded.info is not None and noded.info.status != nodeinfo.HEALTHY:
        return NodeView(
            name,
            None,
            f"{name}: NodeD reports {noded.info.describe()}",
            noded.info.status == nodeinfo.UNHEALTHY,
            failed,
            valid_from=since,
            valid_until=until,
            faults=faults,
            notice=notice,
        )
    state: NodeState | VNode | str
    if info.kind not in kinds_of(resource):
        state = f"{name}: its DeviceInfo lists {info.kind.name} chips, the node offers {resource}"
    elif resource == NPU_CORE_RESOURCE:
        capacity = _quantity(node, "capacity", resource)
        allocatable = _quantity(node, "allocatable", resource)
        state = vnode_of(node, capacity, info, vpods, requested, allocatable=allocatable)
    else:
        state = _node_state(
            node,
            resource,
            info,
            data or {},
            held=set(held),
            requested=requested,
            self_maintain=self_maintain,
            pre_separated=faults.pre_separated,
            fewer_free=clusterd,
        )
    if isinstance(state, str):
        return NodeView(
            name,
            None,
            state,
            failed=failed,
            valid_from=since,
            valid_until=until,
            faults=faults,
            notice=notice,
        )
    where = node_address(node)
    sub_healthy = faults.sub_healthy
    if isinstance(state, VNode):
        return NodeView(
            name,
            None,
            "",
            False,
            failed,
            where,
            None,
            sub_healthy,
            since,
            until,
            state,
            faults=faults,
            notice=notice,
        )
    label = (node.get("metadata", {}).get("labels") or {}).get(SUPER_POD_ID_LABEL, "")
    super_pod = info.super_pod
    if info.super_pod_id is None and label.isdigit():  # the label stands in for a missing field
        super_pod = int(label)
    return NodeView(
        name,
        state,
        "",
        False,
        failed,
        where,
        super_pod,
        sub_healthy,
        since,
        until,
        rack=info.rack,
        faults=faults,
        notice=notice,
    )


def snapshot(views: Iterable[NodeView]) -> Snapshot:
    """The engine's view of the cluster from its nodes' views."""
    views = list(views)
    return Snapshot(
        tuple(v.state for v in views if v.state is not None),
        {v.name: v.reason for v in views if v.state is None and v.vnode is None},
        {v.name: v.address for v in views if v.state is not None and v.address},
        {v.name: v.super_pod for v in views if v.state is not None and v.super_pod is not None},
        frozenset(v.name for v in views if v.down),
        {v.name: v.failed for v in views if v.failed is not None},
        {v.name: v.vnode for v in views if v.vnode is not None},
    )


def _node_state(
    node: Obj,
    resource: str,
    info: deviceinfo.DeviceInfo,
    data: Mapping[str, str],
    *,
    held: set[int],
    requested: int,
    self_maintain: bool,
    pre_separated: frozenset[int] = frozenset(),
    fewer_free: bool = False,
) -> NodeState | str:
    """The node's state, or why it is left out. A pre-separated chip no pod holds takes no
    new pod, as ClusterD lists it unhealthy (``chip_faults``), nor does a chip being reset;
    where the agent does not list it unhealthy, the kubelet's idle count is taken down by it
    too."""
    name = node["metadata"]["name"]
    labels = node.get("metadata", {}).get("labels") or {}
    kind = KIND_OF_RESOURCE[resource]
    try:
        product = product_of_node(kind, labels)
    except InvalidInput as bad:
        return f"{name}: {bad}"
    allocatable = _quantity(node, "allocatable", resource)
    if self_maintain:
        # A 910 server has its product's chips; some products' nodes as many as they report.
        chips = product.capacity
        if product.rules.partial_nodes:
            chips = min(_quantity(node, "capacity", resource), product.capacity)
        separated = _separated(data, kind)
        free = set(range(chips)) - held - set(info.unhealthy) - separated
    else:
        free = set(info.free) - held  # a bound pod holds its chips before they are published
    # Chips being reset (``-Recovering``) take no pod either: Volcano takes them out of the
    # free ones (ascend-for-volcano common/k8s/cmmgr.go); the kubelet still counts them.
    kept_out = free & (pre_separated | info.recovering)
    free -= kept_out
    # Pods keep chips that failed under them: then the kubelet's count runs below zero.
    idle = max(allocatable - requested - len(kept_out), 0)
    if len(free) > idle if fewer_free else len(free) != idle:
        return (
            f"{name}'s {resource} not stable: {len(free)} listed free, {idle} idle at the kubelet"
        )
    return NodeState(
        name=name,
        product=product.name,
        free=tuple(sorted(free, key=lambda c: chip_name(c, kind))),  # the published order
        allocatable=min(allocatable, product.capacity),
        unhealthy=frozenset(c for c in info.unhealthy | kept_out if c < product.capacity),
        network_unhealthy=frozenset(c for c in info.network_unhealthy if c < product.capacity),
        card_type=str(labels.get(INFER_CARD_TYPE_LABEL, "")),
        # MindCluster's rescheduling/node.go: a SubHealthFault chip, or the switch's report.
        card_sub_healthy=any(handling(f) == SUB_HEALTH for f in info.faults),
        switch_sub_healthy=info.switch_sub_healthy,
    )


def _separated(data: Mapping[str, str], kind: ChipKind) -> set[int]:
    text = data.get(deviceinfo.SEPARATED_KEY, "")
    try:
        return set(parse_chip_list(text, kind=kind))
    except InvalidInput:
        return set()
