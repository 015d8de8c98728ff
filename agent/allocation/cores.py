"""Dynamic vNPU's Allocate (``huawei.com/npu-core``, ``vnpu-and-inference.md`` §5.1).

The kubelet asks N AI cores. The pod is the pending one on this node whose
``huawei.com/npu-core`` annotation accounts for N cores (``<phy>-<template>``: the template's
cores; ``p1,p2``: whole chips × cores per chip), with the smallest predicate-time. Under one
lock: vNPUs no pod records are destroyed, the pod's vNPU is created through the driver (or
its whole chips checked), and the pod is consumed with its ``AscendReal`` in one patch
guarded by its resourceVersion. A failed patch destroys the vNPU just created.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from agent.allocation.base import AllocationFailed, FailureReason
from agent.allocation.handshake_rules import NOT_FOUND, pending, predicate_time
from agent.allocation.kubelet_requests import ENV_RUNTIME_OPTIONS, ENV_VISIBLE
from agent.chips import DriverError, NodeChips, VirtualDevice
from agent.driver import NpuDriver
from agent.pod_cache import PodCache
from agent.resources import VIRTUAL
from contract.annotations import CONSUMED, KUBELET_ANNOTATION, PREDICATE_TIME, REAL_ANNOTATION
from contract.chip_names import ASCEND310P, InvalidInput, format_chip_list, parse_chip_list
from contract.pods import PodView
from contract.vnpu import (
    NO_NPU_RESOURCE,
    NPU_CORE_RESOURCE,
    NPU_SEGMENT_FAILED,
    CoreChoice,
    parse_core_choice,
    parse_virtual_name,
)
from infra.kube.port import Conflict, KubeError, KubeGateway

log = logging.getLogger(__name__)


def choice_of(pod: PodView) -> CoreChoice | None:
    try:
        return parse_core_choice(pod.annotations.get(NPU_CORE_RESOURCE, ""))
    except InvalidInput:
        return None


def pick(pods: Iterable[PodView], count: int, cores_per_chip: int) -> PodView | None:
    """The pending npu-core pod whose annotation is ``count`` AI cores, oldest first."""
    found = [
        p
        for p in pods
        if pending(p, NPU_CORE_RESOURCE)
        and (choice := choice_of(p)) is not None
        and choice.cores(cores_per_chip) == count
    ]
    return min(found, key=predicate_time) if found else None


def recorded_vnpus(pods: Iterable[PodView]) -> set[int]:
    """vdev ids that live pods' ``AscendReal`` names."""
    used = set()
    for pod in pods:
        if not pod.live:
            continue
        for entry in pod.annotations.get(REAL_ANNOTATION, "").split(","):
            try:
                used.add(parse_virtual_name(entry.strip()).vdev)
            except InvalidInput:
                continue
    return used


def cores_by_chip(pods: Iterable[PodView], cores_per_chip: int) -> dict[str, int]:
    """The kubelet's AI-core IDs live pods hold (their ``kltDev``), each with the chip its
    cores sit on (from ``AscendReal``): a vNPU's all on its chip; whole chips' in the kubelet's
    order, ``cores_per_chip`` per chip, as upstream maps them (``updateDynamicAllocMap``)."""
    held: dict[str, int] = {}
    for pod in pods:
        if not pod.live:
            continue
        ids = [i for i in pod.annotations.get(KUBELET_ANNOTATION, "").split(",") if i]
        real = pod.annotations.get(REAL_ANNOTATION, "")
        if not ids or not real:
            continue
        try:
            chips = [parse_virtual_name(real.split(",")[0]).phy] * len(ids)
        except InvalidInput:
            try:
                whole = parse_chip_list(real, kind=ASCEND310P)
            except InvalidInput:
                continue
            chips = [whole[min(k // cores_per_chip, len(whole) - 1)] for k in range(len(ids))]
        held.update(zip(ids, chips, strict=True))
    return held


def unused(vnpus: Iterable[VirtualDevice], pods: Iterable[PodView]) -> list[VirtualDevice]:
    """vNPUs no live pod records: upstream's ``DestroyNotUsedVNPU``."""
    used = recorded_vnpus(pods)
    return [v for v in vnpus if v.vdev not in used]


class CoreHandshake:
    def __init__(self, gateway: KubeGateway, cache: PodCache, driver: NpuDriver) -> None:
        self._gateway = gateway
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

    def allocate(self, kubelet_ids: list[str], node: NodeChips) -> dict[str, str]:
        pod = pick(self._cache.pods(), len(kubelet_ids), node.ai_cores)
        if pod is None:
            raise AllocationFailed(FailureReason.NO_POD, f"{NOT_FOUND} ({len(kubelet_ids)} cores)")
        choice = choice_of(pod)
        assert choice is not None, "pick keeps readable choices only"
        self.destroy_unused()
        with self.lock:
            if choice.template is None:
                return self._whole(pod, choice, kubelet_ids, node)
            try:
                vnpu = self._driver.create_vnpu(choice.chips[0], choice.template)
            except DriverError as failed:
                raise AllocationFailed(
                    FailureReason.CHIPS_REFUSED, f"{NPU_SEGMENT_FAILED}: {failed}"
                ) from None
            self.created += 1
            real = vnpu.name(node.kind).real
            try:
                self._consume(pod, real, kubelet_ids)
            except AllocationFailed:
                self._driver.destroy_vnpu(vnpu)
                self.destroyed += 1
                raise
            log.info("pod %s gets vNPU %s (%d AI cores)", pod.key, real, len(kubelet_ids))
            return {ENV_VISIBLE: str(vnpu.vdev), ENV_RUNTIME_OPTIONS: VIRTUAL}

    def _whole(
        self, pod: PodView, choice: CoreChoice, kubelet_ids: list[str], node: NodeChips
    ) -> dict[str, str]:
        healthy = {c.id for c in node.chips if c.healthy} - {v.phy for v in node.vnpus}
        lacking = [c for c in choice.chips if c not in healthy]
        if lacking:
            raise AllocationFailed(
                FailureReason.CHIPS_REFUSED,
                f"{NO_NPU_RESOURCE}: {pod.key} chip {lacking[0]} is missing, unhealthy or cut",
            )
        self._consume(pod, format_chip_list(choice.chips, node.kind), kubelet_ids)
        return {ENV_VISIBLE: ",".join(str(c) for c in choice.chips), ENV_RUNTIME_OPTIONS: ""}

    def _consume(self, pod: PodView, real: str, kubelet_ids: list[str]) -> None:
        written = {
            PREDICATE_TIME: CONSUMED,
            REAL_ANNOTATION: real,
            KUBELET_ANNOTATION: ",".join(kubelet_ids),
        }
        try:
            updated = self._gateway.patch_pod_annotations(
                pod.namespace, pod.name, written, pod.resource_version
            )
        except Conflict:
            raise AllocationFailed(
                FailureReason.NO_POD, f"{NOT_FOUND}: {pod.key} changed meanwhile"
            ) from None
        except KubeError as failed:
            raise AllocationFailed(FailureReason.API_ERROR, f"API server: {failed}") from None
        self._cache.apply(updated)
