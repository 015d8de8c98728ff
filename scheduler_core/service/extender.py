"""The kube-scheduler extender: filter, prioritize and bind NPU pods with scheduler_core.

kube-scheduler asks one pod at a time (filter over candidate nodes, prioritize, bind), while
binds run asynchronously; one lock and the session ledger keep two pods off the same chips
even before the agents' ConfigMaps catch up. Bind chooses the chips and creates the Binding
with ``huawei.com/Ascend910`` and ``predicate-time``, so they reach the pod atomically with
its node.

Gangs: pods labelled ``ascend.npu/gang: <name>`` with ``ascend.npu/gang-size: "<N>"`` (all N
pods of 8 chips) are reserved as N whole nodes at once, only when all N pods exist; members
bind only into that reservation, which expires after ``gang_ttl`` if they never do. While a
gang waits, up to N whole free nodes are held back from one-pod jobs, oldest gang first, for
at most ``hold_limit`` seconds, so a stream of small pods cannot starve it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from contract.annotations import (
    CHIPS_ANNOTATION,
    GANG_LABEL,
    GANG_SIZE_ANNOTATION,
    PREDICATE_TIME,
    RANK_INDEX_ANNOTATION,
)
from contract.objects import Obj, live, npu_limit
from infra.kube.port import KubeError, KubeGateway
from scheduler_core.engine import locality, rescheduling, tor, tor_share
from scheduler_core.engine.model import Job, Placement, Task
from scheduler_core.engine.policies import DEFAULT_POLICY, Policy
from scheduler_core.engine.products import (
    ACCELERATOR_TYPE_LABEL,
    product_by_name,
    product_for_selector,
)
from scheduler_core.engine.rescheduling import Deletion, FaultJob
from scheduler_core.engine.session import Session
from scheduler_core.engine.superpod import SuperPodInvalid
from scheduler_core.engine.tor import Topology, TorInvalid
from scheduler_core.engine.tor_share import SharedSelection
from scheduler_core.engine.validation import JobInvalid, validate_job
from scheduler_core.service.cluster_view import Snapshot

log = logging.getLogger(__name__)

MAX_SCORE = 10
DEFAULT_NETWORK = locality.Settings()


class BadPod(ValueError):
    """A pod the extender cannot read; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class PodRequest:
    namespace: str
    name: str
    uid: str
    npu: int
    product: str
    gang: str | None
    gang_size: int
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def rank(self) -> int | None:
        text = self.annotations.get(RANK_INDEX_ANNOTATION, "")
        return int(text) if text.isdigit() else None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gang_key(self) -> str:
        return f"{self.namespace}/{self.gang}"

    def job(self) -> Job:
        return Job(self.name, self.product, (Task(self.name, self.npu),), self.namespace)


def pod_request(pod: Obj) -> PodRequest:
    meta = pod.get("metadata") or {}
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    try:
        product = product_for_selector(
            {k: v for k, v in selector.items() if k == ACCELERATOR_TYPE_LABEL}
        )
    except ValueError as bad:
        raise BadPod(str(bad)) from None
    gang = (meta.get("labels") or {}).get(GANG_LABEL)
    size_text = (meta.get("annotations") or {}).get(GANG_SIZE_ANNOTATION, "1")
    if not size_text.isdigit() or int(size_text) < 1:
        raise BadPod(f"{GANG_SIZE_ANNOTATION} {size_text!r} is not a positive number")
    return PodRequest(
        meta.get("namespace", "default"),
        meta.get("name", ""),
        meta.get("uid", ""),
        npu_limit(pod),
        product.name,
        gang,
        int(size_text) if gang else 1,
        dict(meta.get("labels") or {}),
        dict(meta.get("annotations") or {}),
    )


@dataclass
class Reservation:
    placements: dict[int, Placement]  # rank → placement (ranks already running: none)
    expires: float
    notes: Mapping[int, Mapping[str, str]]  # extra annotations of each rank's pod
    shared: SharedSelection | None = None
    schema: str = tor.DISABLED
    bound: dict[str, str] = field(default_factory=dict)  # task → pod key
    ranks_on: dict[str, list[int]] = field(init=False)  # node → its placements' ranks

    def __post_init__(self) -> None:
        self.ranks_on = {}
        for r, p in self.placements.items():
            self.ranks_on.setdefault(p.node, []).append(r)

    def free_on(self, node: str, rank: int | None = None) -> int | None:
        """The rank of a placement on ``node`` still to bind (``rank``'s only, if given)."""
        return next(
            (
                r
                for r in self.ranks_on.get(node, ())
                if self.placements[r].task not in self.bound and rank in (None, r)
            ),
            None,
        )


class Extender:
    def __init__(
        self,
        gateway: KubeGateway,
        policy: Policy = DEFAULT_POLICY,
        clock: Callable[[], float] = time.time,
        *,
        gang_ttl: float = 60.0,
        hold_limit: float = 600.0,
        network: locality.Settings = DEFAULT_NETWORK,
        grace_over: float = rescheduling.GRACE_OVER_TIME,
    ) -> None:
        self._gateway = gateway
        self._policy = policy
        self._clock = clock
        self._gang_ttl = gang_ttl
        self._hold_limit = hold_limit
        self._settings = network
        self._grace_over = grace_over
        self._network = locality.Network()
        self._jobs_on: dict[str, set[str]] = {}  # server IP → cross-ToR jobs there
        self._faults: dict[str, tuple[FaultJob, float]] = {}  # job → fault, when seen
        self._down: frozenset[str] = frozenset()
        self._failed: Mapping[str, frozenset[int]] = {}
        self._lock = threading.Lock()
        self._session = Session((), policy)
        self._left_out: Mapping[str, str] = {}
        self._gangs = GangPods()
        self._assumed: dict[str, tuple[str, tuple[int, ...], float]] = {}
        self._reservations: dict[str, Reservation] = {}
        self._waiting: dict[str, float] = {}  # gang key → since when it waits
        self.binds = 0
        self.ready = False

    # ---- state -----------------------------------------------------------------------

    def refresh(
        self, snapshot: Snapshot, pods: Iterable[Obj] = (), topology: Topology | None = None
    ) -> None:
        """A new view of the cluster; chips bound since are held again until it shows them."""
        now = self._clock()
        session = Session(snapshot.nodes, self._policy)
        session.warm()  # here, off the request path
        gangs = _gang_pods(pods, snapshot.addresses)
        states = tor_share.states_from_pods(topology, gangs.on_tors) if topology else {}
        jobs_on: dict[str, set[str]] = {}
        for key, ip, notes, _ in gangs.on_tors:
            if notes.get(tor_share.SHARED_ANNOTATION) in ("1", "2"):
                jobs_on.setdefault(ip, set()).add(key)
        with self._lock:
            for key, (node, chips, since) in list(self._assumed.items()):
                if now - since > self._gang_ttl or not session.take(key, "pod", node, chips):
                    del self._assumed[key]  # the published state shows it now (or never will)
            for gang, reservation in list(self._reservations.items()):
                if now > reservation.expires:
                    log.warning(
                        "gang %s: reservation expired with %d of %d bound",
                        gang,
                        len(reservation.bound),
                        len(reservation.placements),
                    )
                    del self._reservations[gang]
                    continue
                for p in reservation.placements.values():
                    if p.task not in reservation.bound:
                        session.take(gang, p.task, p.node, p.chips)
                if reservation.shared is not None and topology is not None:
                    states = self._with_shared(states, gang, reservation)
                    for p in reservation.placements.values():
                        if address := snapshot.addresses.get(p.node):
                            jobs_on.setdefault(address, set()).add(gang)
            network = locality.Network(topology, snapshot.addresses, snapshot.super_pods, states)
            self._network = dataclasses.replace(
                network, multi_job_tors=self._multi_job_tors(network, gangs.on_tors)
            )
            self._jobs_on = jobs_on
            self._failed = snapshot.failed
            self._down = snapshot.down | {
                p.node
                for _, members in gangs.running.values()
                for p in members
                if p.node not in snapshot.failed and p.node not in snapshot.left_out
            }
            self._session = session
            self._left_out = snapshot.left_out
            self._gangs = gangs
            self._waiting = {g: since for g, since in self._waiting.items() if g in gangs.pending}
            self.ready = True

    # ---- kube-scheduler verbs ----------------------------------------------------------

    def _with_shared(
        self, states: Mapping[int, tor_share.TorState], gang: str, reservation: Reservation
    ) -> dict[int, tor_share.TorState]:
        """The ToR states once the reservation runs (changed by switch affinity 2.0 only)."""
        if reservation.shared is None:
            return dict(states)
        return tor_share.apply(
            states, reservation.shared, gang, reservation.schema, self._settings.shared_tor_num
        )

    def _multi_job_tors(
        self, network: locality.Network, on_tors: list[tuple[str, str, Mapping[str, str], bool]]
    ) -> frozenset[int]:
        """ToRs under a gang (bound or reserved) that spans more than one ToR."""
        nodes_of = {
            g: [p.node for p in r.placements.values()] for g, r in self._reservations.items()
        }
        node_of_ip = {ip: n for n, ip in network.addresses.items()}
        for key, ip, _, _ in on_tors:
            nodes_of.setdefault(key, []).append(node_of_ip.get(ip, ""))
        spans = [network.tors_of(nodes) for nodes in nodes_of.values()]
        return frozenset(t for span in spans if len(span) > 1 for t in span)

    def _fault_holds(self) -> dict[str, str]:
        """Healthy nodes of restarting fault jobs (node → job), within the hold limit."""
        now = self._clock()
        return {
            node: job
            for job, (fault, seen) in self._faults.items()
            if now - seen <= self._hold_limit
            for node in fault.previous.values()
            if node not in fault.nodes
        }

    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        pod, names = args.get("Pod") or {}, list(args.get("NodeNames") or [])
        try:
            request = pod_request(pod)
        except BadPod as bad:
            return {"NodeNames": [], "FailedNodes": dict.fromkeys(names, str(bad)), "Error": ""}
        with self._lock:
            if request.gang:
                passing, failed = self._filter_gang(request, names)
            else:
                passing, failed = self._filter_one(request, names)
        return {"NodeNames": passing, "FailedNodes": failed, "Error": ""}

    def _unknown(self, name: str) -> str:
        return self._left_out.get(name, f"{name} is not an Ascend NPU node")

    def _filter_one(
        self, request: PodRequest, names: list[str]
    ) -> tuple[list[str], dict[str, str]]:
        job = request.job()
        try:
            validate_job(job)
        except JobInvalid as invalid:
            return [], dict.fromkeys(names, str(invalid))
        held = self._held_for_gangs() if self._waiting or self._faults else {}
        passing, failed = [], {}
        statuses = self._session.filter(job, request.npu, names)
        for name in names:
            status = statuses.get(name)
            if status is None:
                failed[name] = self._unknown(name)
            elif not status.ok:
                failed[name] = status.reason
            elif name in held:
                failed[name] = held[name]
            else:
                passing.append(name)
        return passing, failed

    def _held_for_gangs(self) -> dict[str, str]:
        """Nodes kept from one-pod jobs: a fault job's healthy nodes until it comes back, and
        whole free nodes for waiting gangs, oldest first, within the hold limit."""
        now = self._clock()
        whole = sorted(
            n
            for n, node in self._session.nodes.items()
            if len(self._session.usable(n)) == node.allocatable == _capacity(node.product)
        )
        held = {
            node: f"held for fault job {job} to come back"
            for node, job in self._fault_holds().items()
        }
        for gang, since in sorted(self._waiting.items(), key=lambda item: item[1]):
            if now - since > self._hold_limit:
                continue
            size = len(self._gangs.pending.get(gang, [])) or 1
            free = [n for n in whole if n not in held]
            for name in free[:size]:
                held[name] = f"held for gang {gang}, waiting since {int(now - since)} s"
        return held

    def _filter_gang(
        self, request: PodRequest, names: list[str]
    ) -> tuple[list[str], dict[str, str]]:
        reservation = self._reservations.get(request.gang_key) or self._reserve(request)
        if isinstance(reservation, str):
            return [], dict.fromkeys(names, reservation)
        rank = request.rank
        passing = [n for n in names if reservation.free_on(n, rank) is not None]
        which = f"rank {rank} of gang" if rank is not None else "gang"
        failed = {
            n: f"not reserved for {which} {request.gang_key}" for n in names if n not in passing
        }
        return passing, failed

    def _reserve(self, request: PodRequest) -> Reservation | str:
        fault = self._faults.get(request.gang_key)
        # Ranks still running stay (a reservation that expired half bound, a restart).
        running = {} if fault else self._gangs.ranks.get(request.gang_key, {})
        present = len(self._gangs.pending.get(request.gang_key, [])) + len(running)
        if present < request.gang_size:
            self._waiting.setdefault(request.gang_key, self._clock())
            return (
                f"gang {request.gang_key}: {present} of {request.gang_size} pods exist; "
                "waiting for the rest"
            )
        missing = [r for r in range(request.gang_size) if r not in running]
        tasks = tuple(Task(f"{request.gang}-{r}", request.npu) for r in missing)
        job = Job(request.gang_key, request.product, tasks)
        held = {n for n, job in self._fault_holds().items() if job != request.gang_key}
        candidates = [
            n
            for n, status in self._session.filter(job, request.npu).items()
            if status.ok and n not in held
        ]
        scores = self._session.score(job, request.npu, candidates)
        candidates.sort(key=lambda n: (-scores.get(n, 0.0), n))
        ask = locality.Ask(
            request.gang_key,
            len(missing),
            _capacity(request.product),
            request.labels,
            request.annotations,
        )
        try:
            choice = locality.choose(
                ask,
                candidates,
                self._network,
                self._settings,
                previous=fault[0].previous if fault else None,
                fault_nodes=frozenset(fault[0].nodes) if fault else frozenset(),
                running=running.values(),
            )
            decision = self._session.place_at(job, choice.nodes)
            if not decision.feasible:
                raise locality.Unplaceable(decision.reason)
        except (TorInvalid, SuperPodInvalid) as invalid:
            return str(invalid)
        except locality.Unplaceable as why:
            self._waiting.setdefault(request.gang_key, self._clock())
            return f"gang {request.gang_key} does not fit yet: {why}"
        self._waiting.pop(request.gang_key, None)
        self._faults.pop(request.gang_key, None)
        schema = request.labels.get(tor.AFFINITY_LABEL, tor.DISABLED)
        reservation = Reservation(
            dict(zip(missing, decision.placements, strict=True)),
            self._clock() + self._gang_ttl,
            dict(zip(missing, choice.notes, strict=True)),
            choice.shared,
            schema,
        )
        states = self._with_shared(self._network.tor_states, request.gang_key, reservation)
        self._network = dataclasses.replace(self._network, tor_states=states)
        self._reservations[request.gang_key] = reservation
        log.info(
            "gang %s reserved %s (%s)",
            request.gang_key,
            {r: p.node for r, p in reservation.placements.items()},
            choice.how,
        )
        return reservation

    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        pod, names = args.get("Pod") or {}, list(args.get("NodeNames") or [])
        try:
            request = pod_request(pod)
        except BadPod:
            return [{"Host": n, "Score": 0} for n in names]
        with self._lock:
            if request.gang:
                scores = self._gang_scores(request, names)
                return [{"Host": n, "Score": MAX_SCORE if n in scores else 0} for n in names]
            scores = self._session.score(request.job(), request.npu, names)
        return normalize({n: scores.get(n) for n in names})

    def _gang_scores(self, request: PodRequest, names: list[str]) -> dict[str, float]:
        """The gang's reserved nodes for this pod: the exact-rank node scores 200 as in
        upstream's ToR affinity, any free reserved node 10 for a pod without a rank."""
        reservation = self._reservations.get(request.gang_key)
        if reservation is None:
            return {}
        rank = request.rank
        score = tor.RANK_SCORE if rank is not None else float(MAX_SCORE)
        return {n: score for n in names if reservation.free_on(n, rank) is not None}

    def scores(self, pod: Obj, names: list[str]) -> dict[str, float]:
        """The policy's raw scores of the nodes that can host the pod (Volcano sums them)."""
        request = pod_request(pod)
        with self._lock:
            if request.gang:
                return self._gang_scores(request, names)
            scores = self._session.score(request.job(), request.npu, names)
        return scores

    def annotate(self, pod: Obj, node: str) -> str:
        """Volcano's allocateFunc: choose the chips on ``node`` and write the scheduler
        annotations on the pod (Volcano binds it afterwards). Returns an error or ""."""
        request = pod_request(pod)
        with self._lock:
            chips, undo, notes = self._choose(request, node)
            if chips is None:
                return f"allocate {request.key} on {node}: {undo}"
            annotations = {
                CHIPS_ANNOTATION: ",".join(f"Ascend910-{c}" for c in chips),
                PREDICATE_TIME: str(time.time_ns()),
                **notes,
            }
            try:
                self._gateway.patch_pod_annotations(
                    request.namespace, request.name, annotations, ""
                )
            except KubeError as failed:
                self._undo(request, undo)
                return f"allocate {request.key} on {node}: {failed}"
            self._assumed[request.key] = (node, chips, self._clock())
        return ""

    def release(self, pod: Obj) -> None:
        """Volcano's deallocateFunc: the task leaves the session; its chips come back."""
        request = pod_request(pod)
        with self._lock:
            self._assumed.pop(request.key, None)
            self._session.release_job(request.job().key)
            for reservation in self._reservations.values():
                for task, key in list(reservation.bound.items()):
                    if key == request.key:
                        del reservation.bound[task]

    # ---- fault rescheduling --------------------------------------------------------

    def fault_deletions(self) -> list[Deletion]:
        """Find fault jobs in the last view and say which pods to delete so they restart.
        A fault job's healthy nodes stay held for it until it is placed again."""
        now = self._clock()
        with self._lock:
            for fault in rescheduling.find_faults(self._gangs.running, self._failed, self._down):
                known = self._faults.get(fault.job)
                if known is not None and not any(p.uid for p in known[0].pods):
                    self._faults[fault.job] = (fault, known[1])  # restored: now with its pods
                elif known is None:
                    log.warning(
                        "fault job %s (%s): nodes %s, fault ranks %s",
                        fault.job,
                        fault.mode,
                        list(fault.nodes),
                        list(fault.rank_ids),
                    )
                    self._faults[fault.job] = (fault, now)
            for job, (_, seen) in list(self._faults.items()):
                gone = job not in self._gangs.pending and job not in self._gangs.running
                if gone and now - seen > self._hold_limit:
                    log.warning("fault job %s did not come back; its nodes are free again", job)
                    del self._faults[job]
            deletions = []
            for fault, seen in self._faults.values():
                _, members = self._gangs.running.get(fault.job, ("", []))
                still = {p.uid: p for p in members}  # the UIDs of the run that failed
                current = dataclasses.replace(
                    fault, pods=tuple(still[p.uid] for p in fault.pods if p.uid in still)
                )
                deletions += rescheduling.deletions(current, seen, now, self._grace_over)
            return deletions

    def restore_faults(self, faults: Iterable[tuple[FaultJob, float]]) -> None:
        """FaultJob jobs recorded before this scheduler restarted (``vcjob-fault-npu-cm``)."""
        with self._lock:
            for fault, seen in faults:
                self._faults.setdefault(fault.job, (fault, seen))

    def fault_records(self) -> tuple[dict[str, str], dict[tuple[str, str], dict[str, str]]]:
        """``vcjob-fault-npu-cm`` data and each fault job's ``fault-config-<job>``."""
        with self._lock:
            faults = list(self._faults.values())
        configs = {}
        for fault, seen in faults:
            namespace, name = fault.job.split("/", 1)
            configs[(namespace, rescheduling.FAULT_CONFIG_PREFIX + name)] = (
                rescheduling.fault_config(fault, seen)
            )
        return rescheduling.record(faults), configs

    def tor_share_data(self) -> dict[str, str] | None:
        """``tor-share-cm`` content under switch affinity 2.0 (None otherwise)."""
        with self._lock:
            network, jobs_on = self._network, self._jobs_on
        if self._settings.nslb_version != "2.0" or network.topology is None:
            return None
        node_of_ip = {ip: n for n, ip in network.addresses.items()}
        return tor_share.encode(network.topology, network.tor_states, jobs_on, node_of_ip)

    def free_chips(self) -> int:
        with self._lock:
            return sum(len(self._session.usable(n)) for n in self._session.nodes)

    def bind(self, args: Mapping[str, Any]) -> dict[str, str]:
        namespace, name = args.get("PodNamespace", ""), args.get("PodName", "")
        node, uid = args.get("Node", ""), args.get("PodUID", "")
        try:
            request = pod_request(self._gateway.get_pod(namespace, name))
        except (KubeError, BadPod) as failed:
            return {"Error": f"bind {namespace}/{name}: {failed}"}
        with self._lock:
            chips, undo, notes = self._choose(request, node)
            if chips is None:
                return {"Error": f"bind {request.key} to {node}: {undo}"}
            annotations = {
                CHIPS_ANNOTATION: ",".join(f"Ascend910-{c}" for c in chips),
                PREDICATE_TIME: str(time.time_ns()),
                **notes,
            }
            try:
                self._gateway.bind_pod(namespace, name, uid, node, annotations)
            except KubeError as failed:
                self._undo(request, undo)
                return {"Error": f"bind {request.key} to {node}: {failed}"}
            self._assumed[request.key] = (node, chips, self._clock())
            self.binds += 1
        log.info(
            "bound %s to %s chips %s",
            request.key,
            node,
            annotations[CHIPS_ANNOTATION],
            extra={"pod": request.key, "node": node, "chips": annotations[CHIPS_ANNOTATION]},
        )
        return {"Error": ""}

    def _choose(
        self, request: PodRequest, node: str
    ) -> tuple[tuple[int, ...] | None, str, dict[str, str]]:
        """The chips for this pod on ``node`` (taken), what undoing that means, and the
        pod's annotations beyond the chips (a gang member's rank and network notes)."""
        if request.gang:
            reservation = self._reservations.get(request.gang_key)
            rank = reservation.free_on(node, request.rank) if reservation else None
            if reservation is None or rank is None:
                return None, f"no reservation of gang {request.gang_key} on {node}", {}
            placement = reservation.placements[rank]
            reservation.bound[placement.task] = request.key
            if len(reservation.bound) == len(reservation.placements):
                del self._reservations[request.gang_key]  # complete: the pods hold it now
            notes = {RANK_INDEX_ANNOTATION: str(rank), **reservation.notes[rank]}
            return placement.chips, f"gang:{placement.task}", notes
        decision = self._session.place_on(request.job(), node)
        if not decision.feasible:
            return None, decision.reason, {}
        return decision.placements[0].chips, "pod", {}

    def _undo(self, request: PodRequest, undo: str) -> None:
        if undo == "pod":
            self._session.release_job(request.job().key)
        elif undo.startswith("gang:") and (reservation := self._reservations.get(request.gang_key)):
            reservation.bound.pop(undo[len("gang:") :], None)


@dataclass
class GangPods:
    """The live pods of gangs, as one read of the cluster shows them."""

    pending: dict[str, list[str]] = field(default_factory=dict)  # gang → unbound pod names
    # gang → (fault-scheduling mode, bound pods whose AscendReal names their chips)
    running: dict[str, tuple[str, list[rescheduling.JobPod]]] = field(default_factory=dict)
    ranks: dict[str, dict[int, str]] = field(default_factory=dict)  # gang → bound rank → node
    # (gang, node IP, annotations, large-model) of each bound pod, for the ToR states
    on_tors: list[tuple[str, str, Mapping[str, str], bool]] = field(default_factory=list)


def _gang_pods(pods: Iterable[Obj], addresses: Mapping[str, str]) -> GangPods:
    found = GangPods()
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        gang = labels.get(GANG_LABEL)
        if not gang or not live(pod):
            continue
        key = f"{meta.get('namespace')}/{gang}"
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            found.pending.setdefault(key, []).append(meta.get("name", ""))
            continue
        annotations = meta.get("annotations") or {}
        rank = annotations.get(RANK_INDEX_ANNOTATION, "")
        if rank.isdigit():
            found.ranks.setdefault(key, {})[int(rank)] = node
        mode = labels.get(rescheduling.FAULT_LABEL, "off")
        members = found.running.setdefault(key, (mode, []))[1]
        if (member := rescheduling.job_pod(pod, len(members))) is not None:
            members.append(member)
        if ip := addresses.get(node):
            large = labels.get(tor.AFFINITY_LABEL) == tor.LARGE_MODEL
            found.on_tors.append((key, ip, annotations, large))
    return found


def _capacity(product: str) -> int:
    return product_by_name(product).capacity


def normalize(scores: Mapping[str, float | None]) -> list[dict[str, Any]]:
    """Map policy scores onto the extender range 0..10 (nodes that cannot host the pod: 0)."""
    known = [s for s in scores.values() if s is not None]
    low, high = (min(known), max(known)) if known else (0.0, 0.0)
    result = []
    for name, score in scores.items():
        if score is None:
            value = 0
        elif high == low:
            value = MAX_SCORE
        else:
            value = round(MAX_SCORE * (score - low) / (high - low))
        result.append({"Host": name, "Score": value})
    return result
