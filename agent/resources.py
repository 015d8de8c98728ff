"""The resources a node's agent serves, one plugin server each (``ascend-protocol.md`` §1.2,
``vnpu-and-inference.md`` §4–5), and how each lists its devices and answers Allocate:

- ``ChipDevices``: the chips of the node's kind (``huawei.com/Ascend910``, ``…310``,
  ``…310P``) that carry no vNPU, given by the scheduler's annotation or the kubelet's choice;
- ``StaticVnpus``: pre-created vNPUs of one type (``huawei.com/Ascend310P-2c``), the kubelet's
  choice being final, one per container;
- ``NpuCores``: dynamic vNPU's ``huawei.com/npu-core``, AI cores whose chips or vNPU the
  scheduler's ``huawei.com/npu-core`` annotation names (``allocation.cores``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from agent.allocation.base import Allocator, InvalidRequest
from agent.allocation.cores import CoreGrant
from agent.allocation.kubelet_requests import (
    check_allocate_request,
    check_device_ids,
    container_response,
    device_response,
)
from chip_drivers.chips import HEALTHY, UNHEALTHY, Chip, NodeChips, VirtualDevice
from contract.vnpu import NPU_CORE
from deviceplugin_api.v1beta1 import api_pb2 as dp

log = logging.getLogger(__name__)

VIRTUAL = "VIRTUAL"


class Devices(Protocol):
    """One resource's devices and Allocate answers."""

    @property
    def resource(self) -> str: ...

    def listed(self, node: NodeChips) -> list[dp.Device]: ...

    def answer(self, request: dp.AllocateRequest, node: NodeChips) -> dp.AllocateResponse:
        """The kubelet's Allocate answered: each container's devices."""
        ...

    def preferred(
        self, node: NodeChips, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]: ...


class CoreAllocator(Protocol):
    """Dynamic vNPU's Allocate: the scheduler's choice for a pod asking AI cores, made real
    (a vNPU created, or whole chips)."""

    def give_cores(self, kubelet_ids: list[str], node: NodeChips) -> CoreGrant: ...

    def held_cores(self, node: NodeChips) -> dict[str, int]: ...


def first_available(available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
    """The devices the kubelet must keep, then the first others (any AI core or vNPU of a
    type is as good as another)."""
    kept = list(must_include)[:size]
    return kept + [d for d in available if d not in kept][: size - len(kept)]


def _chips_in_use(node: NodeChips) -> set[int]:
    return {v.phy for v in node.vnpus}


class ChipDevices:
    def __init__(self, allocator: Allocator, ascend_runtime: bool, resource: str) -> None:
        self._allocator = allocator
        self._ascend_runtime = ascend_runtime
        self._resource = resource

    @property
    def resource(self) -> str:
        return self._resource

    def listed(self, node: NodeChips) -> list[dp.Device]:
        cut = _chips_in_use(node)
        return [
            dp.Device(ID=node.device_id(c), health=c.health) for c in node.chips if c.id not in cut
        ]

    def answer(self, request: dp.AllocateRequest, node: NodeChips) -> dp.AllocateResponse:
        answer = dp.AllocateResponse()
        for requested in check_allocate_request(request, node):
            chips = self._allocator.give_chips(requested, node)
            answer.container_responses.append(container_response(chips, self._ascend_runtime))
            log.info(
                "allocated %s (kubelet asked %s)",
                ",".join(node.device_id(c) for c in chips),
                ",".join(node.device_id(c) for c in requested),
            )
        return answer

    def preferred(
        self, node: NodeChips, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        check_device_ids(list(available), node.by_device_id(), "preferred allocation request")
        return self._allocator.preferred(node, available, must_include, size)


def virtual_response(
    vdevs: Sequence[int], ascend_runtime: bool, dev_root: Path = Path("/dev")
) -> dp.ContainerAllocateResponse:
    """A vNPU's answer: its vdev id and the VIRTUAL runtime option; without the runtime, the
    host's ``/dev/vdavinci<v>`` as the container's ``/dev/davinci<v>``."""
    return device_response(vdevs, VIRTUAL, "vdavinci", ascend_runtime, dev_root)


class StaticVnpus:
    """Pre-created vNPUs of one type: the kubelet picks, one per container."""

    def __init__(self, device_type: str, ascend_runtime: bool) -> None:
        self._type = device_type
        self._ascend_runtime = ascend_runtime

    @property
    def resource(self) -> str:
        return self._type

    def _mine(self, node: NodeChips) -> dict[str, tuple[VirtualDevice, Chip]]:
        chips = {c.id: c for c in node.chips}
        found = {}
        for vnpu in node.vnpus:
            name = vnpu.name(node.kind)
            if name.device_type == self._type and vnpu.phy in chips:
                found[name.device_id] = (vnpu, chips[vnpu.phy])
        return found

    def listed(self, node: NodeChips) -> list[dp.Device]:
        return [dp.Device(ID=i, health=c.health) for i, (_, c) in self._mine(node).items()]

    def answer(self, request: dp.AllocateRequest, node: NodeChips) -> dp.AllocateResponse:
        mine = self._mine(node)
        answer = dp.AllocateResponse()
        if not request.container_requests:
            raise InvalidRequest("allocate request has no container requests")
        for c in request.container_requests:
            ids = list(c.devices_ids)
            if len(ids) != 1:
                raise InvalidRequest(f"request more than 1 virtual device, current is {len(ids)}")
            if ids[0] not in mine:
                raise InvalidRequest(f"plugin doesn't have device {ids[0][:60]}")
            vnpu = mine[ids[0]][0]
            answer.container_responses.append(virtual_response([vnpu.vdev], self._ascend_runtime))
            log.info("allocated vNPU %s", ids[0])
        return answer

    def preferred(
        self, node: NodeChips, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        return first_available(available, must_include, size)


def core_ids(node: NodeChips) -> list[tuple[str, Chip]]:
    """``npu-core-<k>``, ``ai_cores`` per chip, k running over the chips in driver order."""
    return [
        (f"{NPU_CORE}-{i * node.ai_cores + k}", chip)
        for i, chip in enumerate(node.chips)
        for k in range(node.ai_cores)
    ]


def unhealthy_core_ids(
    ids: Sequence[str], unhealthy_chips: set[int], cores_per_chip: int, held: Mapping[str, int]
) -> set[str]:
    """Which of the kubelet's AI-core IDs to report unhealthy: as many as the unhealthy chips
    have cores, first the IDs pods hold on those chips, then free IDs in string order, so
    the kubelet's free healthy count is the healthy chips' real free cores (upstream's
    ``getUnhealthyAICore``, ``pkg/server/plugin.go``; upstream takes the free ones in the same
    order, from ``sets.String.List()``)."""
    known = set(ids)
    marked = {i for i, chip in held.items() if chip in unhealthy_chips and i in known}
    left = len(unhealthy_chips) * cores_per_chip - len(marked)
    free = sorted(known - held.keys())
    return marked | set(free[: max(left, 0)])


class NpuCores:
    """Dynamic vNPU: AI cores the kubelet counts; the scheduler's annotation says what the
    container really gets, answered as every device is (with the Ascend runtime, its
    environment; without, the device nodes: ``/dev/vdavinci<vdev>`` for a vNPU)."""

    def __init__(self, cores: CoreAllocator, ascend_runtime: bool) -> None:
        self._cores = cores
        self._ascend_runtime = ascend_runtime

    @property
    def resource(self) -> str:
        return NPU_CORE

    def listed(self, node: NodeChips) -> list[dp.Device]:
        # As many IDs unhealthy as the unhealthy chips have cores, the ones pods hold there
        # first: the kubelet's IDs are not the chips' own (allocation.cores).
        ids = [i for i, _ in core_ids(node)]
        sick = {c.id for c in node.chips if not c.healthy}
        marked = unhealthy_core_ids(ids, sick, node.ai_cores, self._cores.held_cores(node))
        return [dp.Device(ID=i, health=UNHEALTHY if i in marked else HEALTHY) for i in ids]

    def answer(self, request: dp.AllocateRequest, node: NodeChips) -> dp.AllocateResponse:
        known = dict(core_ids(node))
        answer = dp.AllocateResponse()
        if not request.container_requests:
            raise InvalidRequest("allocate request has no container requests")
        for i, c in enumerate(request.container_requests):
            ids = list(c.devices_ids)
            check_device_ids(ids, known, f"container request {i}")
            grant = self._cores.give_cores(ids, node)
            if grant.vnpu is not None:
                response = virtual_response([grant.vnpu], self._ascend_runtime)
            else:
                response = device_response(grant.chips, "", "davinci", self._ascend_runtime)
            answer.container_responses.append(response)
        return answer

    def preferred(
        self, node: NodeChips, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        return first_available(available, must_include, size)


def plan(
    node: NodeChips,
    *,
    chips: Allocator,
    ascend_runtime: bool,
    cores: CoreAllocator | None = None,
) -> list[Devices]:
    """The resources to serve: ``npu-core`` alone in dynamic mode (``cores`` given); else
    the physical chips and one resource per pre-created vNPU type."""
    if cores is not None:
        return [NpuCores(cores, ascend_runtime)]
    served: list[Devices] = [ChipDevices(chips, ascend_runtime, node.resource)]
    types = sorted({v.name(node.kind).device_type for v in node.vnpus})
    served += [StaticVnpus(t, ascend_runtime) for t in types]
    return served
