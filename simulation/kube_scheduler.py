"""A stand-in for kube-scheduler: the extender over HTTP, one pod at a time (filter,
prioritize, the best node, bind), as kube-scheduler drives an extender."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

from contract.objects import Obj, npu_limit
from simulation.cluster import SimulatedCluster


class KubeScheduler:
    """kube-scheduler's part, against the extender over HTTP: one pod at a time."""

    def __init__(self, cluster: SimulatedCluster) -> None:
        self.cluster = cluster
        self.reasons: dict[str, dict[str, str]] = {}

    def _post(self, verb: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            f"{self.cluster.url}/{verb}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def pending(self) -> list[Obj]:
        pods, _ = self.cluster.store.list_pods(None)
        return [
            p
            for p in pods
            if not (p.get("spec") or {}).get("nodeName")
            and p["status"].get("phase") == "Pending"
            and npu_limit(p) > 0
        ]

    def schedule_one(self, pod: Obj, nodes: list[str]) -> str | None:
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        filtered = self._post("filter", {"Pod": pod, "Nodes": None, "NodeNames": nodes})
        if not filtered.get("NodeNames"):
            self.reasons[key] = filtered.get("FailedNodes") or {}
            return None
        scores = self._post(
            "prioritize", {"Pod": pod, "Nodes": None, "NodeNames": filtered["NodeNames"]}
        )
        best = max(scores, key=lambda s: (s["Score"], -filtered["NodeNames"].index(s["Host"])))[
            "Host"
        ]
        meta = pod["metadata"]
        bound = self._post(
            "bind",
            {
                "PodName": meta["name"],
                "PodNamespace": meta["namespace"],
                "PodUID": meta["uid"],
                "Node": best,
            },
        )
        if bound.get("Error"):
            self.reasons[key] = {best: bound["Error"]}
            return None
        self.reasons.pop(key, None)
        return str(best)

    def cycle(self, settle: Callable[[], None] | None = None) -> int:
        """One pass over the pending pods; returns how many were bound."""
        nodes = sorted(self.cluster.nodes)
        bound = 0
        for pod in self.pending():
            if self.schedule_one(pod, nodes) is not None:
                bound += 1
        if settle is not None:
            settle()
        return bound
