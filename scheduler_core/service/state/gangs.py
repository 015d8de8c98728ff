"""Gangs: the N pods of a job of several pods, however its controller names the group
(``contract.groups``: a Volcano or coscheduling PodGroup, a Kueue pod group, or
``ascend.npu/gang: <name>`` with ``ascend.npu/gang-size: "<N>"``; ``jobs`` gives its size).

A gang is reserved as N nodes at once, only when all N pods exist; members bind only into
that reservation, which expires after ``ttl`` seconds if they never do. While a gang waits,
its members that exist and do not run yet (pods created, each charged by its namespace's
ResourceQuota) are each held one member's request on a node of their own, where it fits now,
the policy's best first, so a stream of one-pod jobs cannot starve it (``holds.plan_holds``); a
member its PodGroup declares but nobody created holds nothing. Holds go oldest gang first,
each for at most ``hold_limit`` seconds. Holds are a tenant's claim on chips it does not use,
so they are charged at what they deny others: a node where a member is held is no longer
whole for a whole-server job, so each held node costs its whole server (the product's
chips), however few the member asks. Only a gang whose size a PodGroup states holds anything
(a size its pods only claim would let any tenant hold chips by writing an annotation); a
namespace's holds together cost at most ``hold_share`` of the cluster's chips, and all
namespaces' holds together at most ``hold_share_total`` (by default the same share), so at
least the rest of the cluster stays unheld however many namespaces a tenant has; and a
namespace whose hold ended unused (the limit passed, or the gang went, before it was
reserved) holds nothing for a backoff that doubles with each such end, reset when one of its
gangs is placed whole.

A gang partly running (a reservation that expired half bound, a leader that took over
without the reservation its first ranks came from) waits for the rest of its nodes where
the network lets the rest go (its SuperPoDs, its ToRs for a large model): there its nodes
are held, the freest first, so they drain for it. If the rest still cannot be placed once
the gang has run partly for ``ttl`` seconds, the gang restarts whole (``restarts``): its
running ranks only wait for peers that do not come (HCCL gives up on them anyway), on nodes
a whole placement may not want.
"""

from __future__ import annotations

import logging
from collections.abc import (
    Callable,
    Collection,
    Container,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field

from contract.annotations import (
    RANK_INDEX_ANNOTATION,
    RESCHEDULE_IN_PLACE_ANNOTATION,
    TOR_AFFINITY_LABEL,
)
from contract.node_affinity import PodConstraints
from contract.pods import PodView
from scheduler_core.engine import locality, rescheduling, tor
from scheduler_core.engine.model import Job, Placement, Task
from scheduler_core.engine.rescheduling import GANG_RESTART_REASON, Deletion, FaultJob
from scheduler_core.engine.session import Session
from scheduler_core.engine.superpod import SuperPodInvalid
from scheduler_core.engine.tor import TorInvalid
from scheduler_core.engine.tor_share import SharedSelection
from scheduler_core.service.state.gang_pods import GangPods
from scheduler_core.service.state.holds import (
    BACKOFF,
    BACKOFF_DOUBLINGS,
    BACKOFF_NAMESPACES,
    DEFAULT_HOLD_SHARE,
    MEMBERS_MISSING,
    NETWORK,
    NO_ROOM,
    WAIT_CLASSES,
    Backoff,
    Hold,
    WaitingGang,
    backoff_after,
    capacity,
    plan_holds,
)
from scheduler_core.service.wire import PodRequest

log = logging.getLogger(__name__)


def _after_pod_fault(
    candidates: list[str], missing: Iterable[int], fault: FaultJob, prefer_previous: bool
) -> list[str]:
    """Candidates for the ranks a pod-level fault job places again beside its survivors:
    with ``prefer_previous`` (Volcano's ``prefer-previous-node``, ascend-for-volcano
    ``plugin/factory.go`` addPreferPreviousNodeScore) each rank's previous node first when it
    did not fail; the failed nodes last (``rescheduling/reschedule.go``
    reduceScoreForLastFaultNode)."""
    previous = fault.previous if prefer_previous else {}
    first = [
        n
        for r in missing
        if (n := previous.get(r)) is not None and n in candidates and n not in fault.nodes
    ]
    rest = [n for n in candidates if n not in first and n not in fault.nodes]
    return list(dict.fromkeys(first)) + rest + [n for n in candidates if n in fault.nodes]


def _refill(fault: FaultJob, missing: Sequence[int], waited: float) -> locality.Refill | None:
    """How an Atlas 950 pod-level fault job's missing ranks go back (None: as any job's)."""
    stage = rescheduling.refill_stage(fault.recovery, waited)
    previous = fault.previous
    if stage is None or any(r not in previous for r in missing):
        return None
    return locality.Refill(stage, tuple(missing), tuple(previous[r] for r in missing))


def _in_place(
    notes: Mapping[int, Mapping[str, str]], nodes: Mapping[int, str], fault: FaultJob
) -> dict[int, Mapping[str, str]]:
    """A faulty rank placed again on its previous node carries ``reschedule-in-place:
    "true"`` for ClusterD (ascend-for-volcano ``rescheduling/reschedule.go`` UseAnnotation)."""
    previous = fault.previous
    return {
        r: {**note, RESCHEDULE_IN_PLACE_ANNOTATION: "true"}
        if r in fault.failed and previous.get(r) == nodes[r]
        else note
        for r, note in notes.items()
    }


@dataclass
class Reservation:
    placements: dict[int, Placement]  # rank → placement (ranks already running: none)
    expires: float
    notes: Mapping[int, Mapping[str, str]]  # extra annotations of each rank's pod
    shared: SharedSelection | None = None
    schema: str = tor.DISABLED
    job: str = ""  # the session ledger's job holding its chips
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


@dataclass(frozen=True, slots=True)
class NotReserved:
    """Why a gang has no reservation (yet)."""

    reason: str


@dataclass(frozen=True, slots=True)
class RankTaken:
    """A gang member's place in its reservation, taken for a bind."""

    gang: str
    reservation: Reservation
    placement: Placement
    notes: Mapping[str, str]  # the pod's annotations beyond the chips


def _freest(session: Session, nodes: Collection[str]) -> list[str]:
    """The nodes the session offers, most usable chips first: whole free nodes, then those
    closest to it."""
    offered = [n for n in nodes if n in session.nodes]
    return sorted(offered, key=lambda n: (-len(session.usable(n)), n))


def unheld(request: PodRequest) -> str:
    """What a waiting gang's message adds when nothing is held for it: its pods alone claim
    its size (an annotation any pod's author writes), so it gets no hold (issue 38)."""
    if request.gang_stated:
        return ""
    return " (no chips held for it meanwhile: no PodGroup states its size)"


class Gangs:
    def __init__(
        self,
        ttl: float,
        hold_limit: float,
        hold_share: float = DEFAULT_HOLD_SHARE,
        hold_share_total: float | None = None,
    ) -> None:
        """``hold_share``: the share of the cluster's chips one namespace's holds may cost;
        ``hold_share_total``: all namespaces' together (None: the same share)."""
        self.ttl = ttl
        self._hold_limit = hold_limit
        self._hold_share = hold_share
        self._hold_share_total = hold_share if hold_share_total is None else hold_share_total
        self.reservations: dict[str, Reservation] = {}
        self._waiting: dict[str, WaitingGang] = {}
        self._holding: set[str] = set()  # waiting gangs that were given a hold
        self._backoff: dict[str, Backoff] = {}  # namespace → its backoff, oldest first
        self._rest_in: dict[str, frozenset[str]] = {}  # waiting gang → where its rest may go
        self._partial: dict[str, float] = {}  # gang → since when some ranks run, not all
        self.restarted = 0  # gangs restarted whole since start (``restarts``)

    def expire(
        self, session: Session, pending: Collection[str], now: float, partial: Collection[str]
    ) -> None:
        """Drop the expired reservations (their unbound placements' chips come back) and
        the waiting gangs that no longer have pending pods; ``partial``: the gangs with
        pods bound and pods pending now."""
        for gang, reservation in list(self.reservations.items()):
            if now <= reservation.expires:
                continue
            log.warning(
                "gang %s: reservation expired with %d of %d bound",
                gang,
                len(reservation.bound),
                len(reservation.placements),
            )
            del self.reservations[gang]
            for p in reservation.placements.values():
                if p.task not in reservation.bound:
                    session.release_task(reservation.job, p.task)
        for gang, wait in self._waiting.items():
            if gang in self._holding and (
                gang not in pending or now - wait.since > self._hold_limit
            ):
                self._holding.discard(gang)
                self._back_off(wait.namespace, now)
        self._waiting = {g: wait for g, wait in self._waiting.items() if g in pending}
        self._holding &= self._waiting.keys()
        self._rest_in = {g: nodes for g, nodes in self._rest_in.items() if g in self._waiting}
        self._partial = {g: self._partial.get(g, now) for g in partial}
        quiet = self._hold_limit * 2**BACKOFF_DOUBLINGS
        self._backoff = {ns: b for ns, b in self._backoff.items() if now <= b.until + quiet}

    @property
    def holding(self) -> int:
        """Waiting gangs that hold chips now."""
        return len(self._holding)

    def _back_off(self, namespace: str, now: float) -> None:
        """One of the namespace's holds ended unused."""
        log.warning("namespace %s: a gang's hold ended unused; it backs off", namespace)
        backoff = backoff_after(self._backoff.pop(namespace, None), now, self._hold_limit)
        self._backoff[namespace] = backoff
        if len(self._backoff) > BACKOFF_NAMESPACES:
            del self._backoff[next(iter(self._backoff))]

    def restarts(
        self,
        members: Mapping[str, list[PodView]],
        now: float,
        coming_back: Callable[[str], object],
    ) -> list[Deletion]:
        """The pods to delete so the gangs stuck partly running restart whole: running for
        more than the TTL without their rest, which has no reservation and which the last
        try could not place (``members``: each gang's pods; ``coming_back``: a fault job's
        restart, which its own hold rules). All its pods go, so its controller makes the
        gang again whole, as Volcano's ``RestartJob`` action does (every pod killed:
        ``pkg/controllers/job/state/running.go``); a gang with a pod no
        controller owns is left as it is (nobody would make that pod again), and said. Each
        gang is acted on once per TTL: its clock starts again."""
        deletions = []
        for gang, since in self._partial.items():
            if now - since <= self.ttl or gang not in self._waiting or gang in self.reservations:
                continue
            self._partial[gang] = now
            if coming_back(gang):
                continue
            live = [p for p in members.get(gang, []) if p.live]
            said = (
                f"gang {gang}: {sum(bool(p.node) for p in live)} of its pods ran longer than "
                f"{self.ttl:.0f} s without the rest, which could not be placed"
            )
            if not all(p.controlled for p in live):
                log.warning("%s; not restarted: a pod of it has no controller", said)
                continue
            why = f"{said}: restarted whole"
            self.restarted += 1
            deletions += [
                Deletion(p.namespace, p.name, p.uid, 0, why, GANG_RESTART_REASON)
                for p in sorted(live, key=lambda p: p.key)
            ]
        return deletions

    def held_nodes(
        self,
        session: Session,
        fault_holds: Mapping[str, str],
        now: float,
        ruled_out: Callable[[PodConstraints], Container[str]] = lambda _: (),
    ) -> dict[str, Hold]:
        """What is kept from one-pod jobs, node by node: a fault job's healthy nodes whole
        until it comes back, and the chips of waiting gangs' members whose pods exist
        (``plan_holds``): where a member fits now, the policy's best first, or, for the rest
        of a gang partly running, the freest nodes where the network lets it go, so they
        drain for it; each held node charged as a whole server against the shares. A gang
        holds nothing where its pods may not go (``ruled_out``: the nodes their constraints
        rule out): such a hold would keep chips from others and serve nobody."""
        held = {
            node: Hold(f"held for fault job {job} to come back")
            for node, job in fault_holds.items()
        }
        if not self._waiting:
            return held
        # Gangs of one shape share one lazy order: each goes on where the one before it
        # stopped (the nodes before are held or taken), so a call reads each node once.
        orders: dict[tuple[str, int, PodConstraints], Iterator[str]] = {}

        def candidates(gang: str, wait: WaitingGang) -> Iterable[str]:
            excluded = ruled_out(wait.constraints)
            rest_in = self._rest_in.get(gang)
            if rest_in is not None:
                return (n for n in _freest(session, rest_in) if n not in excluded)
            shape = (wait.product, wait.npu, wait.constraints)
            if shape not in orders:
                fitting = session.fitting(wait.product, wait.npu)
                orders[shape] = (n for n in fitting if n not in excluded)
            return orders[shape]

        planned = plan_holds(
            self._waiting,
            now=now,
            hold_limit=self._hold_limit,
            budget=int(session.chips * self._hold_share),
            total=int(session.chips * self._hold_share_total),
            backoff=self._backoff,
            candidates=candidates,
            taken=held.keys(),
        )
        for gang, nodes in planned.items():
            self._holding.add(gang)
            wait = self._waiting[gang]
            waited = int(now - wait.since)
            why = f"held for gang {gang} ({wait.npu} chips), waiting since {waited} s"
            held.update(dict.fromkeys(nodes, Hold(why, wait.npu, wait.product)))
        return held

    def reserve(
        self,
        request: PodRequest,
        *,
        session: Session,
        network: locality.Network,
        settings: locality.Settings,
        pods: GangPods,
        fault: FaultJob | None,
        excluded: Collection[str],
        now: float,
        waited: float = 0.0,
    ) -> Reservation | NotReserved:
        """Reserve the gang's missing ranks (all of them, or those of a fault job's run that
        failed, ``waited`` seconds after they were deleted), on nodes chosen for the
        network, none of ``excluded`` (held for another job, or where the pods may not go);
        or say why it cannot be yet."""
        gang = request.gang_key
        # Ranks still running stay (a reservation that expired half bound, a restart, the
        # survivors of a pod-level fault job); a whole-job fault restarts every rank.
        running = pods.ranks.get(gang, {})
        if fault is not None:
            moving = fault.moving
            running = (
                {} if moving is None else {r: n for r, n in running.items() if r not in moving}
            )
        pending = _pending(pods.pending.get(gang, []), request)
        present = pending + len(running)
        if present < request.gang_size:
            why = f"gang {gang}: {present} of {request.gang_size} pods exist; waiting for the rest"
            why += unheld(request)
            self._wait(request, (len(running), pending), now, why, MEMBERS_MISSING)
            return NotReserved(why)
        missing = [r for r in pods.slots(gang, request.gang_size) if r not in running]
        notes_on = {m.node: m.annotations for m in pods.bound.get(gang, [])}
        running_notes = {node: notes_on.get(node, {}) for node in running.values()}
        tasks = tuple(Task(f"{request.gang}-{r}", request.npu) for r in missing)
        job = Job(gang, request.product, tasks, labels=request.labels)
        candidates = [
            n
            for n, status in session.filter(job, request.npu).items()
            if status.ok and n not in excluded
        ]
        scores = session.score(job, request.npu, candidates)
        candidates.sort(key=lambda n: (-scores.get(n, 0.0), n))
        partial = fault is not None and fault.moving is not None
        refill = None
        if fault is not None and partial:
            candidates = _after_pod_fault(candidates, missing, fault, settings.prefer_previous_node)
            refill = _refill(fault, missing, waited)
        ask = locality.Ask(
            gang,
            len(missing),
            capacity(request.product),
            request.npu,
            request.labels,
            request.annotations,
        )
        try:
            choice = locality.choose(
                ask,
                candidates,
                network,
                settings,
                previous=fault.previous if fault and not partial else None,
                fault_nodes=frozenset(fault.nodes) if fault else frozenset(),
                running=running_notes,
                # One-task SuperPoD jobs prefer the least idle nodes.
                idle={n: len(session.usable(n)) for n in candidates} if len(missing) == 1 else None,
                refill=refill,
            )
            decision = session.place(job, choice.nodes)
            if not decision.feasible:
                raise locality.Unplaceable(decision.reason)
        except (TorInvalid, SuperPodInvalid) as invalid:
            return NotReserved(str(invalid))
        except locality.Unplaceable as unplaceable:
            why = f"gang {gang} does not fit yet: {unplaceable}{unheld(request)}"
            # Fewer nodes with room for a member than members: no room; enough: the network.
            room = NETWORK if len(candidates) >= len(missing) else NO_ROOM
            self._wait(request, (len(running), pending), now, why, room)
            if running:
                rest_in = locality.rest_domain(ask, network, running.values())
                if rest_in is not None:
                    self._rest_in[gang] = rest_in
            return NotReserved(why)
        self._waiting.pop(gang, None)
        self._holding.discard(gang)  # its hold served: no backoff
        self._rest_in.pop(gang, None)
        notes = dict(zip(missing, choice.notes, strict=True))
        if fault is not None and partial:
            notes = _in_place(notes, dict(zip(missing, choice.nodes, strict=True)), fault)
        reservation = Reservation(
            dict(zip(missing, decision.placements, strict=True)),
            now + self.ttl,
            notes,
            choice.shared,
            request.labels.get(TOR_AFFINITY_LABEL, tor.DISABLED),
            job.key,
        )
        self.reservations[gang] = reservation
        log.info(
            "gang %s reserved %s (%s)",
            gang,
            {r: p.node for r, p in reservation.placements.items()},
            choice.how,
        )
        return reservation

    @property
    def waiting(self) -> Mapping[str, WaitingGang]:
        """The gangs waiting now (gang → as its last try saw it)."""
        return self._waiting

    def wait_classes(self, now: float) -> tuple[dict[str, int], float]:
        """Gangs waiting now by ``WAIT_CLASSES`` (each class shown, 0 when none), and how
        long the longest-waiting one has waited (0 when none waits)."""
        counts = dict.fromkeys(WAIT_CLASSES, 0)
        oldest = 0.0
        for wait in self._waiting.values():
            backed_off = (b := self._backoff.get(wait.namespace)) is not None and now < b.until
            counts[
                BACKOFF if wait.reason_class == NO_ROOM and backed_off else wait.reason_class
            ] += 1
            oldest = max(oldest, now - wait.since)
        return counts, oldest

    def _wait(
        self,
        request: PodRequest,
        members: tuple[int, int],
        now: float,
        reason: str,
        reason_class: str,
    ) -> None:
        """The gang waits (since its first wait): as this try of one of its pods sees it;
        ``members``: how many of its members run, and how many more exist unbound."""
        gang = request.gang_key
        running, pending = members
        since = wait.since if (wait := self._waiting.get(gang)) is not None else now
        self._waiting[gang] = WaitingGang(
            since,
            request.namespace,
            request.product,
            request.npu,
            request.gang_size - running,
            request.gang_stated,
            reason,
            reason_class,
            pending,
            request.constraints,
        )

    def take_rank(self, request: PodRequest, node: str) -> RankTaken | NotReserved:
        """The member's rank on ``node`` in its gang's reservation, marked bound to it: its
        own rank's place there, else another free place there (Volcano's predicate passes a
        member on any free place of its gang; the rank it gets is written with its chips)."""
        reservation = self.reservations.get(request.gang_key)
        rank = None
        if reservation is not None:
            rank = reservation.free_on(node, request.rank)
            if rank is None:
                rank = reservation.free_on(node)
        if reservation is None or rank is None:
            return NotReserved(f"no reservation of gang {request.gang_key} on {node}")
        placement = reservation.placements[rank]
        reservation.bound[placement.task] = request.key
        if len(reservation.bound) == len(reservation.placements):
            del self.reservations[request.gang_key]  # complete: the pods hold it now
            self._backoff.pop(request.namespace, None)  # the namespace's gangs do start
        notes = {RANK_INDEX_ANNOTATION: str(rank), **reservation.notes[rank]}
        return RankTaken(request.gang_key, reservation, placement, notes)

    def give_back(self, taken: RankTaken) -> None:
        """A bind that failed: its rank is free in the reservation again."""
        taken.reservation.bound.pop(taken.placement.task, None)
        self.reservations.setdefault(taken.gang, taken.reservation)

    def unbind(self, pod: str) -> bool:
        """Volcano took the pod out of its session: its rank is free again in its live
        reservation (False when there is none: its chips are nobody's now)."""
        found = False
        for reservation in self.reservations.values():
            for task, key in list(reservation.bound.items()):
                if key == pod:
                    del reservation.bound[task]
                    found = True
        return found


def _pending(waiting: Collection[str], request: PodRequest) -> int:
    """A gang's unbound members: the watch's, and the pod asked about, which exists (the call
    read it) even when the watch has not shown it yet. Uncounted, it would be refused as a
    missing member, and kube-scheduler retries an unschedulable pod on a cluster event or its
    5-minute flush, not on our watch."""
    return len(waiting) + (request.name not in waiting)
