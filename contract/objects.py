"""What both sides read off the API server's objects (JSON dicts): a pod's NPU request, its
chips, whether it is live; a node's InternalIP."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from contract.annotations import CHIPS_ANNOTATION, REAL_ANNOTATION
from contract.chip_names import RESOURCE_NAME, InvalidInput, parse_chip_name

Obj = dict[str, Any]
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def live(pod: Obj) -> bool:
    return ((pod.get("status") or {}).get("phase") or "Pending") not in FINISHED_PHASES


def pod_chips(pod: Obj) -> list[int]:
    """The chips a pod holds or has been given; [] when it names none or names them badly."""
    annotations = pod.get("metadata", {}).get("annotations") or {}
    for key in (REAL_ANNOTATION, CHIPS_ANNOTATION):
        text = annotations.get(key, "")
        if text:
            try:
                return [parse_chip_name(name.strip()) for name in text.split(",")]
            except InvalidInput:
                continue
    return []


def holders_by_node(pods: Iterable[Obj]) -> dict[str, dict[int, str]]:
    held: dict[str, dict[int, str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and live(pod):
            meta = pod.get("metadata") or {}
            for chip in pod_chips(pod):
                held.setdefault(node, {})[chip] = f"{meta.get('namespace')}/{meta.get('name')}"
    return held


def npu_limit(pod: Obj) -> int:
    """The pod's NPU chips: the sum of its containers' limits (extended resources cannot be
    overcommitted, so limits equal requests)."""
    total = 0
    for container in pod.get("spec", {}).get("containers", []) or []:
        limit = ((container.get("resources") or {}).get("limits") or {}).get(RESOURCE_NAME)
        if isinstance(limit, int) or (isinstance(limit, str) and limit.isdigit()):
            total += int(limit)
    return total


def node_address(node: Obj) -> str:
    """The node's InternalIP (the rank table's ``server_id``), or "" when it has none."""
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""
