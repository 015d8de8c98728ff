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

Its parts: ``kinds`` (a handler per kind of request), ``extender_state`` (the state they
share: what the watches report, the ledger and the fault restarts), ``wire`` (the JSON),
``assumed`` (binds the view does not show yet), ``gangs`` (reservations
and hold-back), ``fault_restarts``, ``tor_state``, ``vnpu_nodes`` (dynamic vNPU).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from contract.annotations import PREDICATE_TIME
from contract.chip_names import quoted
from contract.objects import Obj
from contract.pods import PodView, pod_view
from infra.kube.port import KubeError, KubeGateway, NotFound
from scheduler_core.engine.policies import DEFAULT_POLICY, Policy
from scheduler_core.service.state.extender_state import ExtenderState
from scheduler_core.service.verbs.filter_passes import FilterPasses
from scheduler_core.service.verbs.kinds import (
    Chips,
    DynamicVnpu,
    GangMember,
    Kind,
    NoNpu,
    StaticVnpu,
    Verdicts,
    about,
)
from scheduler_core.service.wire import (
    BadPod,
    BadRequest,
    ExtenderArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionResult,
    HostPriority,
    PodRequest,
    Unready,
    binding_args,
    extender_args,
    pod_request,
    preemption_args,
)

log = logging.getLogger(__name__)

BIND_REFUSED = "NPUBindRefused"
# The schedulers NPU pods choose: the kube-scheduler overlay's profile
# (its KubeSchedulerConfiguration) and Volcano's.
DEFAULT_PROFILES = frozenset({"ascend-npu-scheduler", "volcano"})
# kube-scheduler's minFeasibleNodesToFind: also the fewest nodes a sampled filter asks at once.
MIN_FEASIBLE = 100
NOMINATION_GRACE = 30.0  # seconds a nominated pod waits for its node before preempting again
# The handler kinds a call is timed by (``ascend_scheduler_decision_seconds{kind}``); ``none``
# for a call that chose no handler (a malformed body, a Volcano session verb).
NO_NPU, VNPU_DYNAMIC, VNPU_STATIC, GANG, CHIPS, NO_KIND = (
    "no_npu",
    "vnpu_dynamic",
    "vnpu_static",
    "gang",
    "chips",
    "none",
)


class NotLive(BadPod):
    """The pod a call names is not the cluster's: gone, of another UID, or not readable now
    (``lasting`` False: a later call may find it)."""

    def __init__(self, reason: str, *, lasting: bool) -> None:
        super().__init__(reason)
        self.lasting = lasting


class BindRefused(Exception):
    """``/bind`` for a pod this service did not place there: not the live pod (UID), another
    scheduler's, asking no NPUs, or a node that did not pass this service's filter for it."""


@dataclass(frozen=True, slots=True)
class Decided:
    """A filter's verdicts: the passing nodes, the failed (preemption may help) and the never
    (it cannot), and how many of the names asked were looked at."""

    passing: list[str]
    failed: dict[str, str]
    never: dict[str, str]
    asked: int


class Extender:
    """The verbs of both callers, each answered by the handler of the pod's kind
    (``kinds``), chosen once per call; the state they share is ``state``."""

    def __init__(
        self,
        gateway: KubeGateway,
        policy: Policy = DEFAULT_POLICY,
        clock: Callable[[], float] = time.time,
        *,
        profiles: frozenset[str] = DEFAULT_PROFILES,
        filter_best: bool = False,
        **settings: Any,
    ) -> None:
        self.state = ExtenderState(gateway, policy, clock, **settings)
        self.profiles = profiles  # the schedulerNames whose pods /bind binds
        # kube-scheduler's /filter answers only the nodes of the best score (``filter``).
        self.filter_best = filter_best
        # A bind is refused unless its node passed the filter lately (as long as a gang waits).
        self.passes = FilterPasses(self.state.gangs.ttl)
        self._no_npu = NoNpu()
        self._static = StaticVnpu()
        self._chips = Chips(self.state)
        self._gang = GangMember(self.state)
        self._dynamic = DynamicVnpu(self.state)
        # (pod UID, nominated node) → when preempt first saw the pod nominated there.
        self._nominated: dict[tuple[str, str], float] = {}
        self._call = threading.local()  # the kind this thread's call chose (``call_kind``)

    def begin_call(self) -> None:
        """A call starts on this thread: no kind chosen yet."""
        self._call.kind = NO_KIND

    def call_kind(self) -> str:
        """The kind of the last handler this thread's call chose (``NO_KIND``: none)."""
        return str(getattr(self._call, "kind", NO_KIND))

    def _kind(self, request: PodRequest) -> Kind:
        name, kind = self._kind_of(request)
        self._call.kind = name
        return kind

    def _kind_of(self, request: PodRequest) -> tuple[str, Kind]:
        if request.npu == 0:
            return NO_NPU, self._no_npu
        if request.dynamic:
            return VNPU_DYNAMIC, self._dynamic
        if request.static:
            return VNPU_STATIC, self._static
        if request.gang:
            return GANG, self._gang
        return CHIPS, self._chips

    # ---- kube-scheduler verbs ----------------------------------------------------------

    def live(self, claimed: Obj) -> PodView:
        """The pod a call names (namespace, name, UID), as the cluster has it: the watch
        cache's view, or one GET when the cache lacks it or shows another UID (the watch
        lags); NotLive when the cluster's pod is gone or another. The pod in the body is
        believed only about a pod asking no NPUs, of no gang, that the cache does not keep:
        every node passes for it and it is never bound here. Everything the verbs decide for
        an NPU pod (its request, its job, its constraints) is the cluster's, so a caller that
        sends a pod of its own making gains nothing."""
        meta = claimed.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
        uid, key = str(meta.get("uid") or ""), f"{namespace}/{name}"
        with self.state.lock:
            cached = self.state.live.get(key)
        if cached is not None and cached.uid == uid:
            return cached
        if cached is None:
            view = pod_view(claimed)
            if not view.npu_limit and view.group is None:
                return view
        try:
            live = pod_view(self.state.gateway.get_pod(namespace, name))
        except NotFound:
            raise NotLive(f"the pod {key} is not in the cluster", lasting=True) from None
        except KubeError as failed:
            raise NotLive(f"the pod {key} could not be read: {failed}", lasting=False) from None
        if live.uid != uid:
            raise NotLive(f"the cluster's pod {key} has another UID", lasting=True)
        return live

    def filter(
        self,
        args: Mapping[str, Any] | ExtenderArgs,
        *,
        any_rank: bool = False,
        best: bool = False,
    ) -> ExtenderFilterResult:
        """kube-scheduler's filter: the passing nodes, and why each other one fails:
        ``FailedAndUnresolvableNodes`` for a node that can never host the pod (another chip
        kind or accelerator type, not an NPU node, a request no node can serve, one its
        nodeSelector, required node affinity or tolerations keep it off), so that
        preemption evicts nothing there; ``FailedNodes`` for one that may once it frees
        chips. A pod asking no NPU passes everywhere (without ``managedResources``,
        kube-scheduler and Volcano send every pod). The pod decided for is the cluster's
        (``live``); the body names it. ``any_rank``: a gang member passes every node its
        gang still has a free place on, whatever the rank (Volcano's predicate error cache
        gives a node's refusal of one pod to every pod of its task: its ``allocate``
        action, volcano-sh/volcano ``pkg/scheduler/util/predicate_helper.go``).

        ``best``: of the passing nodes only those ``prioritize`` would score highest pass,
        so that kube-scheduler needs no prioritize call: a round trip less inside its
        one-pod-at-a-time cycle (``pkg/scheduler/schedule_one.go`` calls the extenders in
        it), which measured 1.7 × its throughput (docs/results.md). Its own scores then
        choose among those nodes, as they choose among our ties when it calls prioritize;
        the other passing nodes are left out of the answer, in neither failure map (the pod
        schedules: kube-scheduler records no reason for them)."""
        pod, candidates = extender_args(args)
        decided = self.decide(pod, candidates.names, any_rank=any_rank, best=best)
        return candidates.answer(decided.passing, decided.failed, decided.never)

    def decide(
        self,
        pod: Obj,
        names: list[str],
        *,
        any_rank: bool = False,
        best: bool = False,
        enough: int | None = None,
    ) -> Decided:
        """``filter``'s verdicts on ``names``. ``enough``: the names are asked in their order
        only until that many pass (kube-scheduler's sampling, for the plugin's ``place``); the
        rest are in no map, and ``asked`` says how many were."""
        try:
            request = pod_request(self.live(pod), self.state.job_of)
            if any_rank and request.rank is not None:
                request = replace(request, rank=None)
        except NotLive as gone:
            every = dict.fromkeys(names, str(gone))
            lasting = gone.lasting
            return Decided([], {} if lasting else every, every if lasting else {}, len(names))
        except Unready as later:
            return Decided([], dict.fromkeys(names, str(later)), {}, len(names))
        except BadPod as bad:
            return Decided([], {}, dict.fromkeys(names, str(bad)), len(names))
        kind = self._kind(request)
        with self.state.lock:
            decided = self._verdicts(request, kind, names, enough)
            passing = decided.passing
            if best and len(passing) > 1:
                passing = kind.top(request, passing)
            if request.npu:  # only NPU pods are ever bound here
                self.passes.record(request.uid, passing, self.state.clock())
        return replace(decided, passing=passing)

    def _verdicts(
        self, request: PodRequest, kind: Kind, names: list[str], enough: int | None
    ) -> Decided:
        """The kind's verdicts, under the lock; with ``enough``, asked in chunks of what is
        still wanted (at least ``MIN_FEASIBLE``: each ask has a cost of its own)."""
        size = len(names) if enough is None else max(enough, MIN_FEASIBLE)
        passing, failed, never = self._chunk(request, kind, names[:size])
        asked = min(size, len(names))
        while enough is not None and len(passing) < enough and asked < len(names):
            size = max(enough - len(passing), MIN_FEASIBLE)
            found, refused, ruled_out = self._chunk(request, kind, names[asked : asked + size])
            asked += size
            passing += found
            failed |= refused
            never |= ruled_out
        return Decided(passing, failed, never, min(asked, len(names)))

    def _chunk(self, request: PodRequest, kind: Kind, names: list[str]) -> Verdicts:
        # The rules kube-scheduler's NodeAffinity and TaintToleration plugins applied before
        # calling: an honest caller sends no node they rule out.
        misfits = self.state.fits.misfits(request.constraints, names) if request.npu else {}
        fitting = [n for n in names if n not in misfits] if misfits else names
        passing, failed, never = kind.filter(request, fitting)
        return passing, failed, {**never, **misfits} if misfits else never

    def prioritize(self, args: Mapping[str, Any] | ExtenderArgs) -> list[HostPriority]:
        pod, candidates = extender_args(args)
        names = candidates.names
        try:
            request = pod_request(self.live(pod), self.state.job_of)
        except BadPod:
            return [HostPriority(n, 0) for n in names]
        kind = self._kind(request)
        with self.state.lock:
            return kind.prioritize(request, names)

    def scores(self, pod: Obj, names: list[str]) -> dict[str, float]:
        """The policy's raw scores of the nodes that can host the pod (Volcano sums them);
        the cluster's pod (``live``), BadPod when it is not."""
        request = pod_request(self.live(pod), self.state.job_of)
        kind = self._kind(request)
        with self.state.lock:
            return kind.scores(request, names)

    def preempt(self, args: Mapping[str, Any]) -> ExtenderPreemptionResult:
        """kube-scheduler's preempt verb: keep only the candidate nodes where freeing the
        victims could help, with the victims kube-scheduler chose. Its dry run
        (``framework/preemption/preemption.go``) counts chips with the in-tree
        NodeResourcesFit alone: a full node never reached the filter, so a request no node can
        serve (or a node of another kind) would otherwise cost a victim for nothing (seen on
        the real kube-scheduler). The nodes the filter marks unresolvable are dropped; the
        rest keep their victims, which the next cycle's filter checks by ring.

        A pod already nominated to a node by an earlier preemption evicts nothing elsewhere
        for ``NOMINATION_GRACE`` seconds, unless that node can never host it: kube-scheduler
        lets it preempt again as soon as its victims are gone (``PodEligibleToPreemptOthers``
        looks only for victims still terminating), and the deletion it saw may not have reached
        this view yet; a second victim would then die for chips already free (seen once on the
        real kube-scheduler under load)."""
        pod, victims = preemption_args(args)
        names = list(victims)
        try:
            request = pod_request(self.live(pod), self.state.job_of)
        except BadPod:  # gone, another, unreadable or not ready: nothing placeable now
            return ExtenderPreemptionResult({})  # evict nothing
        if self._waits(request, _nominated(pod)):
            return ExtenderPreemptionResult({})
        kind = self._kind(request)
        with self.state.lock:
            misfits = self.state.fits.misfits(request.constraints, names) if request.npu else {}
            _, _, never = kind.filter(request, [n for n in names if n not in misfits])
            never = {**never, **misfits}
        return ExtenderPreemptionResult({n: victims[n] for n in names if n not in never})

    def waits(self, pod: Obj) -> str:
        """Why the pod, nominated to a node by an earlier preemption, evicts nothing now (the
        rule of ``preempt``, for the plugin, whose PostFilter runs before kube-scheduler's
        preemption); "" when it may preempt."""
        nominated = _nominated(pod)
        if not nominated:
            return ""
        try:
            request = pod_request(self.live(pod), self.state.job_of)
        except BadPod:
            return ""
        if not self._waits(request, nominated):
            return ""
        return f"waiting for {nominated}, where an earlier preemption made room for it"

    def _waits(self, request: PodRequest, nominated: str) -> bool:
        """Whether a pod nominated to ``nominated`` is within its grace there, a node that
        can host it."""
        if not nominated:
            return False
        kind = self._kind(request)
        with self.state.lock:
            misfit = self.state.fits.misfit(request.constraints, nominated) if request.npu else ""
            _, _, never = kind.filter(request, [nominated])
        if misfit or nominated in never:
            return False
        return self._awaiting(request.uid, nominated)

    def _awaiting(self, uid: str, node: str) -> bool:
        """Whether a pod nominated to ``node`` is still within its grace there."""
        now = self.state.clock()
        self._nominated = {
            k: since for k, since in self._nominated.items() if now - since < 2 * NOMINATION_GRACE
        }
        return now - self._nominated.setdefault((uid, node), now) < NOMINATION_GRACE

    def bind(self, args: Mapping[str, Any]) -> ExtenderBindingResult:
        """kube-scheduler's bind: the chips chosen and written with the Binding. BindRefused
        (nothing written) unless the live pod is the one named (``PodUID``), of one of
        ``profiles``, asks NPUs, ``Node`` suits its nodeSelector, required node affinity and
        tolerations, and passed this service's filter for it lately. The live pod is the
        watch cache's when it has that UID (what decides a bind, its scheduler, request and
        constraints, cannot change on a pod; a pod deleted since fails the Binding's POST),
        else one GET: one write per bind, no read."""
        binding = binding_args(args)
        namespace, name, uid, node = (
            binding.PodNamespace,
            binding.PodName,
            binding.PodUID,
            binding.Node,
        )
        if not uid:
            raise BadRequest("PodUID is required: a bind names the very pod it binds")
        request = self._bindable(namespace, name, uid, node, "bind")
        if isinstance(request, str):
            return ExtenderBindingResult(request)

        def write(annotations: dict[str, str]) -> None:
            self.state.gateway.bind_pod(namespace, name, uid, node, annotations)

        return ExtenderBindingResult(self._give(request, node, write, ("bind", "bound", "to")))

    def hold(self, namespace: str, name: str, uid: str, node: str) -> tuple[str, dict[str, str]]:
        """The kube-scheduler plugin's reserve: ``bind``'s checks and choice (BindRefused as
        there), nothing written: the annotations are answered for the plugin's Binding to
        carry, and the chips stay assumed until the pod is seen bound with them, gone, or
        given back by ``release``. An error or "", and the annotations."""
        request = self._bindable(namespace, name, uid, node, "reserve")
        if isinstance(request, str):
            return request, {}
        carried: dict[str, str] = {}
        return self._give(request, node, carried.update, ("reserve", "reserved", "on")), carried

    def _bindable(
        self, namespace: str, name: str, uid: str, node: str, verb: str
    ) -> PodRequest | str:
        """The live pod's request, checked (``_may_bind``), or why it could not be read."""
        try:
            pod = self._live_pod(namespace, name, uid)
            request = pod_request(pod, self.state.job_of)
        except (KubeError, BadPod) as failed:
            return f"{verb} {namespace}/{name}: {failed}"
        self._may_bind(pod, request, uid, node)
        return request

    def _live_pod(self, namespace: str, name: str, uid: str) -> PodView:
        """The cluster's pod ``namespace/name``: the watch cache's view when it shows ``uid``,
        else read (KubeError when it cannot be)."""
        with self.state.lock:
            cached = self.state.live.get(f"{namespace}/{name}")
        if cached is not None and cached.uid == uid:
            return cached
        return pod_view(self.state.gateway.get_pod(namespace, name))

    def _another_scheduler(self, pod: PodView) -> str:
        """Why the pod is not ours to place ("" when it is): another schedulerName."""
        scheduler = pod.scheduler
        return (
            ""
            if scheduler in self.profiles
            else f"the pod is for scheduler {quoted(scheduler)}, not ours"
        )

    def _may_bind(self, pod: PodView, request: PodRequest, uid: str, node: str) -> None:
        what = f"bind {request.key} to {node}"
        if request.uid != uid:
            raise BindRefused(f"{what}: the cluster's pod has another UID")
        if why := self._another_scheduler(pod):
            raise BindRefused(f"{what}: {why}")
        if request.npu == 0:
            # Counted from the containers' limits: a pod asking NPUs only elsewhere (init
            # containers) is no pod this scheduler gives chips to either.
            raise BindRefused(f"{what}: the pod asks no NPUs of its containers")
        with self.state.lock:
            misfit = self.state.fits.misfit(request.constraints, node)
            passed = self.passes.passed(uid, node, self.state.clock())
        if misfit:
            raise BindRefused(f"{what}: {misfit}")
        if not passed:
            raise BindRefused(f"{what}: the node did not pass this service's filter for the pod")

    def annotate(self, pod: Obj, node: str) -> str:
        """Volcano's allocateFunc: choose the chips on ``node`` and write the scheduler
        annotations on the pod (Volcano binds it afterwards). Returns an error or "".

        The pod is the cluster's, not the request's: only the pod the cluster has (same UID),
        with the NPUs it really requests, is given chips; taken from the watch cache when it
        shows that UID, as ``bind`` does, else read (one write an allocation, no read)."""
        return self._allocate(pod, node, carried=None)

    def carry(self, pod: Obj, node: str) -> tuple[str, dict[str, str]]:
        """The adapter's allocateCarried: ``annotate``'s choice, checked as there, but nothing
        written: the annotations are answered for Volcano's Binding to carry (its binder
        sends every annotation of its copy of the pod: volcano-sh/volcano
        ``pkg/scheduler/cache/cache.go`` ``DefaultBinder.Bind``), and the chips stay assumed
        until the pod is seen bound with them, gone, or the gang TTL passed. An error or "",
        and the annotations."""
        carried: dict[str, str] = {}
        return self._allocate(pod, node, carried), carried

    def _allocate(self, pod: Obj, node: str, carried: dict[str, str] | None) -> str:
        """``annotate`` (``carried`` None) or ``carry`` (the annotations put there)."""
        claimed = pod_request(pod, self.state.job_of)
        try:
            live = self._live_pod(claimed.namespace, claimed.name, claimed.uid)
            request = pod_request(live, self.state.job_of)
        except KubeError as failed:
            return f"allocate {claimed.key} on {node}: {failed}"
        if request.uid != claimed.uid:
            return f"allocate {claimed.key} on {node}: the cluster's pod has another UID"
        if why := self._another_scheduler(live):
            return f"allocate {claimed.key} on {node}: {why}"
        if request.npu == 0:
            return f"allocate {claimed.key} on {node}: the pod requests no {claimed.resource}"
        with self.state.lock:
            misfit = self.state.fits.misfit(request.constraints, node)
        if misfit:  # Volcano's own predicates rule it out: only a forged call gets here
            return f"allocate {claimed.key} on {node}: {misfit}"

        def write(annotations: dict[str, str]) -> None:
            if carried is not None:
                carried.update(annotations)
            elif annotations:  # a pre-created vNPU's pod gets none
                self.state.gateway.patch_pod_annotations(
                    request.namespace, request.name, dict(annotations), ""
                )
                with self.state.lock:
                    self.state.annotated[request.key] = (request.uid, tuple(annotations))

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
        kind = self._kind(request)
        with self.state.lock:
            chosen = kind.choose(request, node)
        if isinstance(chosen, str):
            self.state.events.warn(about(request), BIND_REFUSED, f"{what}: {chosen}")
            return f"{what}: {chosen}"
        # One node's writes go out one at a time, each stamped just before it: the kubelet
        # admits pods in the order their bindings reach it, and the device plugin gives a
        # pod the chips of the pending pod with the oldest predicate-time and its count; two
        # binds racing to one node could otherwise land in the other order, and each pod
        # would run on the chips the other records.
        with self.state.writing_to(node):
            annotations = chosen.annotations(int(self.state.clock() * 1_000_000_000))
            if not self.state.fence():
                with self.state.lock:
                    kind.give_back(chosen)
                return f"{what}: this replica no longer leads; nothing was written"
            failed = _write(write, annotations)
        if failed is not None:
            # Nothing was taken for a pre-created vNPU: nothing to keep or give back.
            landed = (
                self._landed(request, chosen.choice, annotations)
                if chosen.taken is not None
                else False
            )
            if landed is None:  # in doubt the chips stay taken, until a view tells
                message = f"{what}: {failed} (its chips stay held until the pod is seen)"
                self.state.events.warn(about(request), BIND_REFUSED, message)
                return message
            if not landed:
                with self.state.lock:
                    kind.give_back(chosen)
                self.state.events.warn(about(request), BIND_REFUSED, f"{what}: {failed}")
                return f"{what}: {failed}"
            log.warning("%s: the API server answered %s, but the pod has its chips", what, failed)
        with self.state.lock:
            self.state.binds += 1
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
            pod = pod_view(self.state.gateway.get_pod(request.namespace, request.name))
        except NotFound:
            return False
        except KubeError:
            return None
        return pod.uid == request.uid and all(
            pod.annotations.get(k) == annotations[k] for k in (*choice, PREDICATE_TIME)
        )

    def unannotate(self, namespace: str, name: str, keys: tuple[str, ...]) -> None:
        """Take annotations ``annotate`` wrote off a pod that was not bound (KubeError)."""
        with contextlib.suppress(NotFound):  # gone: nothing to take off
            self.state.gateway.patch_pod_annotations(namespace, name, dict.fromkeys(keys), "")

    def release(self, pod: Obj) -> tuple[str, ...] | None:
        """Volcano's deallocateFunc: the task leaves the session; what this service gave that
        very pod (same UID) comes back. The annotations ``annotate`` wrote on it, which the
        caller must take off the pod again; None when it gave that pod nothing."""
        request = pod_request(pod, self.state.job_of)
        with self.state.lock:
            uid, written = self.state.annotated.pop(request.key, (request.uid, ()))
            if not self._kind(request).release(request):
                return None
            return written if uid == request.uid else ()


def _nominated(pod: Obj) -> str:
    """The node an earlier preemption nominated the pod to ("" none)."""
    return str((pod.get("status") or {}).get("nominatedNodeName") or "")


def _write(
    write: Callable[[dict[str, str]], None], annotations: dict[str, str]
) -> KubeError | None:
    """The write's error, if it failed."""
    try:
        write(annotations)
    except KubeError as failed:
        return failed
    return None
