"""Dynamic vNPU: the agent's Allocate (vNPU created included) and the scheduler's decision.

Run: ``.venv/bin/python -m benchmarks.vnpu [--pods 200 --nodes 1000 --decisions 300]``.
Part 1: one 310P node (4 chips x 8 AI cores) running the whole agent (its own builder) with
``-presetVirtualDevice=false`` on the fake driver, the kubelet simulator over real gRPC
sockets and the loopback API server over HTTP (the official client): each pod carries the
scheduler's ``huawei.com/npu-core`` choice; the kubelet's Allocate is timed from the call
to its answer, which includes destroying unused vNPUs, creating the pod's vNPU through the
driver (the fake driver writes its state file) and recording it on the pod. Every 16 pods
the pods end, so later Allocates destroy their vNPUs first.
Part 2: the extender in process over 1,000 dynamic-vNPU 310P nodes of mixed occupancy
(created vNPUs of every template), each pod filtered over every node, prioritized over the
passing ones and bound, as kube-scheduler calls it. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from agent.builder import AgentConfig, KubeSettings, start_node_agent
from agent.deviceinfo_publisher import configmap
from chip_drivers.fake import FakeDriver
from contract.chip_names import ASCEND310P
from contract.deviceinfo import DeviceInfo
from contract.vnpu import CORE_SPECS, TEMPLATES_310P
from infra.kube.client import KubernetesGateway
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.cluster import vnpu_state_file, wait_for
from simulation.kubelet import KubeletSimulator
from simulation.loopback import LoopbackApiServer
from simulation.memory import MemoryCluster, pod_object

NODE = "bench-310p"
NPU_CORE = "huawei.com/npu-core"
CHIPS = 4
PER_ROUND = 16  # vir02_1c: 4 per chip of 8 AI cores


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def allocate_latency(pods: int) -> list[float]:
    root = Path(tempfile.mkdtemp(prefix="vnpu", dir="/tmp"))
    store = MemoryCluster()
    server = LoopbackApiServer(store)
    gateway = KubernetesGateway.for_url(server.start())
    store.put("Node", {"metadata": {"name": NODE}})
    (root / "state.yaml").write_text(vnpu_state_file(CHIPS))
    kubelet = KubeletSimulator(root / "plugins", root / "podres.sock")
    kubelet.start()
    kube = KubeSettings(NODE, True, root / "podres.sock")
    config = AgentConfig(
        root / "plugins", ascend_runtime=True, period=5, kube=kube, preset_virtual=False
    )
    agent = start_node_agent(config, FakeDriver(root / "state.yaml"), gateway)
    cache = agent.cache
    assert cache is not None
    times: list[float] = []
    try:
        agent.plugin.wait_registered(10)
        kubelet.wait_for(lambda: kubelet.allocatable(NPU_CORE) == CHIPS * 8)
        for i in range(pods):
            name = f"pod-{i}"
            slot = i % PER_ROUND
            notes = {NPU_CORE: f"{slot % CHIPS}-vir02_1c", "predicate-time": str(i + 1)}
            store.put("Pod", pod_object("ns", name, NODE, 2, annotations=notes, resource=NPU_CORE))
            wait_for(lambda: any(p.name == name for p in cache.pods()), 10, 0.001)  # noqa: B023
            start = time.perf_counter()
            kubelet.allocate(f"ns/{name}", "main", NPU_CORE, 2)
            times.append((time.perf_counter() - start) * 1e3)
            if slot == PER_ROUND - 1:
                for k in range(i - PER_ROUND + 1, i + 1):
                    store.delete("Pod", "ns", f"pod-{k}")
                    kubelet.release(f"ns/pod-{k}")
                wait_for(lambda: not cache.pods(), 10, 0.001)
        created = agent.cores.created if agent.cores else 0
        destroyed = agent.cores.destroyed if agent.cores else 0
        print(f"  vNPUs created {created}, destroyed {destroyed}")
    finally:
        agent.stop()
        kubelet.close()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    return times


def vnpu_cluster(nodes: int, seed: int) -> MemoryCluster:
    """``nodes`` 310P nodes of 4 chips; on each, a few created vNPUs of random templates."""
    rng = random.Random(seed)
    store = MemoryCluster()
    now = int(time.time())
    templates = ["vir01", "vir02_1c", "vir04_3c", "vir02"]
    for i in range(nodes):
        name = f"v-{i:05d}"
        store.put(
            "Node",
            {
                "metadata": {"name": name, "labels": {"servertype": "Ascend310P-8"}},
                "status": {"capacity": {NPU_CORE: str(CHIPS * 8)}},
            },
        )
        info = DeviceInfo(
            frozenset(range(CHIPS)), frozenset(), frozenset(), update_time=now, kind=ASCEND310P
        )
        store.put("ConfigMap", configmap(name, info))
        for k in range(rng.choice((0, 1, 2, 3))):
            template = rng.choice(templates)
            chip = rng.randrange(CHIPS)
            real = f"Ascend310P-{CORE_SPECS[template]}-{100 + k}-{chip}_{k}"
            notes = {NPU_CORE: f"{chip}-{template}", "huawei.com/AscendReal": real}
            cores = TEMPLATES_310P[template].cores
            pod = pod_object("bg", f"{name}-{k}", name, cores, annotations=notes, resource=NPU_CORE)
            pod["status"]["phase"] = "Running"
            store.put("Pod", pod)
    return store


def decisions(nodes: int, pods: int) -> tuple[list[float], int, float]:
    store = vnpu_cluster(nodes, seed=7)
    extender = Extender(store)
    service = SchedulerService(store, extender)
    start = time.perf_counter()
    service.refresh()
    first_read = time.perf_counter() - start
    names = sorted(n["metadata"]["name"] for n in store.list_nodes())
    rng = random.Random(11)
    times: list[float] = []
    bound = 0
    for i in range(pods):
        cores, labels = rng.choice(
            [(1, {}), (2, {}), (4, {}), (2, {"vnpu-level": "high"}), (8, {})]
        )
        store.put("Pod", pod_object("ns", f"p{i}", None, cores, resource=NPU_CORE, labels=labels))
        pod = store.get_pod("ns", f"p{i}")
        start = time.perf_counter()
        passing = extender.filter({"Pod": pod, "NodeNames": names}).NodeNames
        if passing:
            scores = extender.prioritize({"Pod": pod, "NodeNames": passing})
            best = max(scores, key=lambda s: s.Score).Host
            meta = pod["metadata"]
            binding = {"PodName": meta["name"], "PodNamespace": "ns", "PodUID": meta["uid"]}
            answer = extender.bind({**binding, "Node": best})
            bound += not answer.Error
        times.append((time.perf_counter() - start) * 1e3)
    return times, bound, first_read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--decisions", type=int, default=300)
    args = parser.parse_args()
    print(f"vNPU Allocate on one 310P node ({args.pods} pods, vir02_1c, HTTP API server):")
    times = allocate_latency(args.pods)
    # The first Allocate of each round also destroys the last round's 16 vNPUs.
    cleaning = [t for i, t in enumerate(times) if i and i % PER_ROUND == 0]
    plain = [t for i, t in enumerate(times) if not (i and i % PER_ROUND == 0)]
    print(
        f"  Allocate incl. vNPU create: p50 {percentile(plain, 50):.2f} ms, "
        f"p99 {percentile(plain, 99):.2f} ms; those that first destroy {PER_ROUND} unused "
        f"vNPUs: p50 {percentile(cleaning, 50):.2f} ms, max {max(cleaning):.2f} ms"
    )
    print(f"vNPU decisions over {args.nodes} 310P nodes ({args.decisions} pods):")
    times, bound, first = decisions(args.nodes, args.decisions)
    print(f"  first read of the cluster: {first:.2f} s; pods bound: {bound}")
    print(
        f"  filter + prioritize + bind: p50 {percentile(times, 50):.2f} ms, "
        f"p99 {percentile(times, 99):.2f} ms, max {max(times):.2f} ms"
    )


if __name__ == "__main__":
    main()
