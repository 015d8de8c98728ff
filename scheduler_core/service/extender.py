"""The extender: filter, prioritize and bind NPU pods with the engine, for kube-scheduler
(and through ``volcano`` for Volcano).

kube-scheduler asks one pod at a time (filter over candidate nodes, prioritize, bind), while
binds run asynchronously; one lock and the session ledger keep two pods off the same chips
even before the agents' ConfigMaps catch up. A bind has three phases: choose the chips under
the lock (they are assumed taken from then on), write the pod outside it (the Binding with
the chips' annotation (``huawei.com/Ascend910``, ``huawei.com/Ascend310P``, or the vNPU's
``huawei.com/npu-core``) and ``predicate-time``, so they reach the pod atomically with its
node; or Volcano's annotations), then commit, or give the chips back, under the lock. A pod
of a pre-created vNPU type gets no annotation: the kubelet picks its vNPU.

Its parts: ``extender_state`` (what the watches report, the ledger and the fault restarts),
``wire`` (the JSON), ``assumed`` (binds the view does not show yet), ``gangs`` (reservations
and hold-back), ``fault_restarts``, ``tor_state``, ``vnpu_nodes`` (dynamic vNPU).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contract.annotations import PREDICATE_TIME
from contract.chip_names import KIND_OF_RESOURCE, format_chip_list
from contract.objects import Obj
from contract.pods import pod_view
from contract.vnpu import NPU_CORE_ANNOTATION, NPU_CORE_RESOURCE
from infra.events import ObjectRef, pod_ref
from infra.kube.port import KubeError, NotFound
from scheduler_core.engine import tor
from scheduler_core.engine.model import Placement
from scheduler_core.engine.validation import JobInvalid, validate_job
from scheduler_core.engine.vnpu import VnpuInvalid, validate_static
from scheduler_core.service.assumed import Assumed
from scheduler_core.service.extender_state import ExtenderState
from scheduler_core.service.gangs import (
    NotReserved,
    RankTaken,
    Reservation,
)
from scheduler_core.service.wire import (
    MAX_SCORE,
    BadPod,
    Candidates,
    ExtenderArgs,
    PodRequest,
    binding_args,
    extender_args,
    normalize,
    pod_request,
)

log = logging.getLogger(__name__)

# A filter's verdicts: the passing nodes, those that fail now, those that never can.
Verdicts = tuple[list[str], dict[str, str], dict[str, str]]

GANG_WAITING, BIND_REFUSED = "NPUGangWaiting", "NPUBindRefused"


def _about(request: PodRequest) -> ObjectRef:
    """The pod an Event is about."""
    return pod_ref(request.namespace, request.name, request.uid)


@dataclass(frozen=True, slots=True)
class PodTaken:
    """A one-pod job's chips, taken in the session for a bind."""

    placement: Placement


@dataclass(frozen=True, slots=True)
class VnpuTaken:
    """A dynamic vNPU (or whole chips) counted as given on its node (``VnpuNodes``)."""


@dataclass(frozen=True, slots=True)
class Chosen:
    """The chips of one bind, held until it is committed or given back (``taken`` None:
    a pre-created vNPU, which the kubelet picks)."""

    request: PodRequest
    node: str
    choice: Mapping[str, str]  # the chips' annotation: huawei.com/Ascend910 or npu-core
    taken: PodTaken | RankTaken | VnpuTaken | None
    notes: Mapping[str, str]  # annotations beyond the chips (a gang member's rank, network)

    def annotations(self, predicate_time: int) -> dict[str, str]:
        if self.taken is None:
            return {}
        return {**self.choice, PREDICATE_TIME: str(predicate_time), **self.notes}


class Extender(ExtenderState):
    # ---- kube-scheduler verbs ----------------------------------------------------------

    def filter(self, args: Mapping[str, Any] | ExtenderArgs) -> dict[str, Any]:
        """kube-scheduler's filter: the passing nodes, and why each other one fails:
        ``FailedAndUnresolvableNodes`` for a node that can never host the pod (another chip
        kind or accelerator type, not an NPU node, a request no node can serve), so that
        preemption evicts nothing there; ``FailedNodes`` for one that may once it frees
        chips. A pod asking no NPU passes everywhere (without ``managedResources``,
        kube-scheduler and Volcano send every pod)."""
        pod, candidates = extender_args(args)
        names = candidates.names
        try:
            request = pod_request(pod)
        except BadPod as bad:
            return _answer(candidates, [], {}, dict.fromkeys(names, str(bad)))
        if request.npu == 0:
            return _answer(candidates, list(names), {}, {})
        with self._lock:
            if request.dynamic:
                verdicts = self._filter_vnpu(request, names)
            elif request.static:
                verdicts = _filter_static(request, names)
            elif request.gang:
                verdicts = self._filter_gang(request, names)
            else:
                verdicts = self._filter_one(request, names)
        return _answer(candidates, *verdicts)

    def _filter_vnpu(self, request: PodRequest, names: list[str]) -> Verdicts:
        try:
            verdicts = self._vnpu.verdicts(request.vnpu_task(), names)
        except VnpuInvalid as invalid:
            return [], {}, dict.fromkeys(names, str(invalid))
        passing, failed, never = [], {}, {}
        for name in names:
            verdict = verdicts.get(name)
            if verdict is None:
                left_out = self._left_out.get(name)
                if left_out is None:
                    never[name] = f"{name} is not a dynamic vNPU node"
                else:  # left out for now (its DeviceInfo or labels): it may come back
                    failed[name] = left_out
            elif verdict.resource is None:
                failed[name] = verdict.reason
            else:
                passing.append(name)
        return passing, failed, never

    def _filter_one(self, request: PodRequest, names: list[str]) -> Verdicts:
        job = request.job()
        try:
            validate_job(job)
        except JobInvalid as invalid:
            return [], {}, dict.fromkeys(names, str(invalid))
        now = self._clock()
        held = self._gangs.held_nodes(
            self._session, self._pods.pending, self._faults.holds(now), now
        )
        passing, refused, unknown = self._session.split(job, request.npu, names)
        failed: dict[str, str] = {}
        never: dict[str, str] = {}
        for name, status in refused.items():
            (never if status.unresolvable else failed)[name] = status.reason
        for name in unknown:
            left_out = self._left_out.get(name)
            if left_out is None or name in self._vnpu:  # not one of this pod's nodes
                never[name] = self._not_offered(name, request)
            else:  # an NPU node left out for now (stale, not stable): it may come back
                failed[name] = left_out
        if held:  # a few nodes kept for a waiting gang or a fault job
            failed.update((n, held[n]) for n in passing if n in held)
            passing = [n for n in passing if n not in held]
        return passing, failed, never

    def _not_offered(self, name: str, request: PodRequest) -> str:
        """Why a node the session does not offer is no place for a pod of chips."""
        if name in self._vnpu:
            return f"{name} offers {NPU_CORE_RESOURCE} (dynamic vNPU), not {request.resource}"
        return self._left_out.get(name, f"{name} is not an Ascend NPU node")

    def _filter_gang(self, request: PodRequest, names: list[str]) -> Verdicts:
        reservation = self._gangs.reservations.get(request.gang_key) or self._reserve(request)
        if isinstance(reservation, NotReserved):
            self.events.normal(_about(request), GANG_WAITING, reservation.reason)
            return [], dict.fromkeys(names, reservation.reason), {}
        rank = request.rank
        reserved = reservation.ranks_on  # a few nodes of thousands: look only at those
        passing = [n for n in names if n in reserved and reservation.free_on(n, rank) is not None]
        which = f"rank {rank} of gang" if rank is not None else "gang"
        chosen = set(passing)
        failed = dict.fromkeys(
            (n for n in names if n not in chosen), f"not reserved for {which} {request.gang_key}"
        )
        return passing, failed, {}

    def _reserve(self, request: PodRequest) -> Reservation | NotReserved:
        now = self._clock()
        fault = self._faults.get(request.gang_key)
        held = {n for n, job in self._faults.holds(now).items() if job != request.gang_key}
        reservation = self._gangs.reserve(
            request,
            session=self._session,
            network=self._network(),
            settings=self._tors.settings,
            pods=self._pods,
            fault=fault,
            held=held,
            now=now,
        )
        if isinstance(reservation, Reservation):
            self._faults.placed(request.gang_key)
            self._tors.reserved(request.gang_key, reservation)
        return reservation

    def prioritize(self, args: Mapping[str, Any] | ExtenderArgs) -> list[dict[str, Any]]:
        pod, candidates = extender_args(args)
        names = candidates.names
        try:
            request = pod_request(pod)
        except BadPod:
            return [{"Host": n, "Score": 0} for n in names]
        if request.npu == 0:
            return [{"Host": n, "Score": 0} for n in names]
        with self._lock:
            if request.gang:
                scores = self._gang_scores(request, names)
                return [{"Host": n, "Score": MAX_SCORE if n in scores else 0} for n in names]
            scores = self._one_pod_scores(request, names)
        return normalize(scores, names)

    def _one_pod_scores(self, request: PodRequest, names: list[str]) -> dict[str, float]:
        if request.dynamic:
            return self._vnpu.scores(request.vnpu_task(), names)
        if request.static:
            return {}  # no preference: the kubelet picks the vNPU
        return self._session.score(request.job(), request.npu, names)

    def _gang_scores(self, request: PodRequest, names: list[str]) -> dict[str, float]:
        """The gang's reserved nodes for this pod: the exact-rank node scores 200 as in
        upstream's ToR affinity, any free reserved node 10 for a pod without a rank."""
        reservation = self._gangs.reservations.get(request.gang_key)
        if reservation is None:
            return {}
        rank = request.rank
        score = tor.RANK_SCORE if rank is not None else float(MAX_SCORE)
        return {n: score for n in names if reservation.free_on(n, rank) is not None}

    def _shared_tor_scores(self, request: PodRequest, names: list[str]) -> dict[str, float]:
        """Under switch affinity 2.0, upstream's scores of a ranked gang member: 100 (99 on a
        shared ToR) along the job's servers up to its rank's, which scores 200."""
        reservation = self._gangs.reservations.get(request.gang_key)
        rank = request.rank
        if reservation is None or reservation.shared is None or rank not in reservation.placements:
            return self._gang_scores(request, names)
        by_ip = reservation.shared.scores(sorted(reservation.placements).index(rank))
        return {n: by_ip[a] for n in names if (a := self._addresses.get(n, "")) in by_ip}

    def scores(self, pod: Obj, names: list[str]) -> dict[str, float]:
        """The policy's raw scores of the nodes that can host the pod (Volcano sums them)."""
        request = pod_request(pod)
        if request.npu == 0:
            return {}
        with self._lock:
            if request.gang:
                return self._shared_tor_scores(request, names)
            return self._one_pod_scores(request, names)

    def bind(self, args: Mapping[str, Any]) -> dict[str, str]:
        namespace, name, uid, node = binding_args(args)
        try:
            request = pod_request(self._gateway.get_pod(namespace, name))
        except (KubeError, BadPod) as failed:
            return {"Error": f"bind {namespace}/{name}: {failed}"}

        def write(annotations: dict[str, str]) -> None:
            self._gateway.bind_pod(namespace, name, uid, node, annotations)

        if request.npu == 0:  # a pod kube-scheduler sent us that asks no NPU: just bound
            if not self.fence():
                return {"Error": f"bind {request.key}: this replica no longer leads"}
            try:
                write({})
            except KubeError as failed:
                return {"Error": f"bind {request.key} to {node}: {failed}"}
            return {"Error": ""}
        return {"Error": self._give(request, node, write, ("bind", "bound", "to"))}

    def annotate(self, pod: Obj, node: str) -> str:
        """Volcano's allocateFunc: choose the chips on ``node`` and write the scheduler
        annotations on the pod (Volcano binds it afterwards). Returns an error or "".

        The pod is read from the API server, not taken from the request: only the pod the
        cluster has (same UID), with the NPUs it really requests, is given chips."""
        claimed = pod_request(pod)
        try:
            request = pod_request(self._gateway.get_pod(claimed.namespace, claimed.name))
        except KubeError as failed:
            return f"allocate {claimed.key} on {node}: {failed}"
        if request.uid != claimed.uid:
            return f"allocate {claimed.key} on {node}: the cluster's pod has another UID"
        if request.npu == 0:
            return f"allocate {claimed.key} on {node}: the pod requests no {claimed.resource}"

        def write(annotations: dict[str, str]) -> None:
            if annotations:  # a pre-created vNPU's pod gets none
                self._gateway.patch_pod_annotations(
                    request.namespace, request.name, dict(annotations), ""
                )
                with self._lock:
                    self._annotated[request.key] = (request.uid, tuple(annotations))

        return self._give(request, node, write, ("allocate", "allocated", "on"))

    def _give(
        self,
        request: PodRequest,
        node: str,
        write: Callable[[dict[str, str]], None],
        words: tuple[str, str, str],
    ) -> str:
        """Choose under the lock, write outside it, then commit or give back; "" or an error.
        ``words``: the verb, its past and preposition, for the messages."""
        verb, done, where = words
        what = f"{verb} {request.key} {where} {node}"
        with self._lock:
            chosen = self._choose(request, node)
        if isinstance(chosen, str):
            self.events.warn(_about(request), BIND_REFUSED, f"{what}: {chosen}")
            return f"{what}: {chosen}"
        annotations = chosen.annotations(int(self._clock() * 1_000_000_000))
        if not self.fence():
            with self._lock:
                self._give_back(chosen)
            return f"{what}: this replica no longer leads; nothing was written"
        try:
            write(annotations)
        except KubeError as failed:
            # Nothing was taken for a pre-created vNPU: nothing to keep or give back.
            landed = (
                self._landed(request, chosen.choice, annotations)
                if chosen.taken is not None
                else False
            )
            if landed is None:  # in doubt the chips stay taken, until a view tells
                message = f"{what}: {failed} (its chips stay held until the pod is seen)"
                self.events.warn(_about(request), BIND_REFUSED, message)
                return message
            if not landed:
                with self._lock:
                    self._give_back(chosen)
                self.events.warn(_about(request), BIND_REFUSED, f"{what}: {failed}")
                return f"{what}: {failed}"
            log.warning("%s: the API server answered %s, but the pod has its chips", what, failed)
        with self._lock:
            self.binds += 1
        chips = ",".join(chosen.choice.values()) or request.resource
        log.info(
            "%s %s %s %s chips %s",
            done,
            request.key,
            where,
            node,
            chips,
            extra={"pod": request.key, "node": node, "chips": chips},
        )
        return ""

    def _landed(
        self, request: PodRequest, choice: Mapping[str, str], annotations: Mapping[str, str]
    ) -> bool | None:
        """Whether a write whose answer was an error reached the pod after all (it carries
        this very choice: the chips and the predicate-time); None when the pod cannot be
        read either."""
        try:
            pod = pod_view(self._gateway.get_pod(request.namespace, request.name))
        except NotFound:
            return False
        except KubeError:
            return None
        return pod.uid == request.uid and all(
            pod.annotations.get(k) == annotations[k] for k in (*choice, PREDICATE_TIME)
        )

    def _choose(self, request: PodRequest, node: str) -> Chosen | str:
        """The pod's chips on ``node``, taken and assumed bound; or why there are none."""
        if request.dynamic:
            choice = self._vnpu.take(
                request.vnpu_task(), request.key, request.uid, node, self._clock()
            )
            if isinstance(choice, str):
                return choice
            return Chosen(request, node, {NPU_CORE_ANNOTATION: str(choice)}, VnpuTaken(), {})
        if request.static:
            try:
                validate_static(request.name, request.resource, request.npu)
            except VnpuInvalid as invalid:
                return str(invalid)
            return Chosen(request, node, {}, None, {})
        taken: PodTaken | RankTaken
        if request.gang:
            rank = self._gangs.take_rank(request, node)
            if isinstance(rank, NotReserved):
                return rank.reason
            taken, notes = rank, rank.notes
        else:
            decision = self._session.place(request.job(), [node])
            if not decision.feasible:
                return decision.reason
            taken, notes = PodTaken(decision.placements[0]), {}
        placement = taken.placement
        job = taken.reservation.job if isinstance(taken, RankTaken) else request.job().key
        self._assumed.add(
            request.key,
            Assumed(request.uid, node, placement.chips, self._clock(), job, placement.task),
        )
        self._network_stale |= isinstance(taken, RankTaken)
        kind = KIND_OF_RESOURCE[request.resource]
        chips = {request.resource: format_chip_list(placement.chips, kind)}
        return Chosen(request, node, chips, taken, notes)

    def _give_back(self, chosen: Chosen) -> None:
        if isinstance(chosen.taken, VnpuTaken):
            self._vnpu.drop(chosen.request.key)
            return
        self._assumed.drop(chosen.request.key)
        if isinstance(chosen.taken, RankTaken):
            self._gangs.give_back(chosen.taken)
        else:
            self._session.release_job(chosen.request.job().key)

    def unannotate(self, namespace: str, name: str, keys: tuple[str, ...]) -> None:
        """Take annotations ``annotate`` wrote off a pod that was not bound (KubeError)."""
        with contextlib.suppress(NotFound):  # gone: nothing to take off
            self._gateway.patch_pod_annotations(namespace, name, dict.fromkeys(keys), "")

    def release(self, pod: Obj) -> tuple[str, ...] | None:
        """Volcano's deallocateFunc: the task leaves the session; the chips this service gave
        that very pod (same UID) come back. The annotations ``annotate`` wrote on it, which
        the caller must take off the pod again; None when it gave that pod nothing."""
        request = pod_request(pod)
        with self._lock:
            uid, written = self._annotated.pop(request.key, (request.uid, ()))
            written = written if uid == request.uid else ()
            vnpu = self._vnpu.given(request.key)
            if vnpu is not None and vnpu.uid == request.uid:
                self._vnpu.drop(request.key)
                return written
            given = self._assumed.given(request.key)
            if given is None or given.uid != request.uid:
                return None
            self._assumed.drop(request.key)
            if not self._gangs.unbind(request.key):  # a live reservation keeps its rank
                self._session.release_task(given.job, given.task)
            return written


def _filter_static(request: PodRequest, names: list[str]) -> Verdicts:
    """A pre-created vNPU: one per pod; kube-scheduler and Volcano count the nodes' vNPUs of
    its type themselves, the kubelet picks which."""
    try:
        validate_static(request.name, request.resource, request.npu)
    except VnpuInvalid as invalid:
        return [], {}, dict.fromkeys(names, str(invalid))
    return list(names), {}, {}


def _answer(
    candidates: Candidates, passing: list[str], failed: dict[str, str], never: dict[str, str]
) -> dict[str, Any]:
    """``ExtenderFilterResult``: the passing nodes as they came (names or Node objects)."""
    return {
        **candidates.answer(passing),
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": never,
        "Error": "",
    }
