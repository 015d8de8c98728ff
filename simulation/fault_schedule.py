"""A robustness run's faults, drawn from a seed, written out and read back for a replay."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

FAULT_KINDS = (
    "api-down",
    "watches-cut",
    "compact",
    "lost-bind",
    "replica-kill",
    "replica-pause",
    "agent-restart",
    "kubelet-restart",
    "chip-fail",
    "hostile",
    "agent-down",
    "noded-unhealthy",
)
FAULTS_UNTIL = 0.6  # of the run: faults strike in this first part, the rest settles


@dataclass(frozen=True, slots=True)
class Fault:
    at: float  # seconds into the run
    kind: str
    target: int  # a node's or a replica's index (modulo their count), a chip
    lasts: float  # seconds, for faults that end


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    seconds: float
    nodes: int  # 910 servers
    faults: tuple[Fault, ...]
    inference_nodes: int  # 310P nodes serving vNPUs and whole chips
    network: bool  # a ToR topology and SuperPoDs, and gangs asking them

    @staticmethod
    def draw(
        seed: int, seconds: float, nodes: int, inference_nodes: int = 1, network: bool = True
    ) -> Schedule:
        """Faults at random moments over the first part of the run (the rest settles)."""
        rng = random.Random(seed)
        faults = []
        at = 2.0
        while at < seconds * FAULTS_UNTIL:
            kind = rng.choice(FAULT_KINDS)
            faults.append(Fault(round(at, 2), kind, rng.randrange(64), round(rng.uniform(1, 5), 2)))
            at += rng.expovariate(1 / 3.0)  # several may overlap
        return Schedule(seed, seconds, nodes, tuple(faults), inference_nodes, network)

    def dump(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @staticmethod
    def load(path: Path) -> Schedule:
        data = json.loads(path.read_text())
        faults = tuple(Fault(**f) for f in data.pop("faults"))
        # Schedules written before the run had inference nodes, switches and SuperPoDs.
        data.setdefault("inference_nodes", 0)
        data.setdefault("network", False)
        return Schedule(faults=faults, **data)
