"""The cluster as the watches show it, kept up to date change by change.

Nodes, DeviceInfo ConfigMaps, NodeD's ConfigMaps and the pods that matter (those that
request NPUs or belong to a gang) go in one change at a time; each change marks the nodes
it touches, and only those are computed again (``cluster_view.node_view``), with the chips
their pods hold and the NPUs they request kept as running totals per node and resource (and
the vNPU shares of its npu-core pods). A DeviceInfo that ages out (or a clock that
catches up with one from the future) is noticed by ``due``, without re-reading anything.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Iterable, Mapping

from contract import clusterd as clusterd_cms
from contract import deviceinfo, nodeinfo
from contract.chip_names import InvalidInput
from contract.node_affinity import NodeFacts, node_facts
from contract.objects import Obj
from contract.pods import PodView
from scheduler_core.engine.vnpu import VPod
from scheduler_core.service.state.cluster_view import (
    NodeD,
    NodeView,
    Snapshot,
    node_view,
    npu_resource,
    published,
    snapshot,
)
from scheduler_core.service.state.vnpu_nodes import vpod_of

log = logging.getLogger(__name__)


def gang_of(pod: PodView) -> str | None:
    """The group the pod names, in whichever form (``contract.groups``): its job, when it is
    more than this one pod."""
    return pod.group.key if pod.group is not None else None


def matters(pod: PodView) -> bool:
    """A pod the scheduler keeps: it requests NPUs, or it is a member of a gang."""
    return pod.live and (pod.npu_limit > 0 or gang_of(pod) is not None)


class LiveView:
    def __init__(self, self_maintain: bool = True, *, clusterd: bool = False) -> None:
        self.self_maintain = self_maintain
        # ClusterD's ConfigMaps are the source (``set_clusterd``): ClusterD rewrites a node's
        # entry when its chips change, not when only its UpdateTime does, so its age says
        # nothing and is not checked (upstream does not either).
        self.clusterd = clusterd
        self._cd_devices: dict[str, dict[str, deviceinfo.DeviceInfo]] = {}  # ConfigMap → node
        self._cd_switches: dict[str, dict[str, clusterd_cms.Switch]] = {}  # ConfigMap → node
        self._cd_errors: dict[str, str] = {}  # ConfigMap → why its content is not read
        self._nodes: dict[str, Obj] = {}
        self._facts: dict[str, NodeFacts] = {}  # node → its labels and taints, read once
        self._infos: dict[str, tuple[Mapping[str, str], deviceinfo.DeviceInfo | str]] = {}
        self._noded: dict[str, NodeD] = {}  # node → what NodeD reports (none: healthy)
        self._pods: dict[str, PodView] = {}
        self._held: dict[tuple[str, str], Counter[int]] = {}  # (node, resource) → chips
        self._requested: Counter[tuple[str, str]] = Counter()
        self._vpods: dict[str, dict[str, VPod]] = {}  # node → pod key → its vNPU share
        self.holders: dict[str, dict[int, str]] = {}  # node → chip → the pod holding it
        self._gangs: dict[str, dict[str, PodView]] = {}
        self.views: dict[str, NodeView] = {}
        self._dirty: set[str] = set()

    # ---- changes ---------------------------------------------------------------------

    def set_node(self, name: str, node: Obj | None) -> None:
        if node is None:
            self._nodes.pop(name, None)
            self._facts.pop(name, None)
        else:
            self._nodes[name] = node
            self._facts[name] = node_facts(node)
        self._dirty.add(name)

    def set_deviceinfo(self, configmap: str, data: Mapping[str, str] | None) -> None:
        node = deviceinfo.node_of(configmap)
        if not node:
            return
        decoded = published(data)
        if data is None or decoded is None:
            self._infos.pop(node, None)
        else:
            self._infos[node] = (data, decoded)
        self._dirty.add(node)

    def set_nodeinfo(self, configmap: str, data: Mapping[str, str] | None) -> None:
        """NodeD's ConfigMap of a node changed (None: deleted, the node is healthy again).
        Content that cannot be read (a bad CheckCode, a malformed field) is logged once and
        named on the node; the last good content stays in force."""
        node = nodeinfo.node_of(configmap)
        if not node:
            return
        before = self._noded.get(node, NodeD())
        if data is None:
            self._noded.pop(node, None)
        else:
            try:
                self._noded[node] = NodeD(nodeinfo.decode(data))
            except InvalidInput as bad:
                error = f"{nodeinfo.NAMESPACE}/{configmap} ignored, the last good one kept: {bad}"
                if error != before.error:
                    log.warning("%s", error)
                self._noded[node] = NodeD(before.info, error)
        if self._noded.get(node, NodeD()) != before:
            self._dirty.add(node)

    def set_clusterd(self, configmap: str, data: Mapping[str, str] | None) -> None:
        """One of ClusterD's ``cluster-info-*`` ConfigMaps changed (None: deleted): its nodes'
        DeviceInfo, NodeD reports or switch statuses. Content that cannot be read is logged
        once; the last good content stays in force, as upstream's ``cmmgr.go`` keeps its
        cache when ``getDataFromCM`` fails."""
        kind = clusterd_cms.kind_of(configmap)
        if kind is None:
            return
        touched: set[str] = set()
        try:
            if kind == "node":
                nodes = {} if data is None else clusterd_cms.decode_nodes(configmap, data)
                touched = set(self._noded) | set(nodes)
                self._noded = {n: NodeD(info) for n, info in nodes.items()}
            elif kind == "device":
                infos = {} if data is None else clusterd_cms.decode_devices(configmap, data)
                touched = set(self._cd_devices.pop(configmap, {})) | set(infos)
                if infos:
                    self._cd_devices[configmap] = infos
            else:
                switches = {} if data is None else clusterd_cms.decode_switches(configmap, data)
                touched = set(self._cd_switches.pop(configmap, {})) | set(switches)
                if switches:
                    self._cd_switches[configmap] = switches
        except InvalidInput as bad:
            error = f"{clusterd_cms.NAMESPACE}/{configmap} ignored, the last good one kept: {bad}"
            if self._cd_errors.get(configmap) != error:
                log.warning("%s", error)
            self._cd_errors[configmap] = error
            return
        self._cd_errors.pop(configmap, None)
        for node in touched:
            if kind != "node":
                self._clusterd_info(node)
            self._dirty.add(node)

    def _clusterd_info(self, node: str) -> None:
        """The node's DeviceInfo as ClusterD's ConfigMaps give it, with its switch's status."""
        info = next((m[node] for m in self._cd_devices.values() if node in m), None)
        if info is None:
            self._infos.pop(node, None)
            return
        switch = any(m[node].sub_healthy for m in self._cd_switches.values() if node in m)
        self._infos[node] = ({}, dataclasses.replace(info, switch_sub_healthy=switch))

    def set_pod(self, key: str, pod: PodView | None) -> set[str]:
        """A pod changed (None: gone); the gangs it was or is in."""
        kept = pod if pod is not None and matters(pod) else None
        old = self._pods.pop(key, None)
        gangs = set()
        if old is not None:
            self._count(old, -1)
            if (gang := gang_of(old)) is not None:
                self._gangs.get(gang, {}).pop(key, None)
                if not self._gangs.get(gang):
                    self._gangs.pop(gang, None)
                gangs.add(gang)
        if kept is not None:
            self._pods[key] = kept
            self._count(kept, 1)
            if (gang := gang_of(kept)) is not None:
                self._gangs.setdefault(gang, {})[key] = kept
                gangs.add(gang)
        return gangs

    def _count(self, pod: PodView, sign: int) -> None:
        if not pod.node:
            return
        where = (pod.node, pod.resource)
        held = self._held.setdefault(where, Counter())
        held.update({c: sign for c in pod.chips})
        if held := +held:
            self._held[where] = held
        else:
            del self._held[where]
        self._hold(pod, sign)
        self._requested[where] += sign * pod.npu_limit
        if not self._requested[where]:
            del self._requested[where]
        share = vpod_of(pod)
        if share is not None:
            shares = self._vpods.setdefault(pod.node, {})
            if sign > 0:
                shares[pod.key] = share
            else:
                shares.pop(pod.key, None)
                if not shares:
                    del self._vpods[pod.node]
        self._dirty.add(pod.node)

    def _hold(self, pod: PodView, sign: int) -> None:
        """Who holds each chip, kept as the pods come and go (the NPU map names them)."""
        on = self.holders.setdefault(pod.node, {})
        for chip in pod.chips:
            if sign > 0:
                on[chip] = pod.key
            elif on.get(chip) == pod.key:
                del on[chip]
        if not on:
            del self.holders[pod.node]

    # ---- reading ---------------------------------------------------------------------

    def gang(self, key: str) -> list[PodView]:
        """The gang's live pods, by name."""
        return [p for _, p in sorted(self._gangs.get(key, {}).items())]

    def due(self, now: float) -> None:
        """Mark the nodes whose view has aged out of its validity."""
        self._dirty.update(
            n for n, v in self.views.items() if not v.valid_from <= now < v.valid_until
        )

    def changed(self, now: float) -> dict[str, NodeView | None]:
        """The views of the nodes changed since the last call (None: not an NPU node)."""
        views: dict[str, NodeView | None] = {}
        for name in self._dirty:
            node = self._nodes.get(name)
            view = None
            if node is not None:
                data, info = self._infos.get(name, (None, None))
                where = (name, npu_resource(node) or "")
                view = node_view(
                    node,
                    data,
                    info,
                    held=self._held.get(where, ()),
                    requested=self._requested.get(where, 0),
                    now=now,
                    self_maintain=self.self_maintain,
                    vpods=self._vpods.get(name, {}).values(),
                    noded=self._noded.get(name, NodeD()),
                    facts=self._facts.get(name),
                    clusterd=self.clusterd,
                )
            if view is None:
                if self.views.pop(name, None) is not None:
                    views[name] = None
            elif view != self.views.get(name):
                self.views[name] = views[name] = view
        self._dirty.clear()
        return views


def build(
    nodes: Iterable[Obj],
    configmaps: Iterable[Obj],
    pods: Iterable[PodView],
    now: float,
    self_maintain: bool = True,
) -> Snapshot:
    """The view of a whole read of the cluster (a command that reads once): the same
    aggregation the watches feed, given everything at once."""
    view = LiveView(self_maintain)
    for node in nodes:
        view.set_node(str(node.get("metadata", {}).get("name", "")), node)
    for configmap in configmaps:
        meta = configmap.get("metadata", {})
        if meta.get("namespace") == deviceinfo.NAMESPACE:
            view.set_deviceinfo(str(meta.get("name", "")), configmap.get("data") or {})
        elif meta.get("namespace") == nodeinfo.NAMESPACE:
            view.set_nodeinfo(str(meta.get("name", "")), configmap.get("data") or {})
    for pod in pods:
        view.set_pod(pod.key, pod)
    view.changed(now)
    return snapshot(view.views.values())
