"""How fast the engine decides: one pod over 1,000 / 10,000 nodes, and a round of 1,000 pods.

Each pod takes the path the extender serves: filter over every node (kube-scheduler's
candidates), score the passing ones, bind on the best (``Session.place`` on that node).

Run: ``.venv/bin/python -m benchmarks.placement_speed`` (``make bench`` runs it too).
Targets (issue 2): ≤ 5 ms median for one pod over 10,000 nodes; ≥ 1,000 pods/s for a
round of 1,000 pods on 1,000 nodes. Prints figures; asserts nothing. ``--json FILE`` writes
every pod's time (ms) per policy and size, which ``benchmarks/figures.py`` draws.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from scheduler_core.engine.model import Job, NodeState, Task
from scheduler_core.engine.policies import POLICIES
from scheduler_core.engine.session import Session

SIZES = (1, 1, 1, 1, 2, 4, 8)  # roughly the ITP trace's mix by count, 8N left out


def mixed_cluster(count: int, seed: int) -> list[NodeState]:
    """Nodes of 8 chips with random occupancy; one in 20 has a faulty chip."""
    rng = random.Random(seed)
    nodes = []
    for i in range(count):
        chips = list(range(8))
        rng.shuffle(chips)
        free = sorted(chips[: rng.choice((0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 8))])
        unhealthy = frozenset({rng.randrange(8)}) if rng.random() < 0.05 else frozenset()
        nodes.append(
            NodeState(f"node-{i:05d}", "module910x8", tuple(free), 8 - len(unhealthy), unhealthy)
        )
    return nodes


def serve(session: Session, job: Job, names: list[str]) -> bool:
    """The extender's work for one pod: filter, prioritize, bind on the best node."""
    npu = job.tasks[0].npu
    passing = [n for n, status in session.filter(job, npu, names).items() if status.ok]
    scores = session.score(job, npu, passing)
    if not scores:
        return False
    best = min(scores, key=lambda n: (-scores[n], n))
    return session.place(job, [best]).feasible


def one_pod(nodes: list[NodeState], policy: str, repeats: int) -> tuple[float, list[float]]:
    """(index build ms, each pod's ms in order); each pod is released again."""
    start = time.perf_counter()
    session = Session(nodes, POLICIES[policy])
    built = time.perf_counter() - start
    names = [n.name for n in nodes]
    timings = []
    for i in range(repeats):
        job = Job(f"pod-{i}", "module910x8", (Task("t", SIZES[i % len(SIZES)]),))
        start = time.perf_counter()
        placed = serve(session, job, names)
        timings.append(time.perf_counter() - start)
        if placed:
            session.release_job(job.key)
    return built * 1e3, [t * 1e3 for t in timings]


def round_of_pods(nodes: int, pods: int, policy: str, seed: int) -> tuple[float, int]:
    """(pods/s, pods placed) for one session placing ``pods`` pods one after another."""
    rng = random.Random(seed)
    cluster = [NodeState(f"node-{i:05d}", "module910x8", tuple(range(8)), 8) for i in range(nodes)]
    jobs = [Job(f"pod-{i}", "module910x8", (Task("t", rng.choice(SIZES)),)) for i in range(pods)]
    session = Session(cluster, POLICIES[policy])
    names = [n.name for n in cluster]
    start = time.perf_counter()
    placed = sum(serve(session, job, names) for job in jobs)
    return pods / (time.perf_counter() - start), placed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=301)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", type=Path, help="write every pod's time (ms) here")
    args = parser.parse_args()
    print("one pod (filter + score + place on the best), module910x8 nodes of mixed occupancy")
    samples: dict[str, dict[str, list[float]]] = {}
    for policy in sorted(POLICIES):
        for count in (1_000, 10_000):
            built, timings = one_pod(mixed_cluster(count, args.seed), policy, args.repeats)
            samples.setdefault(policy, {})[str(count)] = [round(t, 4) for t in timings]
            print(
                f"  {policy:8} {count:>6} nodes: index {built:7.1f} ms once, first pod "
                f"{timings[0]:6.2f} ms, then median {statistics.median(timings[1:]):6.3f} ms/pod"
            )
    if args.json is not None:
        command = "python -m benchmarks.placement_speed " + " ".join(
            f"--{k} {v}" for k, v in (("repeats", args.repeats), ("seed", args.seed))
        )
        args.json.write_text(json.dumps({"command": command, "sizes": SIZES, "ms": samples}) + "\n")
    print("round of 1,000 pods (sizes 1,1,1,1,2,4,8) on 1,000 empty nodes")
    for policy in sorted(POLICIES):
        rate, placed = round_of_pods(1_000, 1_000, policy, args.seed)
        print(f"  {policy:8} {rate:8.0f} pods/s ({placed} placed)")


if __name__ == "__main__":
    main()
