"""Dynamic vNPU's Allocate (``huawei.com/npu-core``, ``vnpu-and-inference.md`` §5.1), through
the one handshake (``handshake.Handshake``).

The kubelet asks N AI cores. The pod is the pending one on this node whose
``huawei.com/npu-core`` annotation accounts for N cores (``<phy>-<template>``: the template's
cores; ``p1,p2``: whole chips × cores per chip), with the smallest predicate-time. Under one
lock: vNPUs no pod records are destroyed, the pod's vNPU is created through the driver (or
its whole chips checked), and the pod is consumed with its ``AscendReal`` in one patch
guarded by its resourceVersion. A failed patch destroys the vNPU just created; a conflict
decides again, as for chips.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agent.allocation.base import AllocationFailed, FailureReason
from agent.allocation.handshake import WAIT_FOR_POD, Handshake
from agent.allocation.handshake_rules import NOT_FOUND, consumed_record
from agent.pod_cache import PodCache
from chip_drivers.chips import DriverError, NodeChips, VirtualDevice
from chip_drivers.fake import NpuDriver
from contract.chip_names import format_chip_list
from contract.pods import PodView
from contract.vnpu import NO_NPU_RESOURCE, NPU_CORE_RESOURCE, NPU_SEGMENT_FAILED, CoreChoice
from infra.events import EventRecorder
from infra.kube.port import KubeGateway

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CoreGrant:
    """What a container asking AI cores gets: one vNPU (its vdev id), or whole chips."""

    vnpu: int | None = None
    chips: tuple[int, ...] = ()


def recorded_vnpus(pods: Iterable[PodView]) -> set[int]:
    """vdev ids that live pods' ``AscendReal`` names."""
    return {p.vnpu.vdev for p in pods if p.live and p.vnpu is not None}


def unused(vnpus: Iterable[VirtualDevice], pods: Iterable[PodView]) -> list[VirtualDevice]:
    """vNPUs no live pod records: upstream's ``DestroyNotUsedVNPU``."""
    used = recorded_vnpus(pods)
    return [v for v in vnpus if v.vdev not in used]


def cores_by_chip(pods: Iterable[PodView], cores_per_chip: int) -> dict[str, int]:
    """The kubelet's AI-core IDs live pods hold (their ``kltDev``), each with the chip its
    cores sit on (from ``AscendReal``): a vNPU's all on its chip; whole chips' in the kubelet's
    order, ``cores_per_chip`` per chip, as upstream maps them (``updateDynamicAllocMap``)."""
    held: dict[str, int] = {}
    for pod in pods:
        ids = pod.kubelet_cores
        if not pod.live or not ids:
            continue
        if pod.vnpu is not None:
            held.update(dict.fromkeys(ids, pod.vnpu.phy))
        elif pod.recorded:
            whole = pod.recorded
            held.update(
                (i, whole[min(k // cores_per_chip, len(whole) - 1)]) for k, i in enumerate(ids)
            )
    return held


def core_claim(cores_per_chip: int) -> Callable[[PodView], int | None]:
    """How many AI cores a pod's ``huawei.com/npu-core`` claim is."""

    def size(pod: PodView) -> int | None:
        choice = pod.core_choice
        return None if choice is None else choice.cores(cores_per_chip)

    return size


class CoreHandshake:
    def __init__(
        self,
        gateway: KubeGateway,
        cache: PodCache,
        driver: NpuDriver,
        wait_for_pod: float = WAIT_FOR_POD,
        events: EventRecorder | None = None,
    ) -> None:
        self._shake = Handshake(gateway, cache, wait_for_pod, events)
        self._cache = cache
        self._driver = driver
        self.lock = threading.Lock()  # one create or destroy at a time on this node
        self.created = self.destroyed = 0

    def destroy_unused(self) -> int:
        """Destroy the vNPUs no pod records (Allocate does it first; the upkeep loop too)."""
        if not self._cache.synced:
            return 0
        with self.lock:
            gone = 0
            for vnpu in unused(self._driver.list_vnpus(), self._cache.pods()):
                try:
                    self._driver.destroy_vnpu(vnpu)
                except DriverError as failed:
                    log.warning("vNPU %s not destroyed: %s", vnpu.vdev, failed)
                    continue
                log.info("destroyed vNPU %s on chip %s (no pod uses it)", vnpu.vdev, vnpu.phy)
                gone += 1
            self.destroyed += gone
            return gone

    def held_cores(self, node: NodeChips) -> dict[str, int]:
        """The kubelet's AI-core IDs that live pods hold, each with its chip."""
        return cores_by_chip(self._cache.pods(), node.ai_cores)

    def give_cores(self, kubelet_ids: list[str], node: NodeChips) -> CoreGrant:
        """The pending pod's vNPU created, or its whole chips checked; the pod consumed."""
        count = len(kubelet_ids)

        def not_found() -> AllocationFailed:
            return AllocationFailed(FailureReason.NO_POD, f"{NOT_FOUND} ({count} cores)")

        def realize(pod: PodView) -> tuple[CoreGrant, dict[str, str], Callable[[], None]]:
            choice = pod.core_choice
            assert choice is not None, "a pending pod's claim was read"
            if choice.template is None:
                return self._whole(pod, choice, kubelet_ids, node)
            try:
                vnpu = self._driver.create_vnpu(choice.chips[0], choice.template)
            except DriverError as failed:
                raise AllocationFailed(
                    FailureReason.CHIPS_REFUSED, f"{NPU_SEGMENT_FAILED}: {failed}"
                ) from None
            self.created += 1

            def undo() -> None:
                self._driver.destroy_vnpu(vnpu)
                self.destroyed += 1

            written = consumed_record(vnpu.name(node.kind).real, kubelet_ids)
            return CoreGrant(vnpu=vnpu.vdev), written, undo

        self.destroy_unused()
        with self.lock:
            pod, grant = self._shake.run(
                NPU_CORE_RESOURCE, count, core_claim(node.ai_cores), realize, not_found
            )
        log.info("pod %s gets %s (%d AI cores)", pod.key, pod_record(grant, node), count)
        return grant

    def _whole(
        self, pod: PodView, choice: CoreChoice, kubelet_ids: list[str], node: NodeChips
    ) -> tuple[CoreGrant, dict[str, str], Callable[[], None]]:
        healthy = {c.id for c in node.chips if c.healthy} - {v.phy for v in node.vnpus}
        lacking = [c for c in choice.chips if c not in healthy]
        if lacking:
            raise AllocationFailed(
                FailureReason.CHIPS_REFUSED,
                f"{NO_NPU_RESOURCE}: {pod.key} chip {lacking[0]} is missing, unhealthy or cut",
            )
        written = consumed_record(format_chip_list(choice.chips, node.kind), kubelet_ids)
        return CoreGrant(chips=choice.chips), written, lambda: None


def pod_record(grant: CoreGrant, node: NodeChips) -> str:
    if grant.vnpu is not None:
        return f"vNPU {grant.vnpu}"
    return format_chip_list(grant.chips, node.kind)
