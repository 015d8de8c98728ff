"""What a scheduler did with a case's job (``Outcome``), as the runners observe it and the
reports store it, and the plugin's node scores as vc-scheduler logs them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from testbed.differential.cases import Obj


@dataclass(frozen=True)
class Outcome:
    """What a scheduler did with a case's job: ``placements`` (node index, chips) in the order
    of the pods' names (rank order), or ``reason`` when refused."""

    placed: bool
    placements: tuple[tuple[int, tuple[int, ...]], ...] = ()
    reason: str = ""
    detail: Mapping[str, str] = field(default_factory=dict)
    # The plugin's scores of each pod (rank) it scored, in the order it scored them (its
    # last scoring of a pod), by node index.
    scores: tuple[tuple[int, Mapping[int, float]], ...] = ()
    ranks: tuple[int, ...] = ()  # each pod's ``hccl/rankIndex`` as the plugin wrote it (-1: none)

    def to_json(self) -> Obj:
        answer: Obj = {"placed": self.placed}
        if self.placed:
            answer["placements"] = [{"node": n, "chips": list(c)} for n, c in self.placements]
            if self.ranks:
                answer["ranks"] = list(self.ranks)
        else:
            answer["reason"] = self.reason
        if self.detail:
            answer["detail"] = dict(self.detail)
        if self.scores:
            answer["scores"] = [
                {"pod": rank, "scores": {f"n{n}": v for n, v in sorted(by_node.items())}}
                for rank, by_node in self.scores
            ]
        return answer


def outcome_from_json(raw: Mapping[str, Any]) -> Outcome:
    """An outcome as ``Outcome.to_json`` wrote it."""
    return Outcome(
        bool(raw["placed"]),
        tuple((int(p["node"]), tuple(p["chips"])) for p in raw.get("placements", [])),
        str(raw.get("reason", "")),
        dict(raw.get("detail", {})),
        tuple(
            (int(s["pod"]), {int(n.removeprefix("n")): float(v) for n, v in s["scores"].items()})
            for s in raw.get("scores", [])
        ),
        tuple(int(r) for r in raw.get("ranks", [])),
    )


_SCORES = re.compile(r"batchNodeOrderFn Get task:(\S+) for NPU map\[([^\]]*)\]")


def logged_scores(text: str) -> dict[str, dict[int, dict[int, float]]]:
    """The plugin's NPU scores in a piece of vc-scheduler's log (``plugin/factory.go``
    BatchNodeOrderFn at level 4: ``batchNodeOrderFn Get task:<pod> for NPU map[<node>:<score>
    ...]``), by case key, then pod rank (in the order of each pod's last scoring), then node
    index."""
    found: dict[str, dict[int, dict[int, float]]] = {}
    for task, entries in _SCORES.findall(text):
        key, _, rank = task.rpartition("-p")
        if not rank.isdigit():
            continue
        by_node: dict[int, float] = {}
        for entry in entries.split():
            node, _, score = entry.rpartition(":")
            owner, _, index = node.rpartition("-n")
            if owner == key and index.isdigit():
                by_node[int(index)] = float(score)
        pods = found.setdefault(key, {})
        pods.pop(int(rank), None)  # the last scoring counts, in its place
        pods[int(rank)] = by_node
    return found
