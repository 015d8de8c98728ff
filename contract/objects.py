"""What both sides read off the API server's objects (JSON dicts) besides a pod's view: a
pod's NPU request and a node's InternalIP."""

from __future__ import annotations

from typing import Any

from contract.chip_names import RESOURCE_NAME

Obj = dict[str, Any]
MAX_LIMIT_DIGITS = 4  # no container asks for 10,000 chips


def npu_limit(pod: Obj) -> int:
    """The pod's NPU chips: the sum of its containers' limits (extended resources cannot be
    overcommitted, so limits equal requests). A limit that is not a small whole number
    counts as none: the kubelet would not admit the pod anyway."""
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        if not isinstance(container, dict):
            continue
        limits = (container.get("resources") or {}).get("limits") or {}
        limit = limits.get(RESOURCE_NAME) if isinstance(limits, dict) else None
        if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0:
            total += min(limit, 10**MAX_LIMIT_DIGITS)
        elif isinstance(limit, str) and 0 < len(limit) <= MAX_LIMIT_DIGITS and limit.isascii():
            total += int(limit) if limit.isdigit() else 0
    return total


def node_address(node: Obj) -> str:
    """The node's InternalIP (the rank table's ``server_id``), or "" when it has none."""
    for address in (node.get("status") or {}).get("addresses") or []:
        if isinstance(address, dict) and address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""
