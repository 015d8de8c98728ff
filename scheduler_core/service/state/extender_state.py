"""The extender's state: what the watches report (nodes, pods, gangs, the ToR topology, failed
pods), the session ledger they feed, and what makes fault jobs (``fault_watch``). The verbs
(``verbs.extender.Extender``) read and take from it under its lock, the controllers act on
what it finds."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from chip_topology.routing import product_by_name
from contract.chip_names import KIND_OF_RESOURCE, InvalidInput
from contract.pods import PodView
from contract.tor_topology import Topology
from contract.vnpu import NPU_CORE_RESOURCE
from infra.events import EventRecorder
from infra.kube.port import KubeGateway
from scheduler_core.engine import locality, rescheduling
from scheduler_core.engine.policies import DEFAULT_POLICY, Policy
from scheduler_core.engine.rescheduling import Deletion, FaultJob
from scheduler_core.engine.session import Session
from scheduler_core.service.state.assumed import AssumedBinds
from scheduler_core.service.state.cluster_view import NodeView
from scheduler_core.service.state.fault_restarts import ResetUpdate
from scheduler_core.service.state.fault_watch import FaultWatch
from scheduler_core.service.state.gang_pods import GangPods
from scheduler_core.service.state.gangs import Gangs
from scheduler_core.service.state.holds import DEFAULT_HOLD_SHARE
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
        self.assumed = AssumedBinds(gang_ttl)
        self.vnpu = VnpuNodes(gang_ttl)  # dynamic-vNPU nodes and the vNPUs given on them
        self.gangs = Gangs(gang_ttl, hold_limit, hold_share)
        self.faults = FaultWatch(hold_limit, grace_over)
        self._failed_vnpus: dict[str, PodView] = {}  # pods whose vNPU could not be made
        self.network = TorState(network)  # where the nodes are, the ToRs' states
        self.binds = 0
        # Counts the times a place was freed that kube-scheduler sees no event for: a node
        # offered again (a NodeD report cleared, its DeviceInfo fresh again) or offering more
        # chips, a reservation, an assumed bind or a hold (a waiting gang's, a fault job's)
        # given back. The plugin polls it (``freed``) to move the pods it refused back to the
        # active queue at once, not 5 minutes on.
        self.freed = 0
        self._fault_held: frozenset[str] = frozenset()  # fault jobs' held nodes, last pass
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
                # A pod's job read once: it walks the pod's group.
                self.faults.set_pod(key, pod, None if pod is None else self.job_of(pod))
            for gang, members in gangs.items():
                # The job's settings read once per group (reading them per member walked
                # every member for each: quadratic in the gang's size).
                job = self.job_of(members[0]) if members else JobSettings()
                self.pods.set_gang(gang, members, job.labels_of, many=job.gang is not None)
                self.faults.set_silence(gang, job.annotations)
            if gangs:
                self.network.stale = self.faults.stale = True

    def _set_node(self, name: str, view: NodeView | None) -> None:
        before = (name in self.left_out, name in self.network.sub_healthy)
        offering = self._offering(name)
        self.left_out.pop(name, None)
        offered = None
        self.faults.set_node(name, view)
        self.vnpu.set_node(name, None if view is None else view.vnode)
        self.fits.set(name, None if view is None else view.facts)
        if view is None:
            self.session.remove_node(name)
        else:
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
                offered = view
        self.network.set_node(name, offered)
        self.faults.stale |= before != (name in self.left_out, name in self.network.sub_healthy)
        if self._offering(name) > offering or (before[0] and offered is not None):
            self.freed += 1

    def _offering(self, name: str) -> int:
        """The chips a node offers now (0: none, or not a node of chips)."""
        return len(self.session.usable(name)) if name in self.session.nodes else 0

    def pods_failed(self, pods: Mapping[str, PodView | None]) -> None:
        """Pods of ``fault-retry-times`` jobs that failed (None: such a pod is gone)."""
        with self.lock:
            self.faults.pods_failed(pods)

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
            self.network.set_topology(topology)

    def warm(self) -> None:
        """Fill the per-signature caches (after the first read, off the request path)."""
        with self.lock:
            self.session.warm()

    def expire(self) -> None:
        """Time passed: binds assumed too long, expired reservations and ended holds give
        their chips back."""
        with self.lock:
            now = self.clock()
            expired = self.assumed.expired(now)
            for bind in expired:
                self.session.release_task(bind.job, bind.task)
            self.vnpu.expire(now)
            reserved, holding = len(self.gangs.reservations), self.gangs.holding
            partial = self.pods.pending.keys() & self.pods.bound.keys()
            self.gangs.expire(self.session, self.pods.pending, now, partial)
            self.network.stale |= reserved != len(self.gangs.reservations)
            # A fault job's hold is read at each call (``FaultRestarts.holds``) and lapses
            # with no change of state: this pass compares it with the last one's.
            fault_held = frozenset(self.faults.restarts.holds(now))
            lapsed = self._fault_held - fault_held
            self._fault_held = fault_held
            given_back = reserved > len(self.gangs.reservations) or holding > self.gangs.holding
            if expired or given_back or lapsed:
                self.freed += 1

    def network_view(self) -> locality.Network:
        """The network now (under the lock): the nodes' places, bound pods, reservations."""
        return self.network.view(self.pods, self.gangs.reservations)

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
            return self.gangs.restarts(
                self.pods.members, self.clock(), coming_back=self.faults.restarts.get
            )

    def fault_deletions(self) -> list[Deletion]:
        """Find fault jobs in the last view and say which pods to delete so they restart.
        A fault job's healthy nodes stay held for it until it is placed again."""
        with self.lock:
            return self.faults.deletions(
                self.pods, self.left_out, self.network.sub_healthy, self.job_of, self.clock()
            )

    def restore_faults(
        self, faults: Iterable[tuple[FaultJob, float]], retries: Mapping[str, int]
    ) -> None:
        """Fault jobs and restarts left recorded before this scheduler restarted
        (``vcjob-fault-npu-cm``)."""
        with self.lock:
            self.faults.restarts.restore(faults)
            self.faults.restarts.restore_retries(retries)

    def fault_records(self) -> tuple[dict[str, str], dict[tuple[str, str], dict[str, str]]]:
        """``vcjob-fault-npu-cm`` data and each fault job's ``fault-config-<job>``."""
        with self.lock:
            return self.faults.restarts.records()

    def resets_due(self) -> list[tuple[str, str, ResetUpdate]]:
        """The ``reset-config-<job>`` updates due: (namespace, job name, the update)."""
        with self.lock:
            due = self.faults.restarts.take_resets()
            return [
                (job.split("/", 1)[0], self.jobs.job_name(job), update)
                for job, update in sorted(due.items())
            ]

    def tor_share_data(self) -> dict[str, str] | None:
        """``tor-share-cm`` content under switch affinity 2.0 (None otherwise)."""
        with self.lock:
            self.network_view()
            return self.network.tor_share_data()


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
