"""What the scheduler sees, as text: every NPU node's rings and who holds which chips, and
every dynamic-vNPU node's chips with the AI cores and CPUs left on each."""

from __future__ import annotations

from collections.abc import Iterable

from chip_topology.diagram import LEGEND, node_lines
from contract.pods import PodView, holders_by_node
from scheduler_core.engine.vnpu import VChip, VNode
from scheduler_core.service.state.cluster_view import Snapshot


def cluster_lines(snapshot: Snapshot, pods: Iterable[PodView]) -> list[str]:
    held = holders_by_node(pods)
    lines = [f"NPU nodes ({LEGEND}):"]
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        lines += node_lines(
            node.name, node.product, node.free, node.unhealthy, held.get(node.name, {})
        )
    for name, vnode in sorted(snapshot.vnodes.items()):
        chips = ", ".join(_chip_text(vnode, c) for c in vnode.chips)
        lines.append(f"{name:24} {'vNPU':14} {chips}; {vnode.idle} AI cores idle")
    for name, reason in sorted(snapshot.left_out.items()):
        lines.append(f"{name:24} left out: {reason}")
    return lines


def _chip_text(node: VNode, chip: VChip) -> str:
    """``0: 6/8 cores 6/7 cpus`` (``creating`` while a vNPU on it is not created yet)."""
    text = (
        f"{chip.id}: {chip.cores}/{node.cores_per_chip} cores {chip.cpus}/{node.cpus_per_chip} cpus"
    )
    return text if chip.stable else text + " creating"


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
        "vnpu_nodes": [
            {
                "name": name,
                "cores_per_chip": vnode.cores_per_chip,
                "cpus_per_chip": vnode.cpus_per_chip,
                "idle_cores": vnode.idle,
                "chips": [
                    {"id": c.id, "cores": c.cores, "cpus": c.cpus, "creating": not c.stable}
                    for c in vnode.chips
                ],
                "pods": sorted(vnode.pods),
            }
            for name, vnode in sorted(snapshot.vnodes.items())
        ],
        "left_out": dict(sorted(snapshot.left_out.items())),
    }
