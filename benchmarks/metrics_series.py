"""How many series each component exposes, and what one scrape costs, at a cluster's size
(default 5,000 nodes of 8 chips, 50,000 pods): counted from the exposition each component
really writes, not estimated.

- the scheduler service: the real service (``SchedulerService`` over an in-memory API
  server) after its first read of the whole cluster, scraped as Prometheus does;
- the agent and the DRA driver: one node's registry (8 chips, its share of the pods, every
  chip held), times the nodes for the cluster's total.

``python -m benchmarks.metrics_series [--nodes N] [--pods N]``; docs/operations.md quotes it.
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass

from agent.deviceinfo_publisher import configmap
from agent.metrics import AgentMetrics, ChipReadings
from chip_drivers.chips import Chip, NodeChips
from contract.deviceinfo import DeviceInfo
from dra_driver.metrics import DraMetrics, Readings
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.memory import MemoryCluster, pod_object

CHIPS = 8


@dataclass(frozen=True, slots=True)
class Count:
    series: int  # sample lines of one scrape
    scrape_ms: float  # median time to build the text


def series(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def _timed(text: object) -> Count:
    assert callable(text)
    times = []
    body = ""
    for _ in range(5):
        start = time.perf_counter()
        body = text()
        times.append(time.perf_counter() - start)
    return Count(series(body), sorted(times)[2] * 1000)


def cluster(nodes: int, pods: int, seed: int = 36) -> MemoryCluster:
    """``nodes`` 8-chip nodes, one in twenty with an unhealthy chip; ``pods`` running pods
    spread over them, the first up to 8 of each node holding a chip each."""
    rng = random.Random(seed)
    store = MemoryCluster()
    now = int(time.time())
    per_node = max(pods // nodes, 1)
    for i in range(nodes):
        name = f"node-{i:05d}"
        holding = rng.randrange(CHIPS + 1)
        unhealthy = frozenset({7}) if i % 20 == 0 and holding < CHIPS else frozenset()
        status = {
            "capacity": {"huawei.com/Ascend910": str(CHIPS)},
            "allocatable": {"huawei.com/Ascend910": str(CHIPS - len(unhealthy))},
        }
        store.put("Node", {"metadata": {"name": name}, "status": status})
        free = frozenset(range(holding, CHIPS)) - unhealthy
        store.put(
            "ConfigMap", configmap(name, DeviceInfo(free, unhealthy, frozenset(), update_time=now))
        )
        for p in range(per_node):
            held = p < holding
            notes = {"huawei.com/AscendReal": f"Ascend910-{p}"} if held else None
            store.put(
                "Pod",
                pod_object(
                    "ns", f"{name}-p{p}", name, int(held), phase="Running", annotations=notes
                ),
            )
    return store


def scheduler(nodes: int, pods: int) -> Count:
    store = cluster(nodes, pods)
    service = SchedulerService(store, Extender(store), refresh_period=60)
    service.refresh()
    return _timed(service.metrics.text)


def agent(nodes: int, pods: int) -> Count:
    """One node: every chip held by a pod (the most series), its share of the pods."""
    metrics = AgentMetrics()
    node = NodeChips("Ascend910", "module910x8", tuple(Chip(i, i) for i in range(CHIPS)))
    holders = {c: f"ns/node-00000-p{c}" for c in range(min(CHIPS, max(pods // nodes, 1)))}
    metrics.read(ChipReadings("node-00000", lambda: node, lambda: holders, vnpu=False))
    return _timed(metrics.text)


def dra_driver() -> Count:
    metrics = DraMetrics()
    node = NodeChips("Ascend910", "module910x8", tuple(Chip(i, i) for i in range(CHIPS)))
    metrics.read(Readings(lambda: node, *(lambda: 0,) * 5))
    return _timed(metrics.text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--pods", type=int, default=50_000)
    args = parser.parse_args()
    ours = scheduler(args.nodes, args.pods)
    node = agent(args.nodes, args.pods)
    dra = dra_driver()
    print(f"{args.nodes} nodes x {CHIPS} chips, {args.pods} pods:")
    print(f"  scheduler (per replica): {ours.series} series, scrape {ours.scrape_ms:.1f} ms")
    print(
        f"  agent: {node.series} series per node ({node.scrape_ms:.2f} ms), "
        f"{node.series * args.nodes} in the cluster"
    )
    print(
        f"  DRA driver: {dra.series} series per node ({dra.scrape_ms:.2f} ms), "
        f"{dra.series * args.nodes} in the cluster"
    )


if __name__ == "__main__":
    main()
