"""The Allocate handshake (``--volcano-type``): the container gets what the scheduler chose.

One shell for every claim the scheduler writes on a pod (chips: ``huawei.com/Ascend910``,
``…310``, ``…310P``; AI cores: ``huawei.com/npu-core``). For an Allocate of N kubelet
devices: take the pending pod of this node whose claim accounts for N devices, with the
smallest predicate-time (from the watched cache, waiting a bounded moment for the cache to
catch up, then listing the node's pods once); make the claim real (check the chips, or
create the vNPU); consume the pod with a resourceVersion precondition, writing its records
in the same patch. A conflict means
someone changed the pod: undo, re-read it and decide again, at most ``MAX_CONFLICTS`` times.
Calls are serialized by the plugin server. Huawei's device plugin: ``pkg/server/plugin.go``
``Allocate`` / ``doWithVolcanoSchedule`` / ``getOldestPod``.

Defence in depth against a pod placed on the node by someone else: each Allocate first lists
the node's pods (the kubelet asks only for a pod it has read from the API server, so the list
shows it; a pod that list does not show was bound later and is not this Allocate's, which an
Allocate for a pod deleted meanwhile would otherwise take, leaving that pod's own Allocate
nothing), and no Allocate of a resource is decided while a pending pod of that resource
carries no scheduler's choice (``handshake_rules.unchosen``): the Allocate may be that pod's,
and it would get the chips another pod was given. After a bounded wait (the kubelet marks a
pod it refused ``Failed`` asynchronously) the Allocate is refused, with a Warning Event on
each such pod, once per version of it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from agent.allocation.base import AllocationFailed, FailureReason
from agent.allocation.handshake_rules import (
    NOT_FOUND,
    ChipsRefused,
    check_chips,
    chip_claim,
    consumed_annotations,
    held_chips,
    misfits,
    pick_pending,
    unchosen,
)
from agent.allocation.kubelet_requests import preferred_chips
from agent.pod_cache import PodCache
from chip_drivers.chips import Chip, NodeChips
from contract.chip_names import chip_name
from contract.pods import PodView
from infra.events import EventRecorder, pod_ref
from infra.kube.port import Conflict, KubeError, KubeGateway, NotFound

log = logging.getLogger(__name__)

COMPONENT = "ascend-npu-agent"

WAIT_FOR_POD = 1.0  # bounded wait for the cache to show the pod (Huawei: 3 × 1 s sleeps)
MAX_CONFLICTS = 5

T = TypeVar("T")


def seen(pods: Iterable[PodView], resource: str) -> str:
    """What the node's pods of ``resource`` were when no pod matched an Allocate, counted by
    why (no names: the message lands in the refused pod's status, which its owner reads)."""
    counts: dict[str, int] = {}
    for pod in pods:
        if pod.resource != resource or pod.npu_limit <= 0:
            continue
        why = (
            "finished"
            if not pod.live
            else "deleting"
            if pod.deleting
            else "refused by the kubelet"
            if pod.reason == "UnexpectedAdmissionError"
            else "without chips"
            if resource not in pod.annotations
            else "consumed"
            if pod.consumed
            else f"waiting for {len(pod.given)}"
        )
        counts[why] = counts.get(why, 0) + 1
    if not counts:
        return f"no pod of {resource} on this node in the cache"
    return "pods of this node: " + ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))


class Undecided(Exception):
    """The claim could not be made real on what the cache showed, and the API server's copy
    of the pod (or of a pod in its way) differed: decide again."""


class Handshake:
    """Find the pending pod, consume it under a precondition, re-read and retry on a
    conflict: the part every claim shares."""

    def __init__(
        self,
        gateway: KubeGateway,
        cache: PodCache,
        wait_for_pod: float = WAIT_FOR_POD,
        events: EventRecorder | None = None,
        instance: str = "",
    ) -> None:
        self.gateway = gateway
        self.cache = cache
        self._wait_for_pod = wait_for_pod
        self.events = events or EventRecorder(gateway, COMPONENT, instance)
        self._warned: dict[str, str] = {}  # uid → the resourceVersion last told of it

    def listed(self) -> list[PodView]:
        """The cache replaced by a fresh list of the node's pods, which it returns (API errors
        refuse)."""
        try:
            return self.cache.reflector.relist()
        except KubeError as failed:
            raise AllocationFailed(FailureReason.API_ERROR, f"API server: {failed}") from None

    def all_chosen(self, resource: str) -> None:
        """Return once no pending pod of ``resource`` lacks the scheduler's choice, waiting a
        bounded moment (then listing once more) for such pods to be chosen or failed;
        otherwise refuse, telling each of them why in an Event."""
        deadline = time.monotonic() + self._wait_for_pod
        listed_again = False
        while strays := unchosen(self.cache.pods(), resource):
            left = deadline - time.monotonic()
            if left > 0:
                self.cache.wait_change(min(left, 0.05))
            elif not listed_again:
                self.listed()
                listed_again = True
            else:
                raise self._not_scheduled(strays, resource)

    def _not_scheduled(self, strays: list[PodView], resource: str) -> AllocationFailed:
        reason = FailureReason.POD_NOT_SCHEDULED_BY_ASCEND
        live = {p.uid for p in self.cache.pods()}
        self._warned = {uid: v for uid, v in self._warned.items() if uid in live}
        for pod in strays:
            if self._warned.get(pod.uid) != pod.resource_version:
                self._warned[pod.uid] = pod.resource_version
                self.events.warn(
                    pod_ref(pod.namespace, pod.name, pod.uid),
                    reason.event_reason,
                    f"{pod.key} asks {resource} on this node without the NPU scheduler's "
                    "choice (bound by another scheduler or created with spec.nodeName): no "
                    f"{resource} is handed out on this node while it waits (pod version "
                    f"{pod.resource_version})",
                )
        keys = ", ".join(p.key for p in strays[:3]) + (" …" if len(strays) > 3 else "")
        return AllocationFailed(
            reason,
            f"{NOT_FOUND}: {keys} asks {resource} without the NPU scheduler's choice; "
            "no Allocate of it is decided while such a pod waits on this node",
        )

    def find(
        self,
        resource: str,
        count: int,
        size: Callable[[PodView], int | None],
        known: frozenset[str] | None = None,
    ) -> PodView | None:
        """The pending pod of ``resource`` whose claim is ``count`` devices (``size``), waiting
        a bounded moment for the cache to show it; only among the pods of UIDs ``known``
        when given."""
        deadline = time.monotonic() + self._wait_for_pod
        while True:
            pod = pick_pending(self._candidates(known), resource, count, size)
            left = deadline - time.monotonic()
            if pod is not None:
                return pod
            if left <= 0:
                return self._find_listed(resource, count, size, known)
            self.cache.wait_change(min(left, 0.05))

    def _candidates(self, known: frozenset[str] | None) -> list[PodView]:
        pods = self.cache.pods()
        return pods if known is None else [p for p in pods if p.uid in known]

    def _find_listed(
        self,
        resource: str,
        count: int,
        size: Callable[[PodView], int | None],
        known: frozenset[str] | None,
    ) -> PodView | None:
        """The cache's watch may lag far behind the kubelet (it was cut, the API server was
        away, this agent just restarted): before refusing, list the node's pods once."""
        try:
            self.cache.reflector.relist()
        except KubeError as failed:
            log.warning(
                "no pending pod of %d %s in the cache, nor a list: %s", count, resource, failed
            )
            return None
        return pick_pending(self._candidates(known), resource, count, size)

    def refresh(self, pod: PodView) -> bool:
        """Re-read a pod into the cache; True when the API server's copy differs from it."""
        try:
            fresh = self.gateway.get_pod(pod.namespace, pod.name)
        except NotFound:
            gone = {"metadata": {"namespace": pod.namespace, "name": pod.name}}
            self.cache.apply(gone, deleted=True)
            return True
        except KubeError as failed:
            raise AllocationFailed(FailureReason.API_ERROR, f"API server: {failed}") from None
        self.cache.apply(fresh)
        return bool(fresh["metadata"].get("resourceVersion") != pod.resource_version)

    def refuse(self, pod: PodView, message: str) -> AllocationFailed:
        """An Allocate refused for ``pod``'s claim, told to its owner as an Event."""
        reason = FailureReason.CHIPS_REFUSED
        self.events.warn(pod_ref(pod.namespace, pod.name, pod.uid), reason.event_reason, message)
        return AllocationFailed(reason, message)

    def run(
        self,
        resource: str,
        count: int,
        size: Callable[[PodView], int | None],
        realize: Callable[[PodView], tuple[T, dict[str, str], Callable[[], None]]],
        not_found: Callable[[], AllocationFailed],
    ) -> tuple[PodView, T]:
        """The handshake: ``realize`` makes the pod's claim real and says what the container
        gets, what to write on the pod and how to undo it; it raises ``Undecided`` to decide
        again, AllocationFailed to refuse. ``not_found``: the failure when no pod waits."""
        # Only a pod that list shows (bound by now) can be the pod this Allocate is for.
        known = frozenset(p.uid for p in self.listed())
        for _ in range(MAX_CONFLICTS):
            self.all_chosen(resource)
            pod = self.find(resource, count, size, known)
            if pod is None:
                raise not_found()
            try:
                result, written, undo = realize(pod)
            except Undecided:
                continue
            try:
                updated = self.gateway.patch_pod_annotations(
                    pod.namespace, pod.name, written, pod.resource_version
                )
            except Conflict:
                undo()
                log.info("pod %s changed while allocating; deciding again", pod.key)
                self.refresh(pod)
                continue
            except KubeError as failed:
                undo()
                raise AllocationFailed(FailureReason.API_ERROR, f"API server: {failed}") from None
            self.cache.apply(updated)
            return pod, result
        raise AllocationFailed(
            FailureReason.NO_POD, f"{NOT_FOUND}: pods kept changing ({MAX_CONFLICTS} conflicts)"
        )


class ChipHandshake:
    """The scheduler's chips (``huawei.com/Ascend910`` and the inference chips): checked to
    exist, be healthy and be held by no other pod; recorded with the rank table."""

    def __init__(
        self,
        gateway: KubeGateway,
        cache: PodCache,
        host_ip: Callable[[], str],
        wait_for_pod: float = WAIT_FOR_POD,
        events: EventRecorder | None = None,
    ) -> None:
        """``host_ip``: the node's InternalIP for the rank table, asked at each Allocate (an
        agent started while the API server was away learns it later)."""
        self._shake = Handshake(gateway, cache, wait_for_pod, events)
        self._host_ip = host_ip

    def give_chips(self, requested: list[Chip], node: NodeChips) -> list[Chip]:
        kubelet_ids = [node.device_id(c) for c in requested]
        cache = self._shake.cache

        def not_found() -> AllocationFailed:
            passed_over = misfits(cache.pods(), len(requested), node)
            if passed_over:  # the pod this Allocate is for, most likely: tell its owner
                return self._shake.refuse(*passed_over[0])
            return AllocationFailed(
                FailureReason.NO_POD,
                f"{NOT_FOUND} (kubelet asked {len(requested)} chips; "
                f"{seen(cache.pods(), node.kind.resource)})",
            )

        def realize(pod: PodView) -> tuple[list[Chip], dict[str, str], Callable[[], None]]:
            try:
                chips = check_chips(pod, node, held_chips(cache.pods(), other_than=pod.key))
            except ChipsRefused as refused:
                stale = self._shake.refresh(pod)
                if refused.holder is not None:
                    holder = next((p for p in cache.pods() if p.key == refused.holder), None)
                    stale = (holder is not None and self._shake.refresh(holder)) or stale
                if stale:
                    raise Undecided from None  # the cache was behind: decide on the API's
                raise self._shake.refuse(pod, str(refused)) from None
            written = consumed_annotations(pod, chips, kubelet_ids, self._host_ip(), node)
            return chips, written, lambda: None

        pod, chips = self._shake.run(
            node.kind.resource, len(requested), chip_claim(node), realize, not_found
        )
        log.info(
            "pod %s gets %s (kubelet asked %s)",
            pod.key,
            ",".join(chip_name(c.id, node.kind) for c in chips),
            ",".join(kubelet_ids),
        )
        return chips

    def preferred(
        self, node: NodeChips, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """The pending pod's own chips when the kubelet may take them all, so the kubelet's
        records name the real chips; otherwise the HCCS-affine choice. The kubelet asks while
        admitting the pod, which it has seen bound: a fresh list of the node's pods shows it,
        and nothing is waited for (a pod bound meanwhile is another pod's)."""
        try:
            listed = self._shake.listed()
        except AllocationFailed:  # the API server away: a preference only
            listed = []
        pod = pick_pending(listed, node.kind.resource, size, chip_claim(node))
        if pod is not None:
            wanted = [chip_name(c, node.kind) for c in pod.given]
            if wanted and set(wanted) <= set(available) and set(must_include) <= set(wanted):
                return wanted
        return preferred_chips(node, available, must_include, size)
