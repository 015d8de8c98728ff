"""The extender's state: what the watches report (nodes, pods, gangs, the ToR topology, failed
pods), the session ledger they feed, and the fault restarts found in it. The verbs
(``extender.Extender``) read and take from it under its lock."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from chip_topology.products import product_by_name
from contract.annotations import FAULT_SCHEDULING_LABEL
from contract.chip_names import KIND_OF_RESOURCE, InvalidInput
from contract.pods import PodView
from contract.tor_topology import Topology
from contract.vnpu import NPU_CORE_RESOURCE
from infra.events import EventRecorder
from infra.kube.port import KubeGateway
from scheduler_core.engine import chip_faults, locality, rescheduling
from scheduler_core.engine.chip_faults import NodeFaults, Silence
from scheduler_core.engine.policies import DEFAULT_POLICY, Policy
from scheduler_core.engine.rescheduling import Deletion, FaultJob, JobPod
from scheduler_core.engine.session import Session
from scheduler_core.service.state.assumed import AssumedBinds
from scheduler_core.service.state.cluster_view import NodeView
from scheduler_core.service.state.fault_restarts import FaultRestarts, ResetUpdate
from scheduler_core.service.state.gangs import DEFAULT_HOLD_SHARE, GangPods, Gangs, job_pod
from scheduler_core.service.state.jobs import JobDirectory, JobSettings
from scheduler_core.service.state.node_fits import NodeFits
from scheduler_core.service.state.tor_state import TorState
from scheduler_core.service.state.vnpu_nodes import VnpuNodes

log = logging.getLogger(__name__)

DEFAULT_NETWORK = locality.Settings()
COMPONENT = "ascend-npu-scheduler"
EMPTY: Mapping[str, Any] = {}


class ExtenderState:
    def __init__(
        self,
        gateway: KubeGateway,
        policy: Policy = DEFAULT_POLICY,
        clock: Callable[[], float] = time.time,
        *,
        gang_ttl: float = 60.0,
        hold_limit: float = 600.0,
        hold_share: float = DEFAULT_HOLD_SHARE,
        network: locality.Settings = DEFAULT_NETWORK,
        grace_over: float = rescheduling.GRACE_OVER_TIME,
        events: EventRecorder | None = None,
    ) -> None:
        self.gateway = gateway
        # One recorder for the service: Events on pods, aggregated, written off the lock.
        self.events = events or EventRecorder(gateway, COMPONENT, socket.gethostname(), clock)
        self._policy = policy
        self.clock = clock
        self.lock = threading.Lock()
        self._node_writes: defaultdict[str, threading.Lock] = defaultdict(threading.Lock)
        self.jobs = JobDirectory()
        self.session = Session((), policy)
        self.left_out: dict[str, str] = {}
        self.fits = NodeFits()  # every NPU node's labels and taints, for pods' constraints
        # The pods the watches keep (asking NPUs, or of a gang), as they last reported them:
        # the verbs decide from these, not from the pod a caller sends (``Extender.live``).
        self.live: dict[str, PodView] = {}
        self.pods = GangPods()
        self._down: set[str] = set()
        self._failed: dict[str, frozenset[int]] = {}
        self._node_faults: dict[str, NodeFaults] = {}  # the failed chips' fault codes
        # Jobs that silence some faults (``huawei.com/schedule.filter.*``), and when the
        # first fault silenced now shows: the fault jobs are looked for again then.
        self._silences: dict[str, Silence] = {}
        self._silence_ends: float | None = None
        self.addresses: dict[str, str] = {}
        self._super_pods: dict[str, int] = {}
        self._racks: dict[str, int] = {}  # node → RackID (Atlas 950 SuperPoD)
        self._sub_healthy: set[str] = set()
        self._topology: Topology | None = None
        self.network_stale = True  # the ToR state is built again before it is next read
        self._faults_stale = True  # fault jobs are looked for again at the next check
        self.assumed = AssumedBinds(gang_ttl)
        self.vnpu = VnpuNodes(gang_ttl)  # dynamic-vNPU nodes and the vNPUs given on them
        self.gangs = Gangs(gang_ttl, hold_limit, hold_share)
        self.faults = FaultRestarts(hold_limit, grace_over)
        # One-pod jobs labelled fault-scheduling: pod key → (mode, the bound pod)
        self._one_pod: dict[str, tuple[str, list[JobPod]]] = {}
        self._failed_pods: dict[str, PodView] = {}  # failed pods of fault-retry-times jobs
        self._failed_vnpus: dict[str, PodView] = {}  # pods whose vNPU could not be made
        self._warned: set[str] = set()  # jobs whose malformed recovery settings were logged
        self._bad_silence: set[str] = set()  # jobs whose malformed silencing was logged
        self.tors = TorState(network)
        self.binds = 0
        # Whether a decision may still be written: with an election, this replica still
        # leads (a choice made while leading must not land after the lease is lost).
        self.fence: Callable[[], bool] = lambda: True
        # Volcano's allocateFunc: pod key → (UID, the annotation keys written on it), until
        # the pod is bound or gone (a discard takes them off again).
        self.annotated: dict[str, tuple[str, tuple[str, ...]]] = {}

    # ---- state: the cluster's changes, as the watches report them ---------------------

    def job_of(self, pod: PodView) -> JobSettings:
        """The pod's job: its group's size and settings, from its PodGroup and the group's
        live pods."""
        members = self.pods.members.get(pod.group.key, ()) if pod.group is not None else ()
        return self.jobs.settings(pod, members)

    def job_labels(self, pod: PodView) -> Mapping[str, str]:
        """The pod's labels with its job's settings (its own, where the job cannot be read)."""
        return _settings_labels(self.job_of(pod), pod)

    def writing_to(self, node: str) -> threading.Lock:
        """The lock that puts one node's binding writes in a row."""
        with self.lock:
            return self._node_writes[node]

    def update(
        self,
        views: Mapping[str, NodeView | None] = EMPTY,
        pods: Mapping[str, PodView | None] = EMPTY,
        gangs: Mapping[str, Sequence[PodView]] = EMPTY,
    ) -> None:
        """Nodes whose view changed (None: no longer an NPU node), pods that changed (None:
        gone) and the gangs they are in, with their live pods now. A bind the view now shows
        is no longer assumed: the pod holds its chips."""
        with self.lock:
            for name, view in views.items():
                self._set_node(name, view)
            for key, pod in pods.items():
                if pod is None:
                    self.live.pop(key, None)
                else:
                    self.live[key] = pod
                if pod is None or pod.node:
                    self.annotated.pop(key, None)
                bind = self.assumed.settled(key, pod)
                if bind is not None:
                    self.session.release_task(bind.job, bind.task)
                self.vnpu.settle(key, pod)
                self._set_one_pod_job(key, pod)
            for gang, members in gangs.items():
                # The job's settings read once per group (reading them per member walked
                # every member for each: quadratic in the gang's size).
                job = self.job_of(members[0]) if members else JobSettings()
                self.pods.set_gang(gang, members, job.labels_of, many=job.gang is not None)
                self._set_silence(gang, job.annotations)
            if gangs:
                self.network_stale = self._faults_stale = True

    def _set_node(self, name: str, view: NodeView | None) -> None:
        before = (
            self._failed.get(name),
            name in self._down,
            name in self.left_out,
            name in self._sub_healthy,
        )
        where = (
            self.addresses.pop(name, None),
            self._super_pods.pop(name, None),
            self._racks.pop(name, None),
            name in self._sub_healthy,
        )
        self._sub_healthy.discard(name)
        self.left_out.pop(name, None)
        self._failed.pop(name, None)
        self._node_faults.pop(name, None)
        self._down.discard(name)
        self.vnpu.set_node(name, None if view is None else view.vnode)
        self.fits.set(name, None if view is None else view.facts)
        if view is None:
            self.session.remove_node(name)
        else:
            if view.failed is not None:
                self._failed[name] = view.failed
            if view.faults is not None and view.faults.codes:
                self._node_faults[name] = view.faults
            if view.down:
                self._down.add(name)
            try:
                if view.vnode is not None:  # kept by the vNPU nodes, not the session
                    self.session.remove_node(name)
                elif view.state is None:
                    raise InvalidInput(view.reason)
                else:
                    self.session.upsert_node(view.state)
            except InvalidInput as left_out:
                self.session.remove_node(name)
                self.left_out[name] = str(left_out)
            else:
                if view.address:
                    self.addresses[name] = view.address
                if view.super_pod is not None:
                    self._super_pods[name] = view.super_pod
                if view.rack is not None:
                    self._racks[name] = view.rack
                if view.sub_healthy:
                    self._sub_healthy.add(name)
        after = (
            self._failed.get(name),
            name in self._down,
            name in self.left_out,
            name in self._sub_healthy,
        )
        self._faults_stale |= before != after
        self.network_stale |= where != (
            self.addresses.get(name),
            self._super_pods.get(name),
            self._racks.get(name),
            name in self._sub_healthy,
        )

    def _set_one_pod_job(self, key: str, pod: PodView | None) -> None:
        """A pod outside any gang, labelled ``fault-scheduling``, is a fault job of its own."""
        old = self._one_pod.pop(key, None)
        annotations: Mapping[str, str] = {}
        if pod is not None:
            settings = self.job_of(pod)  # read once: it walks the pod's group
            if settings.gang is None:
                annotations = settings.annotations
                mode = _settings_labels(settings, pod).get(FAULT_SCHEDULING_LABEL)
                if mode in (rescheduling.GRACE, rescheduling.FORCE):
                    member = job_pod(pod, 0)
                    if member is not None:
                        self._one_pod[key] = (mode, [member])
        self._faults_stale |= old != self._one_pod.get(key)
        self._set_silence(key, annotations)

    def _set_silence(self, job: str, annotations: Mapping[str, str]) -> None:
        """The job's silencing (kept only when it silences something); a malformed one is
        logged once and silences nothing, as ClusterD reports every fault then."""
        silence = chip_faults.silence_of(annotations)
        if isinstance(silence, str):
            if job not in self._bad_silence:
                log.warning("job %s: %s; no fault is silenced for it", job, silence)
                self._bad_silence.add(job)
            silence = Silence()
        else:
            self._bad_silence.discard(job)
        old = self._silences.pop(job, None)
        if silence.codes or silence.levels:
            self._silences[job] = silence
        self._faults_stale |= old != self._silences.get(job)

    def _failed_for(self, now: float) -> Callable[[str], Mapping[str, frozenset[int]]]:
        """The failed chips as each job sees them: its silenced faults younger than their
        window left out (ClusterD's custom_filter_fault_processor.go); notes when the first
        of those shows, to look again then."""

        def failed_for(job: str) -> Mapping[str, frozenset[int]]:
            silence = self._silences.get(job)
            if silence is None or not self._node_faults:
                return self._failed
            faults = {n: f for n, f in self._node_faults.items() if n in self._failed}
            end = chip_faults.silence_ends(silence, faults.values(), now)
            if end is not None:
                self._silence_ends = min(end, self._silence_ends or end)
            return {**self._failed, **chip_faults.job_failed_chips(silence, faults, now)}

        return failed_for

    def pods_failed(self, pods: Mapping[str, PodView | None]) -> None:
        """Pods of ``fault-retry-times`` jobs that failed (None: such a pod is gone)."""
        with self.lock:
            self._faults_stale |= _record(self._failed_pods, pods)

    def vnpus_failed(self, pods: Mapping[str, PodView | None]) -> None:
        """Pods the kubelet failed because their vNPU could not be made (None: gone)."""
        with self.lock:
            _record(self._failed_vnpus, pods)

    def failed_creations(self) -> list[PodView]:
        """The pods to delete, upstream's ``chipDyCutErr`` recovery."""
        with self.lock:
            return list(self._failed_vnpus.values())

    def set_topology(self, topology: Topology | None) -> None:
        with self.lock:
            self._topology = topology
            self.network_stale = True

    def warm(self) -> None:
        """Fill the per-signature caches (after the first read, off the request path)."""
        with self.lock:
            self.session.warm()

    def expire(self) -> None:
        """Time passed: binds assumed too long and expired reservations give their chips
        back."""
        with self.lock:
            now = self.clock()
            for bind in self.assumed.expired(now):
                self.session.release_task(bind.job, bind.task)
            self.vnpu.expire(now)
            reserved = len(self.gangs.reservations)
            partial = self.pods.pending.keys() & self.pods.bound.keys()
            self.gangs.expire(self.session, self.pods.pending, now, partial)
            self.network_stale |= reserved != len(self.gangs.reservations)

    def network_view(self) -> locality.Network:
        if self.network_stale:
            self.tors.rebuild(
                self.addresses,
                self._super_pods,
                self._topology,
                self.pods,
                self.gangs.reservations,
                sub_healthy=frozenset(self._sub_healthy),
                racks=self._racks,
            )
            self.network_stale = False
        return self.tors.network

    def node_count(self) -> int:
        """NPU nodes offered now (chips, or AI cores for dynamic vNPUs)."""
        with self.lock:
            return len(self.session.nodes) + len(self.vnpu)

    def free(self, resource: str) -> int:
        """What nodes offer now of a chip kind (free chips) or of npu-core (free AI cores)."""
        with self.lock:
            if resource == NPU_CORE_RESOURCE:
                return self.vnpu.free_cores()
            kind = KIND_OF_RESOURCE.get(resource)
            return sum(
                len(self.session.usable(name))
                for name, node in self.session.nodes.items()
                if product_by_name(node.product).kind is kind
            )

    # ---- fault rescheduling --------------------------------------------------------

    def restart_deletions(self) -> list[Deletion]:
        """The pods to delete so their jobs restart: fault jobs (``fault_deletions``) and
        gangs partly running too long (``gang_deletions``)."""
        return self.fault_deletions() + self.gang_deletions()

    def gang_deletions(self) -> list[Deletion]:
        """Gangs partly running for longer than the TTL whose rest cannot be placed
        (``Gangs.restarts``); fault jobs coming back are ruled by their own hold."""
        with self.lock:
            return self.gangs.restarts(self.pods.members, self.clock(), coming_back=self.faults.get)

    def fault_deletions(self) -> list[Deletion]:
        """Find fault jobs in the last view and say which pods to delete so they restart.
        A fault job's healthy nodes stay held for it until it is placed again."""
        with self.lock:
            now = self.clock()
            shows = self._silence_ends is not None and now >= self._silence_ends
            if not self._faults_stale and not self.faults.active and not shows:
                return []  # nothing changed that could make or end a fault: no scan
            self._faults_stale = False
            self._silence_ends = None
            running = self.pods.running | self._one_pod
            on_nodes = {p.node for _, members in running.values() for p in members}
            down = self._down | {
                n for n in on_nodes if n not in self._failed and n not in self.left_out
            }
            deletions = self.faults.update(
                running,
                self.pods.pending,
                self._failed,
                down,
                now,
                one_pod=self._one_pod.keys(),
                recoveries={
                    job: self._recovery(job) for job in running if job not in self._one_pod
                },
                sub_healthy=self._sub_healthy,
                failed_for=self._failed_for(now),
            )
            return deletions + self.faults.retry(
                self._failed_pods,
                lambda job: self.pods.members.get(job, []),
                now,
                self.job_labels,
            )

    def _recovery(self, job: str) -> rescheduling.Recovery:
        """How a gang recovers from a fault, from its job's settings (its pods' NPUs turn
        ``sp-block`` and ``ra-block`` into pods)."""
        members = self.pods.members.get(job, [])
        npu = next((p for p in members if p.npu_limit), None)
        if npu is None:
            return rescheduling.Recovery()
        settings = self.job_of(npu)
        recovery, warning = rescheduling.recovery_of(
            settings.labels, settings.annotations, npu.npu_limit
        )
        if warning and job not in self._warned:  # once per job, not at every check
            log.warning("job %s: %s", job, warning)
            self._warned.add(job)
        elif not warning:
            self._warned.discard(job)
        return recovery

    def restore_faults(
        self, faults: Iterable[tuple[FaultJob, float]], retries: Mapping[str, int]
    ) -> None:
        """Fault jobs and restarts left recorded before this scheduler restarted
        (``vcjob-fault-npu-cm``)."""
        with self.lock:
            self.faults.restore(faults)
            self.faults.restore_retries(retries)

    def fault_records(self) -> tuple[dict[str, str], dict[tuple[str, str], dict[str, str]]]:
        """``vcjob-fault-npu-cm`` data and each fault job's ``fault-config-<job>``."""
        with self.lock:
            return self.faults.records()

    def resets_due(self) -> list[tuple[str, str, ResetUpdate]]:
        """The ``reset-config-<job>`` updates due: (namespace, job name, the update)."""
        with self.lock:
            due = self.faults.take_resets()
            return [
                (job.split("/", 1)[0], self.jobs.job_name(job), update)
                for job, update in sorted(due.items())
            ]

    def tor_share_data(self) -> dict[str, str] | None:
        """``tor-share-cm`` content under switch affinity 2.0 (None otherwise)."""
        with self.lock:
            self.network_view()
            return self.tors.tor_share_data()


def _record(kept: dict[str, PodView], pods: Mapping[str, PodView | None]) -> bool:
    """Keep the pods that came, forget those gone (None); whether any came."""
    came = False
    for key, pod in pods.items():
        if pod is None:
            kept.pop(key, None)
        else:
            kept[key] = pod
            came = True
    return came


def _settings_labels(settings: JobSettings, pod: PodView) -> Mapping[str, str]:
    """The pod's labels with its job's settings (its own, where the job cannot be read)."""
    return settings.labels if not (settings.refusal or settings.waiting) else pod.labels
