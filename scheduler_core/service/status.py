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
