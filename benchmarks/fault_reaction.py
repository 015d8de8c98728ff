"""How fast a chip fault moves a training job's pods, job-level against pod-level rescheduling.

On the simulated cluster (``simulation.cluster``: per node the agent on the fake driver and
a kubelet simulator, the in-memory API server, the scheduler service and kube-scheduler's
stand-in), a 4-pod job of 8-chip pods runs on 4 of 5 nodes. Each seeded fault picks a rank
other than 0 and a chip of its pod, and the benchmark measures, from the moment the fake
driver's state file reports the chip unhealthy:

- ``deviceinfo``: the node's DeviceInfo ConfigMap lists the chip (the agent published it);
- ``deleted``: the scheduler deleted what the job's settings say (every pod with
  ``fault-scheduling: force`` alone, only the faulty pod with ``pod-rescheduling: "on"``);
- ``placed``: the pods made again (the benchmark plays the job's controller the moment they
  are gone) are bound again, the whole job running.

The chip is then healthy again and the job settles before the next fault. Polls every 5 ms.
The stand-in kube-scheduler runs its cycles as fast as they return (``KubeScheduler.cycle``),
so ``placed`` counts the scheduler's own work, not kube-scheduler's backoff.

Run: ``.venv/bin/python -m benchmarks.fault_reaction --faults 20 --seed 1``; prints a table
and, with ``--out FILE``, writes the samples and quantiles as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from contract.deviceinfo import configmap_name, decode
from infra.kube.port import KubeError
from simulation.cluster import SimulatedCluster, simulated_cluster, wait_for
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import pod_object

MODES = {
    "job-level": {"fault-scheduling": "force"},
    "pod-level": {"fault-scheduling": "force", "pod-rescheduling": "on"},
}
STAGES = ("deviceinfo", "deleted", "placed")
RANKS = 4
POLL = 0.005
TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class Sample:
    mode: str
    rank: int
    chip: int
    deviceinfo: float
    deleted: float
    placed: float
    moved: int  # pods deleted and made again


def _submit(cluster: SimulatedCluster, rank: int, labels: dict[str, str], uid: str) -> None:
    pod = pod_object("ns", f"train-{rank}", None, 8)
    pod["metadata"]["uid"] = uid
    pod["metadata"]["labels"] = {"ascend.npu/gang": "train", **labels}
    pod["metadata"]["annotations"].update(
        {"ascend.npu/gang-size": str(RANKS), "hccl/rankIndex": str(rank)}
    )
    cluster.store.put("Pod", pod)


def _uids(cluster: SimulatedCluster) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.store.list_pods(None)[0]}


def _bound(cluster: SimulatedCluster) -> int:
    return sum(1 for p in cluster.store.list_pods(None)[0] if p["spec"].get("nodeName"))


def _node_of(cluster: SimulatedCluster, rank: int) -> str:
    return str(cluster.store.get_pod("ns", f"train-{rank}")["spec"].get("nodeName") or "")


def _published(cluster: SimulatedCluster, node: str, chip: int) -> bool:
    """The node's DeviceInfo lists ``chip`` failed."""
    try:
        data = cluster.store.get_configmap("kube-system", configmap_name(node))["data"]
    except KubeError:
        return False
    info = decode(data)
    return any(chip in chips for chips in (info.unhealthy, info.network_unhealthy))


def _until(condition: Callable[[], bool], what: str) -> float:
    """Poll until ``condition`` holds; the moment it did."""
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {TIMEOUT:.0f} s")
        time.sleep(POLL)
    return time.monotonic()


def _schedule(cluster: SimulatedCluster, scheduler: KubeScheduler) -> None:
    """Cycles until every pod of the job is bound."""

    def placed() -> bool:
        scheduler.cycle()
        cluster.admit()
        return _bound(cluster) == RANKS

    _until(placed, "the job placed")


def run_mode(mode: str, faults: int, seed: int) -> list[Sample]:
    labels = MODES[mode]
    draw = random.Random(seed)
    with simulated_cluster(RANKS + 1) as cluster:
        scheduler = KubeScheduler(cluster)
        for rank in range(RANKS):
            _submit(cluster, rank, labels, f"uid-{rank}-0")
        _schedule(cluster, scheduler)
        return [
            _one_fault(
                cluster,
                scheduler,
                mode,
                rank=draw.randrange(1, RANKS),
                chip=draw.randrange(8),
                generation=n,
            )
            for n in range(1, faults + 1)
        ]


def _one_fault(
    cluster: SimulatedCluster,
    scheduler: KubeScheduler,
    mode: str,
    *,
    rank: int,
    chip: int,
    generation: int,
) -> Sample:
    """Chip ``chip`` of rank ``rank``'s pod fails; the job is placed again; it heals."""
    labels = MODES[mode]
    node = _node_of(cluster, rank)
    before = _uids(cluster)
    start = time.monotonic()
    cluster.nodes[node].write_state(frozenset({chip}))
    published = _until(lambda: _published(cluster, node, chip), "DeviceInfo")
    deleted = _until(lambda: f"train-{rank}" not in _uids(cluster), "deletion")
    # Its controller makes again whatever was deleted, at once (a whole-job restart's other
    # pods go within the same pass; a pod-level one's keep running).
    moved, gone_at = 0, time.monotonic()
    while moved < RANKS and not (mode == "pod-level" and moved) and time.monotonic() - gone_at < 1:
        present = _uids(cluster)
        for r in range(RANKS):
            if f"train-{r}" not in present:
                _submit(cluster, r, labels, f"uid-{r}-{generation}")
                moved += 1
        time.sleep(POLL)
    cluster.reap()
    cluster.service.refresh()
    _schedule(cluster, scheduler)
    placed = time.monotonic()
    kept = {n: u for n, u in _uids(cluster).items() if u == before.get(n)}
    cluster.nodes[node].write_state(frozenset())
    _until(lambda: not _published(cluster, node, chip), "healthy again")
    wait_for(cluster.settled, timeout=10)
    cluster.service.refresh()
    return Sample(
        mode,
        rank,
        chip,
        published - start,
        deleted - start,
        placed - start,
        RANKS - len(kept),
    )


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank quantile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def summary(samples: list[Sample]) -> dict[str, dict[str, float]]:
    """mode → stage → p50 / p99 in milliseconds, and the pods moved per fault."""
    out: dict[str, dict[str, float]] = {}
    for mode in MODES:
        mine = [s for s in samples if s.mode == mode]
        if not mine:
            continue
        row: dict[str, float] = {
            "faults": len(mine),
            "moved": sum(s.moved for s in mine) / len(mine),
        }
        for stage in STAGES:
            values = [getattr(s, stage) * 1000 for s in mine]
            row[f"{stage}_p50_ms"] = round(quantile(values, 0.5), 1)
            row[f"{stage}_p99_ms"] = round(quantile(values, 0.99), 1)
        out[mode] = row
    return out


def table(result: dict[str, dict[str, float]]) -> str:
    head = f"{'':10}{'faults':>7}{'moved':>7}" + "".join(
        f"{stage + ' p50':>16}{stage + ' p99':>16}" for stage in STAGES
    )
    lines = [head]
    for mode, row in result.items():
        cells = "".join(
            f"{row[f'{stage}_p50_ms']:>13.1f} ms{row[f'{stage}_p99_ms']:>13.1f} ms"
            for stage in STAGES
        )
        lines.append(f"{mode:10}{row['faults']:>7.0f}{row['moved']:>7.1f}{cells}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--faults", type=int, default=20, help="faults per mode")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write the samples and quantiles here (JSON)")
    args = parser.parse_args()
    if args.faults < 1:
        parser.error("--faults must be at least 1")
    samples = [s for mode in MODES for s in run_mode(mode, args.faults, args.seed)]
    result = summary(samples)
    print(table(result))
    if args.out is not None:
        body = {"samples": [dataclasses.asdict(s) for s in samples], "summary": result}
        args.out.write_text(json.dumps(body, indent=1) + "\n")


if __name__ == "__main__":
    main()
