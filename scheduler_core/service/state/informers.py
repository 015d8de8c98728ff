"""What the scheduler service reads of the cluster: listed once, then watched.

Seven reflectors, and one per PodGroup API served (``infra.kube.reflector``), each keeping
only the fields read:

- nodes: name, the NPU capacity and allocatable, the labels read, the InternalIP;
- the DeviceInfo ConfigMaps of ``kube-system``, by their label ``mx-consumer-cim=true``
  (the label upstream's own informer selects on);
- NodeD's ConfigMaps (``mindx-dl/mindx-dl-nodeinfo-<node>``) when told to read them, by the
  same label, which NodeD sets on them (Ascend/mind-cluster component/noded/pkg/reporter/cmreporter/
  configmap_reporter.go);
- or, with ``useClusterInfoManager`` (``clusterd``), instead of both: ClusterD's
  ``mindx-dl/cluster-info-*`` ConfigMaps by their label ``mx-consumer-volcano=true``, as
  Huawei's Volcano plugin reads one source or the other (``contract.clusterd``);
- the ToR topology (``kube-system/basic-tor-node-cm``) and the fault record
  (``volcano-system/vcjob-fault-npu-cm``), each by name;
- pods that are not finished (a field selector on the phase), kept only when they request
  NPUs or belong to a gang;
- failed pods, kept when their job may restart (labelled ``fault-retry-times``, or in a
  group whose PodGroup may say so) or when the kubelet failed them because their vNPU could
  not be made (they are deleted, so that their controller makes them again);
- the PodGroups of Volcano (``scheduling.volcano.sh/v1beta1``) and of the scheduler-plugins
  coscheduling plugin (``scheduling.x-k8s.io/v1alpha1``), each only when the API server
  serves it (asked at every full read), trimmed to ``minMember`` and the job settings.

Each change updates the live view, which computes again only the nodes it touches; the
extender's state gets those nodes, the pods and the gangs that changed. One lock orders the
changes of all, so the verbs see them in the order they were applied.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from contract import clusterd as clusterd_cms
from contract import deviceinfo, nodeinfo
from contract.annotations import (
    FAULT_RECORD,
    FAULT_RETRY_LABEL,
    GANG_LABEL,
    TOPOLOGY_CONFIGMAP,
)
from contract.groups import PODGROUP_APIS, podgroups
from contract.objects import Obj, vnpu_creation_failed
from contract.pods import PodView, cached_pod_view
from contract.tor_topology import TopologyReader
from infra.events import pod_ref
from infra.kube.port import KubeGateway, Selection
from infra.kube.reflector import Change, Reflector, stop_all
from scheduler_core.service.state.cluster_view import trim_node
from scheduler_core.service.state.extender_state import ExtenderState
from scheduler_core.service.state.jobs import PodGroupInfo, podgroup_info
from scheduler_core.service.state.live_view import LiveView, matters

log = logging.getLogger(__name__)

T = TypeVar("T")
NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"
POD_GROUP_INVALID = "NPUPodGroupInvalid"
Data = Mapping[str, str]


def _named(where: tuple[str, str]) -> Selection:
    return Selection("ConfigMap", where[0], fields=f"metadata.name={where[1]}")


def _data(configmap: Obj) -> Data:
    data = configmap.get("data") or {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class FailedPod:
    pod: PodView
    may_restart: bool  # its job may restart it (``fault-retry-times``, its own or its group's)
    vnpu_failed: bool  # the kubelet failed it: its vNPU could not be made


def _failed(obj: Obj) -> FailedPod | None:
    pod = cached_pod_view(obj)
    may_restart = FAULT_RETRY_LABEL in pod.labels or pod.group is not None
    vnpu_failed = vnpu_creation_failed(obj)
    return FailedPod(pod, may_restart, vnpu_failed) if may_restart or vnpu_failed else None


def _kept_pod(obj: Obj) -> PodView | None:
    pod = cached_pod_view(obj)
    return pod if matters(pod) else None


class ClusterInformers:
    def __init__(
        self,
        gateway: KubeGateway,
        state: ExtenderState,
        clock: Callable[[], float],
        *,
        self_maintain: bool = True,
        noded: bool = False,
        clusterd: bool = False,
        on_pods: Callable[[list[PodView]], None] = lambda pods: None,
        on_api_error: Callable[[], None] = lambda: None,
        on_loop_error: Callable[[str], None] = lambda name: None,
    ) -> None:
        self._state = state
        self._clock = clock
        self._on_pods = on_pods  # every new version of a pod, before the extender sees it
        self._view = LiveView(self_maintain, clusterd=clusterd)
        self.clusterd = clusterd
        self._lock = threading.Lock()
        self._topology = TopologyReader()
        self._gateway = gateway
        self._sources_said = False

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
        if clusterd:  # ClusterD's sums instead of the agents' and NodeD's own ConfigMaps
            by_label = "=".join(clusterd_cms.CONSUMER_LABEL)
            self.deviceinfo = reflector(
                Selection("ConfigMap", clusterd_cms.NAMESPACE, labels=by_label),
                "clusterd",
                _data,
                self._clusterd,
            )
        log.info(
            "faults are read from %s",
            f"ClusterD's {clusterd_cms.NAMESPACE}/cluster-info-* ConfigMaps (useClusterInfoManager)"
            if clusterd
            else f"the DeviceInfo ConfigMaps of {deviceinfo.NAMESPACE}"
            + (f" and NodeD's of {nodeinfo.NAMESPACE}" if noded else ""),
        )
        # NodeD's ConfigMaps, where the service is told to read them (its namespace exists
        # only where MindCluster is installed, and reading it needs a Role there).
        self.nodeinfo: Reflector[Data] | None = None
        if noded and not clusterd:
            self.nodeinfo = reflector(
                Selection(
                    "ConfigMap", nodeinfo.NAMESPACE, labels="=".join(nodeinfo.CONSUMER_LABEL)
                ),
                "nodeinfo",
                _data,
                self._nodeinfos,
            )
        self.topology = reflector(
            _named(TOPOLOGY_CONFIGMAP), "tor-topology", _data, self._topologies
        )
        self.fault_record = reflector(_named(FAULT_RECORD), "fault-record", _data)
        self.pods = reflector(Selection("Pod", fields=NOT_FINISHED), "pods", _kept_pod, self._pods)
        self.failed_pods = reflector(
            Selection("Pod", fields="status.phase=Failed"), "failed-pods", _failed, self._failed
        )
        self._reflector = reflector
        self.podgroups: dict[str, Reflector[PodGroupInfo]] = {}
        self.all: tuple[Reflector[Any], ...] = (
            self.nodes,
            self.deviceinfo,
            self.topology,
            self.fault_record,
            self.pods,
            self.failed_pods,
            *([self.nodeinfo] if self.nodeinfo is not None else []),
        )
        self.watching = False

    # ---- changes -----------------------------------------------------------------------

    def _nodes(self, changes: list[Change[Obj]]) -> None:
        with self._lock:
            for change in changes:
                self._view.set_node(change.key, change.new)
            self._state.update(views=self._view.changed(self._clock()))

    def _deviceinfos(self, changes: list[Change[Data]]) -> None:
        with self._lock:
            for change in changes:
                self._view.set_deviceinfo(change.key.split("/", 1)[-1], change.new)
            self._state.update(views=self._view.changed(self._clock()))

    def _clusterd(self, changes: list[Change[Data]]) -> None:
        with self._lock:
            for change in changes:
                self._view.set_clusterd(change.key.split("/", 1)[-1], change.new)
            self._state.update(views=self._view.changed(self._clock()))

    def _nodeinfos(self, changes: list[Change[Data]]) -> None:
        with self._lock:
            for change in changes:
                self._view.set_nodeinfo(change.key.split("/", 1)[-1], change.new)
            self._state.update(views=self._view.changed(self._clock()))

    def _pods(self, changes: list[Change[PodView]]) -> None:
        pods = {c.key: c.new for c in changes}
        self._on_pods([p for p in pods.values() if p is not None])
        for pod in pods.values():
            if pod is not None and pod.group is not None:
                self._warn_malformed(pod)
        with self._lock:
            gangs: set[str] = set()
            for key, pod in pods.items():
                gangs |= self._view.set_pod(key, pod)
            self._state.update(
                views=self._view.changed(self._clock()),
                pods=pods,
                gangs={g: self._view.gang(g) for g in gangs},
            )

    def _failed(self, changes: list[Change[FailedPod]]) -> None:
        state = self._state
        state.pods_failed(
            {c.key: c.new.pod if c.new and c.new.may_restart else None for c in changes}
        )
        state.vnpus_failed(
            {c.key: c.new.pod if c.new and c.new.vnpu_failed else None for c in changes}
        )

    def _podgroups(self, source: str, changes: list[Change[PodGroupInfo]]) -> None:
        state = self._state
        with self._lock:
            for change in changes:
                state.jobs.set_group(source, change.key, change.new)
                if change.new is not None and change.new.error:
                    self._report_podgroup(source, change.key, change.new.error)
            state.update(gangs={c.key: self._view.gang(c.key) for c in changes})

    def _report_podgroup(self, source: str, key: str, error: str) -> None:
        """A malformed PodGroup harms its own job only: each of its pods gets a Warning (the
        recorder aggregates repeats)."""
        log.warning("%s PodGroup %s is malformed: %s", source, key, error)
        for pod in self._view.gang(key):
            self._warn_malformed(pod)

    def _warn_malformed(self, pod: PodView) -> None:
        state = self._state
        group = pod.group
        if group is None or group.source not in self.podgroups:
            return
        info = state.jobs.groups.get((group.source, group.key))
        if info is not None and info.error:
            message = f"{group.describe()} is malformed: {info.error}"
            state.events.warn(pod_ref(pod.namespace, pod.name, pod.uid), POD_GROUP_INVALID, message)

    def discover(self) -> None:
        """Watch the PodGroups of each API the cluster serves (KubeError when discovery
        fails); say which sources of jobs are read."""
        added = []
        for source, (group, version) in PODGROUP_APIS.items():
            if source in self.podgroups or not self._gateway.served(group, version):
                continue
            watch: Reflector[PodGroupInfo] = self._reflector(
                Selection(podgroups(source)),
                f"{source}-podgroups",
                podgroup_info,
                functools.partial(self._podgroups, source),
            )
            self.podgroups[source] = watch
            self._state.jobs.sources = frozenset(self.podgroups)  # before it reports
            self.all = (*self.all, watch)
            added.append(watch)
            if self.watching:
                watch.start()
        if added or not self._sources_said:
            self._sources_said = True
            served = ", ".join(f"{s} PodGroups" for s in sorted(self.podgroups)) or "none"
            log.info(
                "jobs are read from pod labels and annotations (Kueue pod groups, %s); "
                "PodGroup APIs served: %s",
                GANG_LABEL,
                served,
            )

    def _topologies(self, changes: list[Change[Data]]) -> None:
        self._state.set_topology(self._topology.read(changes[-1].new))

    def tick(self) -> None:
        """Time passed: nodes whose DeviceInfo aged out of (or into) its validity."""
        with self._lock:
            now = self._clock()
            self._view.due(now)
            self._state.update(views=self._view.changed(now))

    # ---- reading and following ---------------------------------------------------------

    def holders(self) -> dict[str, dict[int, str]]:
        """node → chip → the pod holding it, as the watches show it now (a copy)."""
        with self._lock:
            return {node: dict(chips) for node, chips in self._view.holders.items()}

    def fault_record_data(self) -> Data | None:
        return self.fault_record.get("/".join(FAULT_RECORD))

    def compare(self) -> dict[str, Any]:
        """This replica's view against a fresh read of the cluster, which it leaves as it is:
        each collection whose store drifted (``Drift``), and each node whose view differs
        from the one the fresh read gives (the aggregation the watches feed checked against
        the same aggregation of everything at once). Empty when they agree; KubeError when a
        list fails. For an operator asking "does the scheduler see what is there?"."""
        drifts = {}
        fresh: dict[str, dict[str, Any]] = {}
        for reflector in self.all:
            drift, fresh[reflector.name] = reflector.compare()
            if drift:
                drifts[reflector.name] = drift
        with self._lock:
            now = self._clock()
            self._view.due(now)
            self._state.update(views=self._view.changed(now))
            read = LiveView(self._view.self_maintain, clusterd=self.clusterd)
            for name, node in fresh[self.nodes.name].items():
                read.set_node(name, node)
            for key, data in fresh[self.deviceinfo.name].items():
                if self.clusterd:
                    read.set_clusterd(key.split("/", 1)[-1], data)
                else:
                    read.set_deviceinfo(key.split("/", 1)[-1], data)
            for key, data in fresh.get("nodeinfo", {}).items():
                read.set_nodeinfo(key.split("/", 1)[-1], data)
            for key, pod in fresh[self.pods.name].items():
                read.set_pod(key, pod)
            read.changed(now)
            watched = self._view.views
            differing = {
                name: {"watched": repr(watched.get(name)), "fresh": repr(read.views.get(name))}
                for name in sorted(watched.keys() | read.views.keys())
                if watched.get(name) != read.views.get(name)
            }
        answer: dict[str, Any] = {}
        if drifts:
            answer["collections"] = drifts
        if differing:
            answer["node_views"] = differing
        return answer

    def relist(self) -> None:
        """Read everything again (the first read, a new leader's read); KubeError when the
        API server fails one of the lists."""
        self.discover()
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
