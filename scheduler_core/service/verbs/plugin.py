"""The verbs of the AscendNPU kube-scheduler plugin (``kube_scheduler_plugin/``), on the same
extender and with the same checks as kube-scheduler's extender verbs:

- ``place``: the filter over the NPU nodes this service knows, sampled as kube-scheduler
  samples its own (with the profile's percentageOfNodesToScore, which the plugin's args
  repeat), answered with the nodes of the best score only (the plugin's PreFilterResult); no
  node list comes in.
- ``reserve``: ``bind``'s checks and choice on the node kube-scheduler chose, the chips held,
  nothing written: the annotations are answered for the plugin's Binding to carry.
- ``unreserve``: the chips ``reserve`` held come back, unless the pod is bound.
- ``waits``: why a pod nominated by an earlier preemption evicts nothing now (``preempt``'s
  rule), asked in PostFilter before kube-scheduler's own preemption.
- ``freed``: how many times a place was freed that kube-scheduler sees no event for
  (``ExtenderState.freed``). ``place`` answers the count as its decision began; the plugin
  polls it and moves each pod it refused at another count back to the active queue
  (kube-scheduler's ``Activate``).

Its bodies are the plugin's own (a v1.Pod as kube-scheduler's client encodes it, a node's
name), answered as small JSON objects; the caller is kube-scheduler's client certificate, as
for the extender verbs (``access``).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

import msgspec

from contract.pods import pod_view
from infra.kube.port import KubeError, NotFound
from scheduler_core.service.verbs.extender import MIN_FEASIBLE, Extender
from scheduler_core.service.wire import BadPod, BadRequest, check_pod, pod_request

log = logging.getLogger(__name__)


class PlaceAnswer(msgspec.Struct):
    NodeNames: list[str]
    Reason: str = ""  # why no node passes, kube-scheduler's way: "3 x why, 2 x why"
    Unresolvable: bool = False  # every node refused for good: no preemption helps
    # ``freed`` as the decision began: the plugin tries a refused pod again once the count
    # it polls differs, so a place freed while the pod was being refused is not missed.
    Freed: int = 0


class ReserveAnswer(msgspec.Struct):
    Annotations: dict[str, str] = msgspec.field(default_factory=dict)
    Error: str = ""


class WaitsAnswer(msgspec.Struct):
    Reason: str = ""  # why the pod evicts nothing now ("": it may preempt)


class FreedAnswer(msgspec.Struct):
    Freed: int  # only its changes mean anything (another replica counts from elsewhere)


class PluginArgs(msgspec.Struct):
    Pod: Any = None
    Node: str = ""
    # place: the profile's percentageOfNodesToScore (0: kube-scheduler's adaptive default).
    PercentageOfNodesToScore: int = 0


class PluginVerbs:
    VERBS = ("place", "reserve", "unreserve", "waits", "freed")

    def __init__(self, extender: Extender) -> None:
        self._extender = extender
        self._turn = threading.Lock()
        self._next = 0  # where the next place starts: kube-scheduler's nextStartNodeIndex

    def handle(
        self, verb: str, body: Mapping[str, Any]
    ) -> PlaceAnswer | ReserveAnswer | WaitsAnswer | FreedAnswer:
        try:
            args = msgspec.convert(body, type=PluginArgs)
        except msgspec.ValidationError as bad:
            raise BadRequest(f"not the plugin's {verb} arguments: {bad}") from None
        if verb == "freed":
            with self._extender.state.lock:
                return FreedAnswer(self._extender.state.freed)
        pod = check_pod(args.Pod)
        if verb == "place":
            percentage = args.PercentageOfNodesToScore
            if not 0 <= percentage <= 100:
                raise BadRequest(f"PercentageOfNodesToScore {percentage} is not within 0..100")
            return self._place(pod, percentage)
        if verb == "waits":
            return WaitsAnswer(self._extender.waits(pod))
        if not args.Node:
            raise BadRequest("Node is required")
        if verb == "reserve":
            return self._reserve(pod, args.Node)
        return self._unreserve(pod, args.Node)

    def _place(self, pod: dict[str, Any], percentage: int) -> PlaceAnswer:
        """The filter over the NPU nodes as kube-scheduler samples its own: from where the
        last call stopped, until ``feasible_nodes_to_find`` pass or all were asked; then the
        best of those. Behind the extender the service only ever saw kube-scheduler's sample;
        asking every node cost 13.7 ms a call at 5,000 nodes (docs/results.md)."""
        extender = self._extender
        with extender.state.lock:
            names = extender.state.fits.names()
            freed = extender.state.freed
        if not names:
            return PlaceAnswer([], "no Ascend NPU node is known", Unresolvable=True, Freed=freed)
        with self._turn:
            start = self._next % len(names)
        ordered = names[start:] + names[:start]
        enough = feasible_nodes_to_find(len(names), percentage)
        decided = extender.decide(pod, ordered, best=True, enough=enough)
        with self._turn:
            self._next = start + decided.asked
        if decided.passing:
            return PlaceAnswer(decided.passing)
        reasons = {**decided.never, **decided.failed}
        return PlaceAnswer([], _summary(reasons), Unresolvable=not decided.failed, Freed=freed)

    def _reserve(self, pod: dict[str, Any], node: str) -> ReserveAnswer:
        meta = pod["metadata"]
        namespace = str(meta.get("namespace") or "default")
        # BindRefused (403) as for /bind: a node that did not pass ``place``, another pod.
        error, annotations = self._extender.hold(namespace, str(meta["name"]), _uid(pod), node)
        return ReserveAnswer({} if error else annotations, error)

    def _unreserve(self, pod: dict[str, Any], node: str) -> ReserveAnswer:
        """The chips come back unless the pod is bound: a Binding that failed in answer may
        have landed, and a bound pod's chips are in use (one GET: rare)."""
        extender = self._extender
        try:
            request = pod_request(pod, extender.state.job_of)
        except BadPod as bad:
            return ReserveAnswer(Error=str(bad))
        try:
            live = pod_view(extender.state.gateway.get_pod(request.namespace, request.name))
        except NotFound:
            live = None
        except KubeError as failed:
            return ReserveAnswer(Error=f"unreserve {request.key}: {failed}")
        if live is not None and live.uid == request.uid and live.node:
            return ReserveAnswer(Error=f"unreserve {request.key}: bound to {live.node}")
        extender.release(pod)
        log.info("unreserved %s on %s", request.key, node)
        return ReserveAnswer()


def feasible_nodes_to_find(nodes: int, percentage: int = 0) -> int:
    """kube-scheduler's numFeasibleNodesToFind (kubernetes ``pkg/scheduler/schedule_one.go``):
    it stops filtering once this many nodes fit, and starts the next pod where it stopped.
    ``percentage``: percentageOfNodesToScore, 0 for its adaptive default (50 − nodes/125 %,
    at least 5 %)."""
    if nodes < MIN_FEASIBLE:
        return nodes
    return max(MIN_FEASIBLE, nodes * (percentage or max(5, 50 - nodes // 125)) // 100)


def _uid(pod: dict[str, Any]) -> str:
    uid = pod["metadata"].get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadRequest("Pod.metadata.uid is required: a reservation names the very pod")
    return uid


def _summary(reasons: Mapping[str, str], most: int = 5) -> str:
    """kube-scheduler's way of telling why no node passed: the commonest reasons, counted."""
    counted = Counter(reasons.values()).most_common(most)
    return ", ".join(f"{count} x {why}" for why, count in counted)
