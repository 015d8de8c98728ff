"""The Allocate handshake (``--volcano-type``): the container gets the scheduler's chips.

For an Allocate of N device IDs: take the pending pod of this node with N annotated chips
and the smallest predicate-time (from the watched cache, waiting a bounded moment for the
cache to catch up), check its chips, and consume it with a resourceVersion precondition,
writing AscendReal / kltDev / the rank table in the same patch. A conflict means someone
changed the pod: re-read it and decide again. Calls are serialized by the plugin server.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from agent.allocation.base import AllocationFailed, FailureReason
from agent.allocation.handshake_rules import (
    NOT_FOUND,
    ChipsRefused,
    check_chips,
    consumed_annotations,
    held_chips,
    misfits,
    parse_chips,
    pick_pod,
)
from agent.allocation.kubelet_requests import preferred_chips
from agent.chips import Chip, NodeChips
from agent.pod_cache import PodCache
from contract.chip_names import chip_name
from contract.pods import PodView
from infra.events import EventRecorder
from infra.kube.port import Conflict, KubeError, KubeGateway, NotFound

log = logging.getLogger(__name__)

COMPONENT = "ascend-npu-agent"

WAIT_FOR_POD = 1.0  # bounded wait for the cache to show the pod (Huawei: 3 × 1 s sleeps)
MAX_CONFLICTS = 5


class HandshakeAllocator:
    def __init__(
        self,
        gateway: KubeGateway,
        cache: PodCache,
        server_id: str,
        wait_for_pod: float = WAIT_FOR_POD,
        events: EventRecorder | None = None,
    ) -> None:
        self._gateway = gateway
        self._cache = cache
        self._server_id = server_id
        self._wait_for_pod = wait_for_pod
        self._events = events or EventRecorder(gateway, COMPONENT, server_id)

    def _find(self, count: int, node: NodeChips) -> PodView | None:
        deadline = time.monotonic() + self._wait_for_pod
        while True:
            pod = pick_pod(self._cache.pods(), count, node)
            left = deadline - time.monotonic()
            if pod is not None or left <= 0:
                return pod
            self._cache.wait_change(min(left, 0.05))

    def _refuse(self, pod: PodView, message: str) -> AllocationFailed:
        reason = FailureReason.CHIPS_REFUSED
        self._events.warn(pod, reason.event_reason, message)
        return AllocationFailed(reason, message)

    def _refresh(self, pod: PodView) -> bool:
        """Re-read a pod into the cache; True when the API server's copy differs from it."""
        try:
            fresh = self._gateway.get_pod(pod.namespace, pod.name)
        except NotFound:
            gone = {"metadata": {"namespace": pod.namespace, "name": pod.name}}
            self._cache.apply(gone, deleted=True)
            return True
        except KubeError as failed:
            raise AllocationFailed(FailureReason.API_ERROR, f"API server: {failed}") from None
        self._cache.apply(fresh)
        return bool(fresh["metadata"].get("resourceVersion") != pod.resource_version)

    def allocate(self, requested: list[Chip], node: NodeChips) -> list[Chip]:
        kubelet_ids = [node.device_id(c) for c in requested]
        for _ in range(MAX_CONFLICTS):
            pod = self._find(len(requested), node)
            if pod is None:
                passed_over = misfits(self._cache.pods(), len(requested), node)
                if passed_over:  # the pod this Allocate is for, most likely: tell its owner
                    raise self._refuse(*passed_over[0])
                raise AllocationFailed(
                    FailureReason.NO_POD, f"{NOT_FOUND} (kubelet asked {len(requested)} chips)"
                )
            try:
                chips = check_chips(pod, node, held_chips(self._cache.pods(), other_than=pod.key))
            except ChipsRefused as refused:
                stale = self._refresh(pod)
                if refused.holder is not None:
                    holder = next((p for p in self._cache.pods() if p.key == refused.holder), None)
                    stale = (holder is not None and self._refresh(holder)) or stale
                if stale:
                    continue  # the cache was behind: decide again on what the API server has
                raise self._refuse(pod, str(refused)) from None
            written = consumed_annotations(pod, chips, kubelet_ids, self._server_id, node.kind)
            try:
                updated = self._gateway.patch_pod_annotations(
                    pod.namespace, pod.name, written, pod.resource_version
                )
            except Conflict:
                log.info("pod %s changed while allocating; deciding again", pod.key)
                self._refresh(pod)
                continue
            except KubeError as failed:
                raise AllocationFailed(FailureReason.API_ERROR, f"API server: {failed}") from None
            self._cache.apply(updated)
            log.info(
                "pod %s gets %s (kubelet asked %s)",
                pod.key,
                ",".join(chip_name(c.id, node.kind) for c in chips),
                ",".join(kubelet_ids),
            )
            return chips
        raise AllocationFailed(
            FailureReason.NO_POD, f"{NOT_FOUND}: pods kept changing ({MAX_CONFLICTS} conflicts)"
        )

    def preferred(
        self, node: NodeChips, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """The pending pod's own chips when the kubelet may take them all, so the kubelet's
        records name the real chips; otherwise the HCCS-affine choice. The kubelet asks right
        after admitting the pod, so the same bounded wait for the cache applies."""
        pod = self._find(size, node)
        if pod is not None:
            try:
                text = pod.annotations.get(node.kind.resource, "")
                wanted = [chip_name(c, node.kind) for c in parse_chips(text, pod.key, node.kind)]
            except ChipsRefused:
                wanted = []
            if wanted and set(wanted) <= set(available) and set(must_include) <= set(wanted):
                return wanted
        return preferred_chips(node, available, must_include, size)
