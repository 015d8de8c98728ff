"""The scheduler service: extender latency per call, and pods/s end to end.

Run: ``.venv/bin/python -m benchmarks.extender [--pods 200]``. Part 1: the service over
HTTP on an in-memory cluster of 1,000 and 5,000 module910x8 nodes (mixed occupancy), each
pod filtered over every node, prioritized over the passing ones and bound, as kube-scheduler
calls it. Part 2: the simulated cluster (loopback API server, 25 nodes with agents and
kubelet simulators over real sockets): pods submitted at once until all are admitted.
Targets (issue 5): filter + prioritize ≤ 20 ms p99 at 5,000 nodes; ≥ 200 pods/s end to end.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from agent.deviceinfo_publisher import configmap
from contract.deviceinfo import DeviceInfo
from simulation.cluster import simulated_cluster
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import MemoryCluster, pod_object
from simulation.processes import scheduler_process


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def cluster(nodes: int, seed: int) -> MemoryCluster:
    rng = random.Random(seed)
    store = MemoryCluster()
    now = int(time.time())
    for i in range(nodes):
        name = f"node-{i:05d}"
        used = rng.sample(range(8), rng.choice((0, 0, 2, 4, 6)))
        store.put(
            "Node",
            {
                "metadata": {"name": name},
                "status": {
                    "capacity": {"huawei.com/Ascend910": "8"},
                    "allocatable": {"huawei.com/Ascend910": "8"},
                },
            },
        )
        info = DeviceInfo(
            frozenset(range(8)) - set(used), frozenset(), frozenset(), update_time=now
        )
        store.put("ConfigMap", configmap(name, info))
        if used:
            chips = ",".join(f"Ascend910-{c}" for c in used)
            store.put(
                "Pod",
                pod_object(
                    "busy",
                    name,
                    name,
                    len(used),
                    phase="Running",
                    annotations={"huawei.com/AscendReal": chips},
                ),
            )
    return store


def extender_latency(nodes: int, pods: int, workdir: Path) -> None:
    store = cluster(nodes, seed=nodes)
    names = [f"node-{i:05d}" for i in range(nodes)]
    for i in range(pods):
        store.put("Pod", pod_object("ns", f"p{i}", None, (1, 1, 2, 4)[i % 4]))
    filter_ms, prioritize_ms, bind_ms = [], [], []
    flags = ("--log-level", "WARNING")
    with scheduler_process(store, workdir, *flags) as service:
        url = service.url
        for i in range(pods):
            pod = store.get_pod("ns", f"p{i}")
            start = time.perf_counter()
            passing = post(f"{url}/filter", {"Pod": pod, "Nodes": None, "NodeNames": names})[
                "NodeNames"
            ]
            middle = time.perf_counter()
            scores = post(f"{url}/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": passing})
            end = time.perf_counter()
            best = max(scores, key=lambda s: s["Score"])["Host"]
            post(
                f"{url}/bind",
                {
                    "PodName": f"p{i}",
                    "PodNamespace": "ns",
                    "PodUID": pod["metadata"]["uid"],
                    "Node": best,
                },
            )
            bound = time.perf_counter()
            filter_ms.append((middle - start) * 1e3)
            prioritize_ms.append((end - middle) * 1e3)
            bind_ms.append((bound - end) * 1e3)
    both = [f + p for f, p in zip(filter_ms, prioritize_ms, strict=True)]
    print(
        f"  {nodes:>5} nodes: filter p50 {percentile(filter_ms, 50):.1f} ms, prioritize p50 "
        f"{percentile(prioritize_ms, 50):.1f} ms, filter + prioritize p99 "
        f"{percentile(both, 99):.1f} ms, bind p50 {percentile(bind_ms, 50):.1f} ms"
    )


def end_to_end(nodes: int, pods: int) -> None:
    with simulated_cluster(nodes) as sim:
        scheduler = KubeScheduler(sim)
        sizes = (1, 1, 1, 1, 2, 1, 4, 1)
        for i in range(pods):
            sim.store.put("Pod", pod_object("ns", f"p{i:04d}", None, sizes[i % len(sizes)]))
        sim.service.refresh()
        start = time.perf_counter()
        scheduled = scheduler.cycle()
        bound_at = time.perf_counter()
        admitted = len(sim.admit())
        done = time.perf_counter()
    print(
        f"  {pods} pods on {nodes} nodes: {scheduled} bound in {bound_at - start:.2f} s "
        f"({scheduled / (bound_at - start):.0f} pods/s through the extender), {admitted} "
        f"admitted by the kubelets in {done - bound_at:.2f} s; end to end "
        f"{admitted / (done - start):.0f} pods/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=200)
    args = parser.parse_args()
    print("extender over HTTP, as its own process (one pod at a time, every node a candidate)")
    with tempfile.TemporaryDirectory() as workdir:
        for nodes in (1_000, 5_000):
            extender_latency(nodes, args.pods, Path(workdir))
    print("simulated cluster, submitted at once")
    end_to_end(25, args.pods)


if __name__ == "__main__":
    main()
