"""The extender's handlers, one per kind of request, chosen once per call
(``Extender._kind``): a pod asking no NPU, one pod of chips (910 or inference), a gang
member, a dynamic vNPU, a pre-created vNPU. Each is given the shared state (``ExtenderState``)
and keeps none of its own; a new kind is one more class here. The Extender calls every
method under the state's lock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from contract.annotations import PREDICATE_TIME
from contract.chip_names import KIND_OF_RESOURCE, format_chip_list
from contract.vnpu import NPU_CORE_ANNOTATION, NPU_CORE_RESOURCE
from infra.events import ObjectRef, pod_ref
from scheduler_core.engine import locality, tor
from scheduler_core.engine.model import Job, Placement
from scheduler_core.engine.superpod import SuperPodInvalid
from scheduler_core.engine.validation import JobInvalid, validate_job
from scheduler_core.engine.vnpu import VnpuInvalid, validate_static
from scheduler_core.service.state.assumed import Assumed
from scheduler_core.service.state.extender_state import ExtenderState
from scheduler_core.service.state.gangs import NotReserved, RankTaken, Reservation
from scheduler_core.service.state.holds import Hold
from scheduler_core.service.wire import (
    MAX_SCORE,
    HostPriority,
    PodRequest,
    best,
    best_list,
    normalize,
    normalize_list,
)

GANG_WAITING = "NPUGangWaiting"

# A filter's verdicts: the passing nodes, those that fail now, those that never can.
Verdicts = tuple[list[str], dict[str, str], dict[str, str]]


def about(request: PodRequest) -> ObjectRef:
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
    nothing to hold, as for a pre-created vNPU, which the kubelet picks)."""

    request: PodRequest
    node: str
    choice: Mapping[str, str]  # the chips' annotation: huawei.com/Ascend910 or npu-core
    taken: PodTaken | RankTaken | VnpuTaken | None
    notes: Mapping[str, str]  # annotations beyond the chips (a gang member's rank, network)

    def annotations(self, predicate_time: int) -> dict[str, str]:
        if self.taken is None:
            return {}
        return {**self.choice, PREDICATE_TIME: str(predicate_time), **self.notes}


class Kind(Protocol):
    def filter(self, request: PodRequest, names: list[str]) -> Verdicts: ...

    def scores(self, request: PodRequest, names: list[str]) -> dict[str, float]:
        """The policy's raw scores of the nodes that can host the pod (Volcano sums them)."""
        ...

    def prioritize(self, request: PodRequest, names: list[str]) -> list[HostPriority]:
        """kube-scheduler's ``HostPriorityList``, 0..10."""
        ...

    def top(self, request: PodRequest, names: list[str]) -> list[str]:
        """The names ``prioritize`` scores highest, in their order."""
        ...

    def choose(self, request: PodRequest, node: str) -> Chosen | str:
        """The pod's devices on ``node``, taken and held; or why there are none."""
        ...

    def give_back(self, chosen: Chosen) -> None: ...

    def release(self, request: PodRequest) -> bool:
        """Volcano's deallocateFunc: what this service gave that very pod comes back; False
        when it gave it nothing."""
        ...


def _zeros(names: list[str]) -> list[HostPriority]:
    return [HostPriority(n, 0) for n in names]


class NoNpu:
    """A pod asking no NPU (callers without managedResources send every pod): every node
    passes, none is preferred, and it is bound without annotations."""

    def filter(self, request: PodRequest, names: list[str]) -> Verdicts:
        return list(names), {}, {}

    def scores(self, request: PodRequest, names: list[str]) -> dict[str, float]:
        return {}

    def prioritize(self, request: PodRequest, names: list[str]) -> list[HostPriority]:
        return _zeros(names)

    def top(self, request: PodRequest, names: list[str]) -> list[str]:
        return list(names)

    def choose(self, request: PodRequest, node: str) -> Chosen | str:
        return Chosen(request, node, {}, None, {})

    def give_back(self, chosen: Chosen) -> None:
        pass

    def release(self, request: PodRequest) -> bool:
        return False


class StaticVnpu(NoNpu):
    """A pre-created vNPU type: one per pod; kube-scheduler and Volcano count the nodes'
    vNPUs of its type themselves, the kubelet picks which; no annotation."""

    def filter(self, request: PodRequest, names: list[str]) -> Verdicts:
        try:
            validate_static(request.name, request.resource, request.npu)
        except VnpuInvalid as invalid:
            return [], {}, dict.fromkeys(names, str(invalid))
        return list(names), {}, {}

    def choose(self, request: PodRequest, node: str) -> Chosen | str:
        try:
            validate_static(request.name, request.resource, request.npu)
        except VnpuInvalid as invalid:
            return str(invalid)
        return Chosen(request, node, {}, None, {})


class _Assuming:
    """Chips taken in the session and assumed bound until the view shows the pod."""

    def __init__(self, state: ExtenderState) -> None:
        self.state = state

    def _assume(
        self, request: PodRequest, node: str, taken: PodTaken | RankTaken, notes: Mapping[str, str]
    ) -> Chosen:
        state = self.state
        placement = taken.placement
        job = taken.reservation.job if isinstance(taken, RankTaken) else request.job().key
        state.assumed.add(
            request.key,
            Assumed(request.uid, node, placement.chips, state.clock(), job, placement.task),
        )
        kind = KIND_OF_RESOURCE[request.resource]
        chips = {request.resource: format_chip_list(placement.chips, kind)}
        return Chosen(request, node, chips, taken, notes)

    def release(self, request: PodRequest) -> bool:
        state = self.state
        given = state.assumed.given(request.key)
        if given is None or given.uid != request.uid:
            return False
        state.assumed.drop(request.key)
        if not state.gangs.unbind(request.key):  # a live reservation keeps its rank
            state.session.release_task(given.job, given.task)
        return True


class Chips(_Assuming):
    """One pod of chips (910, 310, 310P): the session's predicate, scores and placement; the
    chips held back for waiting gangs and the nodes of restarting fault jobs."""

    def filter(self, request: PodRequest, names: list[str]) -> Verdicts:
        state = self.state
        job = request.job()
        try:
            validate_job(job)
            locality.check_lone_pod(request.annotations, request.npu, state.network.settings)
        except (JobInvalid, SuperPodInvalid) as invalid:
            return [], {}, dict.fromkeys(names, str(invalid))
        now = state.clock()
        held = state.gangs.held_nodes(
            state.session,
            state.faults.restarts.holds(now),
            now,
            lambda constraints: state.fits.misfits(constraints, state.session.nodes).keys(),
        )
        passing, refused, unknown = state.session.split(job, request.npu, names)
        failed: dict[str, str] = {}
        never: dict[str, str] = {}
        for name, status in refused.items():
            (never if status.unresolvable else failed)[name] = status.reason
        for name in unknown:
            left_out = state.left_out.get(name)
            if left_out is None or name in state.vnpu:  # not one of this pod's nodes
                never[name] = self._not_offered(name, request)
            else:  # an NPU node left out for now (stale, not stable): it may come back
                failed[name] = left_out
        if held and (kept := self._kept(job, request.npu, passing, held)):
            failed.update(kept)  # chips kept for waiting gangs, nodes for fault jobs
            passing = [n for n in passing if n not in kept]
        if locality.own_network(request.annotations):
            outside = locality.off_network(request.annotations, passing, state.network_view())
            failed.update(outside)  # its DeviceInfo may name them later
            passing = [n for n in passing if n not in outside]
        return passing, failed, never

    def _kept(
        self, job: Job, npu: int, passing: list[str], held: Mapping[str, Hold]
    ) -> dict[str, str]:
        """The passing nodes the pod may not have (node → why): a fault job's whole, a
        waiting gang's where the pod's chips would leave its member no room."""
        by_hold: dict[Hold, list[str]] = {}
        for name in held.keys() & passing:  # one pass over the passing nodes, in C
            by_hold.setdefault(held[name], []).append(name)
        kept: dict[str, str] = {}
        session = self.state.session
        for hold, names in by_hold.items():
            refused = (
                names if hold.whole else session.crowded(names, job, npu, hold.product, hold.npu)
            )
            kept.update(dict.fromkeys(refused, hold.why))
        return kept

    def _not_offered(self, name: str, request: PodRequest) -> str:
        """Why a node the session does not offer is no place for a pod of chips."""
        if name in self.state.vnpu:
            return f"{name} offers {NPU_CORE_RESOURCE} (dynamic vNPU), not {request.resource}"
        return self.state.left_out.get(name, f"{name} is not an Ascend NPU node")

    def scores(self, request: PodRequest, names: list[str]) -> dict[str, float]:
        return self.state.session.score(request.job(), request.npu, names)

    def prioritize(self, request: PodRequest, names: list[str]) -> list[HostPriority]:
        return normalize_list(
            self.state.session.score_list(request.job(), request.npu, names), names
        )

    def top(self, request: PodRequest, names: list[str]) -> list[str]:
        return best_list(self.state.session.score_list(request.job(), request.npu, names), names)

    def choose(self, request: PodRequest, node: str) -> Chosen | str:
        decision = self.state.session.place(request.job(), [node])
        if not decision.feasible:
            return decision.reason
        return self._assume(request, node, PodTaken(decision.placements[0]), {})

    def give_back(self, chosen: Chosen) -> None:
        self.state.assumed.drop(chosen.request.key)
        self.state.session.release_job(chosen.request.job().key)


class GangMember(_Assuming):
    """A pod of a multi-node job: all its pods' nodes reserved at once (network locality,
    SuperPoDs, fault restarts), each pod bound into the reservation."""

    def filter(self, request: PodRequest, names: list[str]) -> Verdicts:
        state = self.state
        reservation = state.gangs.reservations.get(request.gang_key) or self._reserve(request)
        if isinstance(reservation, NotReserved):
            state.events.normal(about(request), GANG_WAITING, reservation.reason)
            return [], dict.fromkeys(names, reservation.reason), {}
        rank = request.rank
        reserved = reservation.ranks_on  # a few nodes of thousands: look only at those
        passing = [n for n in names if n in reserved and reservation.free_on(n, rank) is not None]
        which = f"rank {rank} of gang" if rank is not None else "gang"
        chosen = set(passing)
        others = [n for n in names if n not in chosen]
        # A node the job could not use anyway is refused in the session's (upstream's) words,
        # as for a pod of one; the others because the gang's places are elsewhere.
        _, refused, _ = state.session.split(request.job(), request.npu, others)
        why = {n: status.reason for n, status in refused.items()}
        if locality.own_network(request.annotations):
            usable = (n for n in others if n not in why)
            why.update(locality.off_network(request.annotations, usable, state.network_view()))
        not_reserved = f"not reserved for {which} {request.gang_key}"
        failed = {n: why.get(n, not_reserved) for n in others}
        return passing, failed, {}

    def _reserve(self, request: PodRequest) -> Reservation | NotReserved:
        state = self.state
        now = state.clock()
        fault = state.faults.restarts.get(request.gang_key)
        held = {n for n, job in state.faults.restarts.holds(now).items() if job != request.gang_key}
        # Only nodes the gang's pods may go to: one outside their nodeSelector, required node
        # affinity or tolerations, reserved, would leave them refused until the reservation
        # expires (the scheduler's own predicates rule it out first). A gang's members share
        # one template; each bind re-checks its own pod.
        ruled_out = state.fits.misfits(request.constraints, state.session.nodes)
        reservation = state.gangs.reserve(
            request,
            session=state.session,
            network=state.network_view(),
            settings=state.network.settings,
            pods=state.pods,
            fault=fault,
            excluded=held | ruled_out.keys(),
            now=now,
            waited=state.faults.restarts.waited(request.gang_key, now),
        )
        if isinstance(reservation, Reservation):
            state.faults.restarts.placed(request.gang_key, request.labels)
            state.network.reserved(request.gang_key, reservation)
        return reservation

    def _reserved_scores(self, request: PodRequest, names: list[str]) -> dict[str, float]:
        """The gang's reserved nodes for this pod: the exact-rank node scores 200 as in
        upstream's ToR affinity, any free reserved node 10 for a pod without a rank."""
        reservation = self.state.gangs.reservations.get(request.gang_key)
        if reservation is None:
            return {}
        rank = request.rank
        score = tor.RANK_SCORE if rank is not None else float(MAX_SCORE)
        return {n: score for n in names if reservation.free_on(n, rank) is not None}

    def scores(self, request: PodRequest, names: list[str]) -> dict[str, float]:
        """Under switch affinity 2.0, upstream's scores of a ranked gang member: 100 (99 on a
        shared ToR) along the job's servers up to its rank's, which scores 200."""
        reservation = self.state.gangs.reservations.get(request.gang_key)
        rank = request.rank
        if reservation is None or reservation.shared is None or rank not in reservation.placements:
            return self._reserved_scores(request, names)
        by_ip = reservation.shared.scores(sorted(reservation.placements).index(rank))
        addresses = self.state.network.addresses
        return {n: by_ip[a] for n in names if (a := addresses.get(n, "")) in by_ip}

    def prioritize(self, request: PodRequest, names: list[str]) -> list[HostPriority]:
        scores = self._reserved_scores(request, names)
        return [HostPriority(n, MAX_SCORE if n in scores else 0) for n in names]

    def top(self, request: PodRequest, names: list[str]) -> list[str]:
        return best(self.prioritize(request, names))

    def choose(self, request: PodRequest, node: str) -> Chosen | str:
        rank = self.state.gangs.take_rank(request, node)
        if isinstance(rank, NotReserved):
            return rank.reason
        self.state.network.stale = True
        return self._assume(request, node, rank, rank.notes)

    def give_back(self, chosen: Chosen) -> None:
        self.state.assumed.drop(chosen.request.key)
        if isinstance(chosen.taken, RankTaken):
            self.state.gangs.give_back(chosen.taken)


class DynamicVnpu:
    """AI cores of a 310P, 910B or A3 chip: a vNPU cut by the engine's model (or whole
    chips)."""

    def __init__(self, state: ExtenderState) -> None:
        self.state = state

    def filter(self, request: PodRequest, names: list[str]) -> Verdicts:
        state = self.state
        try:
            verdicts = state.vnpu.verdicts(request.vnpu_task(), names)
        except VnpuInvalid as invalid:
            return [], {}, dict.fromkeys(names, str(invalid))
        passing, failed, never = [], {}, {}
        for name in names:
            verdict = verdicts.get(name)
            if verdict is None:
                left_out = state.left_out.get(name)
                if left_out is None:
                    never[name] = f"{name} is not a dynamic vNPU node"
                else:  # left out for now (its DeviceInfo or labels): it may come back
                    failed[name] = left_out
            elif verdict.resource is None:
                (never if verdict.final else failed)[name] = verdict.reason
            else:
                passing.append(name)
        return passing, failed, never

    def scores(self, request: PodRequest, names: list[str]) -> dict[str, float]:
        return self.state.vnpu.scores(request.vnpu_task(), names)

    def prioritize(self, request: PodRequest, names: list[str]) -> list[HostPriority]:
        return normalize(self.scores(request, names), names)

    def top(self, request: PodRequest, names: list[str]) -> list[str]:
        return best(self.prioritize(request, names))

    def choose(self, request: PodRequest, node: str) -> Chosen | str:
        state = self.state
        choice = state.vnpu.take(request.vnpu_task(), request.key, request.uid, node, state.clock())
        if isinstance(choice, str):
            return choice
        return Chosen(request, node, {NPU_CORE_ANNOTATION: str(choice)}, VnpuTaken(), {})

    def give_back(self, chosen: Chosen) -> None:
        self.state.vnpu.drop(chosen.request.key)

    def release(self, request: PodRequest) -> bool:
        given = self.state.vnpu.given(request.key)
        if given is None or given.uid != request.uid:
            return False
        self.state.vnpu.drop(request.key)
        return True
