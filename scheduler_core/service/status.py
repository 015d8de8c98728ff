"""What the scheduler sees, as text: every NPU node's rings and who holds which chips."""

from __future__ import annotations

from collections.abc import Iterable

from contract.pods import PodView, holders_by_node
from scheduler_core.engine.diagram import LEGEND, node_lines
from scheduler_core.service.cluster_view import Snapshot


def cluster_lines(snapshot: Snapshot, pods: Iterable[PodView]) -> list[str]:
    held = holders_by_node(pods)
    lines = [f"NPU nodes ({LEGEND}):"]
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        lines += node_lines(
            node.name, node.product, node.free, node.unhealthy, held.get(node.name, {})
        )
    for name, reason in sorted(snapshot.left_out.items()):
        lines.append(f"{name:24} left out: {reason}")
    return lines


def cluster_json(snapshot: Snapshot, pods: Iterable[PodView]) -> dict[str, object]:
    """The same as a JSON document: each node's chips and holders, and the nodes left out."""
    held = holders_by_node(pods)
    return {
        "nodes": [
            {
                "name": node.name,
                "product": node.product,
                "free": list(node.free),
                "unhealthy": sorted(node.unhealthy),
                "holders": {str(c): p for c, p in sorted(held.get(node.name, {}).items())},
            }
            for node in sorted(snapshot.nodes, key=lambda n: n.name)
        ],
        "left_out": dict(sorted(snapshot.left_out.items())),
    }
