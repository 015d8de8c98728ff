"""What the scheduler sees, as text: every NPU node's rings and who holds which chips."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler_core.cluster_state import Snapshot, live, pod_chips
from scheduler_core.diagram import ring_diagram
from scheduler_core.kube.port import Obj
from scheduler_core.products import product_by_name

LEGEND = "'.' free, 'x' unhealthy, a letter per pod holding chips"


def holders_by_node(pods: Iterable[Obj]) -> dict[str, dict[int, str]]:
    held: dict[str, dict[int, str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and live(pod):
            meta = pod.get("metadata") or {}
            for chip in pod_chips(pod):
                held.setdefault(node, {})[chip] = f"{meta.get('namespace')}/{meta.get('name')}"
    return held


def node_lines(
    name: str,
    product: str,
    free: Iterable[int],
    unhealthy: Iterable[int],
    holders: Mapping[int, str],
) -> list[str]:
    drawing, legend = ring_diagram(product_by_name(product), set(free), set(unhealthy), holders)
    return [f"{name:24} {product:14} {drawing}  " + "  ".join(legend)]


def cluster_lines(snapshot: Snapshot, pods: Iterable[Obj]) -> list[str]:
    held = holders_by_node(pods)
    lines = [f"NPU nodes ({LEGEND}):"]
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        lines += node_lines(
            node.name, node.product, node.free, node.unhealthy, held.get(node.name, {})
        )
    for name, reason in sorted(snapshot.left_out.items()):
        lines.append(f"{name:24} left out: {reason}")
    return lines
