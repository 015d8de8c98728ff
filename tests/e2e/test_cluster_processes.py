"""The simulated cluster as a cluster runs it: the API server, the scheduler service and the
nodes (agents and kubelets) each in a process of their own, kube-scheduler's stand-in reading
through informers and binding asynchronously; every pod the nodes start has its own chips."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from contract.annotations import CHIPS_ANNOTATION, REAL_ANNOTATION
from infra.kube.client import KubernetesGateway
from infra.kube.port import Selection
from simulation.cluster import wait_for
from simulation.informer_cache import InformerCache, RemoteCluster
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import pod_object
from simulation.processes import cluster_processes, pod_creator

SIZES = [8, 4, 2, 1, 1, 4, 2, 2, 1, 8, 4, 1]  # 38 chips asked of 32


def test_pods_placed_through_processes_run_on_chips_of_their_own(short_dir: Path) -> None:
    with cluster_processes(4, short_dir, "--log-level", "WARNING") as parts:
        create = pod_creator(parts.api_url)
        for i, npu in enumerate(SIZES):
            create(pod_object("ns", f"p{i:02d}", None, npu))
        cache = InformerCache(parts.api_url)
        try:
            assert wait_for(lambda: cache.synced and len(cache.list_pods(None)[0]) == len(SIZES))
            scheduler = KubeScheduler(RemoteCluster(parts.service_url, cache))
            bound = scheduler.settle(cache.changed, timeout=60)
            scheduler.close()
        finally:
            cache.stop()

        def started() -> bool:
            counts = json.loads(parts.nodes.ask("count"))
            return bool(counts["admitted"] + counts["refused"] == bound)

        assert wait_for(started, timeout=30)
        pods = KubernetesGateway.for_url(parts.api_url).list_page(Selection("Pod"), 0).items
    running = [p for p in pods if p["status"]["phase"] == "Running"]
    assert len(running) == bound >= 8, "the 32 chips hold at least 8 of the pods"
    held: Counter[tuple[str, str]] = Counter()
    for pod in running:
        chosen = pod["metadata"]["annotations"][CHIPS_ANNOTATION]
        assert pod["metadata"]["annotations"][REAL_ANNOTATION] == chosen, pod["metadata"]["name"]
        held.update((pod["spec"]["nodeName"], chip) for chip in chosen.split(","))
    assert max(held.values()) == 1, "no chip in two pods"
    assert sum(held.values()) == sum(SIZES[int(p["metadata"]["name"][1:])] for p in running)
