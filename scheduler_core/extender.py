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

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler_core.annotations import CHIPS_ANNOTATION, PREDICATE_TIME
from scheduler_core.cluster_state import Snapshot
from scheduler_core.engine import Session
from scheduler_core.kube.port import KubeError, KubeGateway, Obj, npu_limit
from scheduler_core.model import Job, Placement, Task
from scheduler_core.policies import DEFAULT_POLICY, Policy
from scheduler_core.products import ACCELERATOR_TYPE_LABEL, product_by_name, product_for_selector
from scheduler_core.validation import JobInvalid, validate_job

log = logging.getLogger(__name__)

GANG_LABEL = "ascend.npu/gang"
GANG_SIZE_ANNOTATION = "ascend.npu/gang-size"
MAX_SCORE = 10


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
    )


@dataclass
class Reservation:
    placements: list[Placement]
    expires: float
    bound: dict[str, str] = field(default_factory=dict)  # task → pod key

    def free_on(self, node: str) -> Placement | None:
        return next(
            (p for p in self.placements if p.node == node and p.task not in self.bound), None
        )


class Extender:
    def __init__(
        self,
        gateway: KubeGateway,
        policy: Policy = DEFAULT_POLICY,
        clock: Callable[[], float] = time.time,
        gang_ttl: float = 60.0,
        hold_limit: float = 600.0,
    ) -> None:
        self._gateway = gateway
        self._policy = policy
        self._clock = clock
        self._gang_ttl = gang_ttl
        self._hold_limit = hold_limit
        self._lock = threading.Lock()
        self._session = Session((), policy)
        self._left_out: Mapping[str, str] = {}
        self._pending: dict[str, list[str]] = {}  # gang key → its unbound pods
        self._assumed: dict[str, tuple[str, tuple[int, ...], float]] = {}
        self._reservations: dict[str, Reservation] = {}
        self._waiting: dict[str, float] = {}  # gang key → since when it waits
        self.binds = 0
        self.ready = False

    # ---- state -----------------------------------------------------------------------

    def refresh(self, snapshot: Snapshot, pods: Iterable[Obj] = ()) -> None:
        """A new view of the cluster; chips bound since are held again until it shows them."""
        now = self._clock()
        session = Session(snapshot.nodes, self._policy)
        session.warm()  # here, off the request path
        pending: dict[str, list[str]] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            gang = (meta.get("labels") or {}).get(GANG_LABEL)
            if gang and not (pod.get("spec") or {}).get("nodeName"):
                pending.setdefault(f"{meta.get('namespace')}/{gang}", []).append(
                    meta.get("name", "")
                )
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
                for p in reservation.placements:
                    if p.task not in reservation.bound:
                        session.take(gang, p.task, p.node, p.chips)
            self._session = session
            self._left_out = snapshot.left_out
            self._pending = pending
            self._waiting = {g: since for g, since in self._waiting.items() if g in pending}
            self.ready = True

    # ---- kube-scheduler verbs ----------------------------------------------------------

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
        held = self._held_for_gangs() if self._waiting else {}
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
        """Whole free nodes kept for waiting gangs, oldest first, within the hold limit."""
        now = self._clock()
        whole = sorted(
            n
            for n, node in self._session.nodes.items()
            if len(self._session.usable(n)) == node.allocatable == _capacity(node.product)
        )
        held: dict[str, str] = {}
        for gang, since in sorted(self._waiting.items(), key=lambda item: item[1]):
            if now - since > self._hold_limit:
                continue
            size = len(self._pending.get(gang, [])) or 1
            for name in whole[len(held) : len(held) + size]:
                held[name] = f"held for gang {gang}, waiting since {int(now - since)} s"
        return held

    def _filter_gang(
        self, request: PodRequest, names: list[str]
    ) -> tuple[list[str], dict[str, str]]:
        reservation = self._reservations.get(request.gang_key) or self._reserve(request)
        if isinstance(reservation, str):
            return [], dict.fromkeys(names, reservation)
        passing = [n for n in names if reservation.free_on(n) is not None]
        failed = {n: f"not reserved for gang {request.gang_key}" for n in names if n not in passing}
        return passing, failed

    def _reserve(self, request: PodRequest) -> Reservation | str:
        present = len(self._pending.get(request.gang_key, []))
        if present < request.gang_size:
            self._waiting.setdefault(request.gang_key, self._clock())
            return (
                f"gang {request.gang_key}: {present} of {request.gang_size} pods exist; "
                "waiting for the rest"
            )
        tasks = tuple(Task(f"{request.gang}-{i}", request.npu) for i in range(request.gang_size))
        decision = self._session.place(Job(request.gang_key, request.product, tasks))
        if not decision.feasible:
            self._waiting.setdefault(request.gang_key, self._clock())
            return f"gang {request.gang_key} does not fit yet: {decision.reason}"
        self._waiting.pop(request.gang_key, None)
        reservation = Reservation(list(decision.placements), self._clock() + self._gang_ttl)
        self._reservations[request.gang_key] = reservation
        log.info("gang %s reserved %s", request.gang_key, [p.node for p in decision.placements])
        return reservation

    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        pod, names = args.get("Pod") or {}, list(args.get("NodeNames") or [])
        try:
            request = pod_request(pod)
        except BadPod:
            return [{"Host": n, "Score": 0} for n in names]
        with self._lock:
            if request.gang:
                reservation = self._reservations.get(request.gang_key)
                return [
                    {"Host": n, "Score": MAX_SCORE if reservation and reservation.free_on(n) else 0}
                    for n in names
                ]
            scores = self._session.score(request.job(), request.npu, names)
        return normalize({n: scores.get(n) for n in names})

    def scores(self, pod: Obj, names: list[str]) -> dict[str, float]:
        """The policy's raw scores of the nodes that can host the pod (Volcano sums them)."""
        request = pod_request(pod)
        with self._lock:
            if request.gang:
                reservation = self._reservations.get(request.gang_key)
                return {
                    n: float(MAX_SCORE) for n in names if reservation and reservation.free_on(n)
                }
            scores = self._session.score(request.job(), request.npu, names)
        return scores

    def annotate(self, pod: Obj, node: str) -> str:
        """Volcano's allocateFunc: choose the chips on ``node`` and write the scheduler
        annotations on the pod (Volcano binds it afterwards). Returns an error or ""."""
        request = pod_request(pod)
        with self._lock:
            chips, undo = self._choose(request, node)
            if chips is None:
                return f"allocate {request.key} on {node}: {undo}"
            annotations = {
                CHIPS_ANNOTATION: ",".join(f"Ascend910-{c}" for c in chips),
                PREDICATE_TIME: str(time.time_ns()),
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
            chips, undo = self._choose(request, node)
            if chips is None:
                return {"Error": f"bind {request.key} to {node}: {undo}"}
            annotations = {
                CHIPS_ANNOTATION: ",".join(f"Ascend910-{c}" for c in chips),
                PREDICATE_TIME: str(time.time_ns()),
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

    def _choose(self, request: PodRequest, node: str) -> tuple[tuple[int, ...] | None, str]:
        """The chips for this pod on ``node`` (taken), and what undoing that means."""
        if request.gang:
            reservation = self._reservations.get(request.gang_key)
            placement = reservation.free_on(node) if reservation else None
            if reservation is None or placement is None:
                return None, f"no reservation of gang {request.gang_key} on {node}"
            reservation.bound[placement.task] = request.key
            if len(reservation.bound) == len(reservation.placements):
                del self._reservations[request.gang_key]  # complete: the pods hold it now
            return placement.chips, f"gang:{placement.task}"
        decision = self._session.place_on(request.job(), node)
        if not decision.feasible:
            return None, decision.reason
        return decision.placements[0].chips, "pod"

    def _undo(self, request: PodRequest, undo: str) -> None:
        if undo == "pod":
            self._session.release_job(request.job().key)
        elif undo.startswith("gang:") and (reservation := self._reservations.get(request.gang_key)):
            reservation.bound.pop(undo[len("gang:") :], None)


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
