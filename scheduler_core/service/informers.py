"""What the scheduler service reads of the cluster: listed once, then watched.

Seven reflectors (``infra.kube.reflector``), each keeping only the fields read:

- nodes: name, the NPU capacity and allocatable, the labels read, the InternalIP;
- the DeviceInfo ConfigMaps of ``kube-system``, by their label ``mx-consumer-cim=true``
  (the label upstream's own informer selects on);
- the ToR topology (``kube-system/basic-tor-node-cm``) and the fault record
  (``volcano-system/vcjob-fault-npu-cm``), each by name;
- pods that are not finished (a field selector on the phase), kept only when they request
  NPUs or belong to a gang;
- failed pods labelled ``fault-retry-times`` (their job may restart);
- failed pods, kept only when the kubelet failed them because their vNPU could not be made
  (they are deleted, so that their controller makes them again).

Each change updates the live view, which computes again only the nodes it touches; the
extender gets those nodes, the pods and the gangs that changed. One lock orders the changes
of all seven, so the extender sees them in the order they were applied.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from contract import deviceinfo
from contract.annotations import (
    FAULT_RECORD,
    FAULT_RETRY_LABEL,
    TOPOLOGY_CONFIGMAP,
    TOPOLOGY_KEY,
)
from contract.chip_names import InvalidInput
from contract.objects import Obj, vnpu_creation_failed
from contract.pods import PodView, cached_pod_view
from infra.kube.port import KubeGateway, Selection
from infra.kube.reflector import Change, Reflector, stop_all
from scheduler_core.engine import tor
from scheduler_core.service.cluster_view import trim_node
from scheduler_core.service.extender import Extender
from scheduler_core.service.live_view import LiveView, matters

log = logging.getLogger(__name__)

T = TypeVar("T")
NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"
Data = Mapping[str, str]


def _named(where: tuple[str, str]) -> Selection:
    return Selection("ConfigMap", where[0], fields=f"metadata.name={where[1]}")


def _data(configmap: Obj) -> Data:
    data = configmap.get("data") or {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def _creation_failed(obj: Obj) -> PodView | None:
    return cached_pod_view(obj) if vnpu_creation_failed(obj) else None


def _kept_pod(obj: Obj) -> PodView | None:
    pod = cached_pod_view(obj)
    return pod if matters(pod) else None


class ClusterInformers:
    def __init__(
        self,
        gateway: KubeGateway,
        extender: Extender,
        clock: Callable[[], float],
        *,
        self_maintain: bool = True,
        on_pods: Callable[[list[PodView]], None] = lambda pods: None,
        on_api_error: Callable[[], None] = lambda: None,
        on_loop_error: Callable[[str], None] = lambda name: None,
    ) -> None:
        self._extender = extender
        self._clock = clock
        self._on_pods = on_pods  # every new version of a pod, before the extender sees it
        self._view = LiveView(self_maintain)
        self._lock = threading.Lock()
        self._topology_error = ""

        def reflector(
            what: Selection,
            name: str,
            convert: Callable[[Obj], T | None],
            on_change: Callable[[list[Change[T]]], None] = lambda changes: None,
        ) -> Reflector[T]:
            return Reflector(
                gateway,
                what,
                convert,
                on_change,
                on_api_error=on_api_error,
                on_loop_error=on_loop_error,
                name=name,
            )

        labelled = "=".join(deviceinfo.CONSUMER_LABEL)
        self.nodes = reflector(Selection("Node"), "nodes", trim_node, self._nodes)
        self.deviceinfo = reflector(
            Selection("ConfigMap", deviceinfo.NAMESPACE, labels=labelled),
            "deviceinfo",
            _data,
            self._deviceinfos,
        )
        self.topology = reflector(
            _named(TOPOLOGY_CONFIGMAP), "tor-topology", _data, self._topologies
        )
        self.fault_record = reflector(_named(FAULT_RECORD), "fault-record", _data)
        self.pods = reflector(Selection("Pod", fields=NOT_FINISHED), "pods", _kept_pod, self._pods)
        self.failed_pods = reflector(
            Selection("Pod", labels=FAULT_RETRY_LABEL, fields="status.phase=Failed"),
            "failed-pods",
            cached_pod_view,
            lambda changes: extender.state.pods_failed({c.key: c.new for c in changes}),
        )
        self.failed_vnpu_pods = reflector(
            Selection("Pod", fields="status.phase=Failed"),
            "failed-vnpu-pods",
            _creation_failed,
            lambda changes: extender.state.vnpus_failed({c.key: c.new for c in changes}),
        )
        self.all: tuple[Reflector[Any], ...] = (
            self.nodes,
            self.deviceinfo,
            self.topology,
            self.fault_record,
            self.pods,
            self.failed_pods,
            self.failed_vnpu_pods,
        )
        self.watching = False

    # ---- changes -----------------------------------------------------------------------

    def _nodes(self, changes: list[Change[Obj]]) -> None:
        with self._lock:
            for change in changes:
                self._view.set_node(change.key, change.new)
            self._extender.state.update(views=self._view.changed(self._clock()))

    def _deviceinfos(self, changes: list[Change[Data]]) -> None:
        with self._lock:
            for change in changes:
                self._view.set_deviceinfo(change.key.split("/", 1)[-1], change.new)
            self._extender.state.update(views=self._view.changed(self._clock()))

    def _pods(self, changes: list[Change[PodView]]) -> None:
        pods = {c.key: c.new for c in changes}
        self._on_pods([p for p in pods.values() if p is not None])
        with self._lock:
            gangs: set[str] = set()
            for key, pod in pods.items():
                gangs |= self._view.set_pod(key, pod)
            self._extender.state.update(
                views=self._view.changed(self._clock()),
                pods=pods,
                gangs={g: self._view.gang(g) for g in gangs},
            )

    def _topologies(self, changes: list[Change[Data]]) -> None:
        self._extender.state.set_topology(self._parse_topology(changes[-1].new))

    def _parse_topology(self, data: Data | None) -> tor.Topology | None:
        """The ToR topology, if imported; a malformed one is reported once and ignored."""
        if data is None:
            return None
        try:
            topology = tor.parse_topology(data.get(TOPOLOGY_KEY, ""))
        except InvalidInput as bad:
            if str(bad) != self._topology_error:
                log.error("%s/%s ignored: %s", *TOPOLOGY_CONFIGMAP, bad)
            self._topology_error = str(bad)
            return None
        self._topology_error = ""
        return topology

    def tick(self) -> None:
        """Time passed: nodes whose DeviceInfo aged out of (or into) its validity."""
        with self._lock:
            now = self._clock()
            self._view.due(now)
            self._extender.state.update(views=self._view.changed(now))

    # ---- reading and following ---------------------------------------------------------

    def fault_record_data(self) -> Data | None:
        return self.fault_record.get("/".join(FAULT_RECORD))

    def relist(self) -> None:
        """Read everything again (the first read, a new leader's read); KubeError when the
        API server fails one of the lists."""
        for reflector in self.all:
            reflector.relist()

    def healthy(self) -> bool:
        """Every collection has been read and none is failing now."""
        return all(r.synced and r.failing_for() == 0 for r in self.all)

    def start(self) -> None:
        for reflector in self.all:
            reflector.start()
        self.watching = True

    def stop(self) -> None:
        stop_all(self.all)
