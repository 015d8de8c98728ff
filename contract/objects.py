"""What both sides read off the API server's objects (JSON dicts) besides a pod's view: a
pod's NPU request and a node's InternalIP."""

from __future__ import annotations

from typing import Any

from contract.chip_names import KIND_OF_RESOURCE, RESOURCE_DOMAIN, RESOURCE_NAME
from contract.vnpu import (
    ADMISSION_ERROR,
    NO_NPU_RESOURCE,
    NPU_CORE_RESOURCE,
    NPU_SEGMENT_FAILED,
    is_virtual_type,
)

Obj = dict[str, Any]
MAX_LIMIT_DIGITS = 4  # no container asks for 10,000 chips
MAX_LIMIT = 10_000
# The NPU resources the scheduler chooses chips (or AI cores) for, in the order a node
# offering several is read; a static vNPU type's (the kubelet picks those) is NPU too.
PLACED_RESOURCES = (*KIND_OF_RESOURCE, NPU_CORE_RESOURCE)


def is_npu_resource(name: str) -> bool:
    return name in PLACED_RESOURCES or (
        name.startswith(RESOURCE_DOMAIN) and is_virtual_type(name[len(RESOURCE_DOMAIN) :])
    )


def _count(limit: object) -> int:
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
        return min(limit, MAX_LIMIT)
    if isinstance(limit, str) and 0 < len(limit) <= MAX_LIMIT_DIGITS and limit.isascii():
        return int(limit) if limit.isdigit() else 0
    return 0


def npu_quantity(value: object) -> int | None:
    """An NPU count written as a Kubernetes quantity (``"16"``, or a JSON number): None when
    it is not a whole number of devices."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_LIMIT:
        return value
    if isinstance(value, str) and (value == "0" or _count(value)):
        return _count(value)
    return None


def npu_request(pod: Obj) -> tuple[str, int]:
    """The pod's NPU resource and how many it asks for: the sum of its containers' limits
    (extended resources cannot be overcommitted, so limits equal requests). Upstream's pods
    ask for one NPU resource; the first one named wins. A limit that is not a small whole
    number counts as none: the kubelet would not admit the pod anyway."""
    resource, total = "", 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        if not isinstance(container, dict):
            continue
        limits = (container.get("resources") or {}).get("limits") or {}
        if not isinstance(limits, dict):
            continue
        for name, limit in limits.items():
            if not isinstance(name, str) or not is_npu_resource(name):
                continue
            count = _count(limit)
            if count and resource in ("", name):
                resource, total = name, total + count
    return (resource or RESOURCE_NAME), total


def npu_resources_asked(pod: Obj) -> tuple[str, ...]:
    """Every NPU resource the pod asks anywhere: its containers and init containers (the
    kubelet allocates devices to both), requests or limits, in the order first named. Wider
    than ``npu_request``, which counts what the scheduler places: this is what a pod may be
    handed by an Allocate."""
    spec = pod.get("spec") or {}
    asked: dict[str, None] = {}
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            for kind in ("requests", "limits"):
                amounts = (resources or {}).get(kind) if isinstance(resources, dict) else None
                if isinstance(amounts, dict):
                    asked.update(
                        (name, None)
                        for name, amount in amounts.items()
                        if isinstance(name, str) and is_npu_resource(name) and _count(amount)
                    )
    return tuple(asked)


def npu_limit(pod: Obj) -> int:
    """The pod's NPU count (``npu_request``)."""
    return npu_request(pod)[1]


def vnpu_creation_failed(pod: Obj) -> bool:
    """Whether the kubelet failed an npu-core pod because the agent could not make its vNPU
    (upstream's ``NoNPUResource`` / ``NPUSegmentFailed`` in the admission error)."""
    status = pod.get("status") or {}
    message = str(status.get("message") or "")[:4096]
    return (
        status.get("phase") == "Failed"
        and status.get("reason") == ADMISSION_ERROR
        and npu_request(pod)[0] == NPU_CORE_RESOURCE
        and (NO_NPU_RESOURCE in message or NPU_SEGMENT_FAILED in message)
    )


def node_address(node: Obj) -> str:
    """The node's InternalIP (the rank table's ``host_ip`` and ``server_ip``), or "" when it
    has none."""
    for address in (node.get("status") or {}).get("addresses") or []:
        if isinstance(address, dict) and address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""
