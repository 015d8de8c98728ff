"""The scheduler service: extender latency per call, and pods/s end to end.

Run: ``.venv/bin/python -m benchmarks.extender [--pods 200]``. Part 1: the service over
HTTP on an in-memory cluster of 1,000, 5,000 and 10,000 module910x8 nodes (mixed occupancy),
each pod filtered over every node and bound as the shipped configuration has kube-scheduler
call it, then filtered over every node, prioritized over the passing ones and bound (with
``prioritizeVerb`` and ``--filter-answers all``), beside the wire floor. Part 2: the
simulated cluster (loopback API server, 25 nodes with agents and kubelet simulators over real
sockets), pods submitted at once until all run: in one process, then with the API server, the
service and the nodes in processes of their own (and the CPU each spends per pod). Targets
(issue 24): filter + prioritize p99 ≤ 10 ms at 5,000 nodes and ≤ 20 ms at 10,000, at most
twice the floor; ≥ 200 pods/s end to end; (issue 48) as shipped (``/filter`` alone, answering
the best-scored nodes), p99 ≤ 10 ms at 5,000 nodes and ≤ 1.2 × the floor. Beside them the
AscendNPU plugin's two calls (``/place`` with the pod alone, ``/reserve``) and their floor.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import psutil

from agent.deviceinfo_publisher import configmap
from contract.chip_names import ASCEND910, KIND_OF_RESOURCE, chip_name
from contract.deviceinfo import DeviceInfo
from contract.groups import COSCHEDULING, COSCHEDULING_GROUP_LABEL, PODGROUP_APIS, podgroups
from infra.http import HttpServer, Response
from scheduler_core.service.routes import decode_body, json_response
from simulation.cluster import simulated_cluster, wait_for
from simulation.informer_cache import InformerCache, RemoteCluster
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import MemoryCluster, pod_object
from simulation.processes import cluster_processes, pod_creator, scheduler_process


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def post(url: str, body: dict[str, Any]) -> Any:
    """A call as kube-scheduler makes it; the client's own JSON is msgspec's, so that the
    figures are the server's more than this Python client's (Go's encoder is as fast)."""
    request = urllib.request.Request(
        url,
        data=msgspec.json.encode(body),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return msgspec.json.decode(response.read())


def occupied_cluster(
    nodes: int,
    seed: int,
    *,
    chips: int = 8,
    resource: str = ASCEND910.resource,
    labels: Mapping[str, str] | None = None,
) -> MemoryCluster:
    """``nodes`` servers of ``chips`` chips, labelled ``labels``; on each, from ``seed``, 0,
    2, 4 or 6 chips held by a running pod, and the DeviceInfo its agent publishes."""
    rng = random.Random(seed)
    kind = KIND_OF_RESOURCE[resource]
    store = MemoryCluster()
    now = int(time.time())
    for i in range(nodes):
        name = f"node-{i:05d}"
        used = rng.sample(range(chips), rng.choice((0, 0, 2, 4, 6)))
        capacity = {resource: str(chips)}
        store.put(
            "Node",
            {
                "metadata": {"name": name, "labels": dict(labels or {})},
                "status": {"capacity": capacity, "allocatable": dict(capacity)},
            },
        )
        free = frozenset(range(chips)) - set(used)
        info = DeviceInfo(free, frozenset(), frozenset(), update_time=now, kind=kind)
        store.put("ConfigMap", configmap(name, info))
        if used:
            held = ",".join(chip_name(c, kind) for c in used)
            notes = {kind.resource: held, "huawei.com/AscendReal": held}
            busy = pod_object(
                "busy", name, name, len(used), phase="Running", resource=resource, annotations=notes
            )
            store.put("Pod", busy)
    return store


def cluster(nodes: int, seed: int) -> MemoryCluster:
    """910 x8 servers, mixed occupancy, the coscheduling PodGroup API served."""
    store = occupied_cluster(nodes, seed)
    store.apis.add(PODGROUP_APIS[COSCHEDULING])  # the gang's PodGroup API, served from start
    return store


@dataclass(frozen=True)
class Latency:
    filter_p50: float
    prioritize_p50: float
    cycle_p99: float  # what kube-scheduler's cycle waits for a pod: filter (+ prioritize)
    bind_p50: float = 0.0


def drive(
    url: str,
    store: MemoryCluster,
    names: list[str],
    pods: int,
    *,
    bind: bool,
    prioritize: bool,
    prefix: str = "p",
) -> Latency:
    """kube-scheduler's calls for ``pods`` pods, one at a time, every node a candidate: as
    shipped, ``/filter`` (the service answers the best-scored nodes) and ``/bind`` on the
    first it names (kube-scheduler's own scores choose among them); with ``prioritize``,
    ``/prioritize`` over the passing nodes too and ``/bind`` on the best."""
    filter_ms, prioritize_ms, bind_ms = [], [], []
    for i in range(pods):
        pod = store.get_pod("ns", f"{prefix}{i}")
        start = time.perf_counter()
        passing = post(f"{url}/filter", {"Pod": pod, "Nodes": None, "NodeNames": names})[
            "NodeNames"
        ]
        middle = end = time.perf_counter()
        best = passing[0] if passing else None
        if prioritize:
            scores = post(f"{url}/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": passing})
            end = time.perf_counter()
            best = max(scores, key=lambda s: s["Score"])["Host"] if scores else None
        if bind and best is not None:
            uid = pod["metadata"]["uid"]
            binding = {"PodName": f"{prefix}{i}", "PodNamespace": "ns", "PodUID": uid, "Node": best}
            post(f"{url}/bind", binding)
            bind_ms.append((time.perf_counter() - end) * 1e3)
        filter_ms.append((middle - start) * 1e3)
        prioritize_ms.append((end - middle) * 1e3)
    cycle = [f + p for f, p in zip(filter_ms, prioritize_ms, strict=True)]
    return Latency(
        percentile(filter_ms, 50),
        percentile(prioritize_ms, 50),
        percentile(cycle, 99),
        percentile(bind_ms, 50) if bind_ms else 0.0,
    )


def drive_plugin(url: str, store: MemoryCluster, pods: int, prefix: str = "r") -> Latency:
    """kube-scheduler-ascend's calls for ``pods`` pods, one at a time: ``/place`` with the pod
    alone (the service samples its nodes), then ``/reserve`` on the first node answered.
    ``filter_p50`` is place's, ``prioritize_p50`` reserve's, ``cycle_p99`` both's."""
    place_ms, reserve_ms = [], []
    for i in range(pods):
        pod = store.get_pod("ns", f"{prefix}{i}")
        start = time.perf_counter()
        passing = post(f"{url}/place", {"Pod": pod})["NodeNames"]
        middle = end = time.perf_counter()
        if passing:
            post(f"{url}/reserve", {"Pod": pod, "Node": passing[0]})
            end = time.perf_counter()
        place_ms.append((middle - start) * 1e3)
        reserve_ms.append((end - middle) * 1e3)
    cycle = [a + b for a, b in zip(place_ms, reserve_ms, strict=True)]
    return Latency(percentile(place_ms, 50), percentile(reserve_ms, 50), percentile(cycle, 99))


def plugin_floor(store: MemoryCluster, names: list[str], pods: int) -> Latency:
    """The plugin's two calls answered by the same HTTP server deciding nothing: the pod
    decoded, one node and two annotations answered."""

    def answer(path: str, raw: bytes) -> Response:
        decode_body(raw)
        if path == "/place":
            return json_response(200, {"NodeNames": names[:1], "Reason": ""})
        notes = {ASCEND910.resource: chip_name(0, KIND_OF_RESOURCE[ASCEND910.resource])}
        return json_response(200, {"Annotations": {**notes, "predicate-time": "1"}, "Error": ""})

    server = HttpServer("floor", lambda path: Response.text(404, ""), answer)
    url = server.start("127.0.0.1", 0)
    try:
        return drive_plugin(url, store, pods)
    finally:
        server.stop()


def wire_floor(store: MemoryCluster, names: list[str], pods: int, *, prioritize: bool) -> Latency:
    """The same HTTP server decoding the same bodies and answering every name, deciding
    nothing: what any extender in Python pays before it decides."""

    def answer(path: str, raw: bytes) -> Response:
        body = decode_body(raw)
        nodes = body["NodeNames"]
        if path == "/filter":
            return json_response(200, {"NodeNames": nodes, "FailedNodes": {}, "Error": ""})
        return json_response(200, [{"Host": n, "Score": 0} for n in nodes])

    server = HttpServer("floor", lambda path: Response.text(404, ""), answer)
    url = server.start("127.0.0.1", 0)
    try:
        return drive(url, store, names, pods, bind=False, prioritize=prioritize)
    finally:
        server.stop()


def extender_latency(nodes: int, pods: int, workdir: Path) -> None:
    store = cluster(nodes, seed=nodes)
    names = [f"node-{i:05d}" for i in range(nodes)]
    for i in range(pods):
        for prefix in ("p", "q", "r"):
            store.put("Pod", pod_object("ns", f"{prefix}{i}", None, (1, 1, 2, 4)[i % 4]))
    floor = wire_floor(store, names, pods, prioritize=False)
    floor_both = wire_floor(store, names, pods, prioritize=True)
    floor_plugin = plugin_floor(store, names, pods)
    flags = ("--log-level", "WARNING")
    with scheduler_process(store, workdir, *flags) as service:
        ours = drive(service.url, store, names, pods, bind=True, prioritize=False)
        plugin = drive_plugin(service.url, store, pods)
        # A gang of three whose PodGroup states its size waits for its last pod, and every
        # one-pod filter holds chips back for it (a size only a pod claims holds nothing).
        podgroup = {"metadata": {"namespace": "ns", "name": "g"}, "spec": {"minMember": 3}}
        store.create_object(podgroups(COSCHEDULING), podgroup)
        for r in range(2):
            labels = {COSCHEDULING_GROUP_LABEL: "g"}
            store.put("Pod", pod_object("ns", f"gang-{r}", None, 8, labels=labels))
        waiting = _wait_for_gang(service.url, store, names)
        for i in range(pods):
            store.put("Pod", pod_object("ns", f"w{i}", None, 1))
        with_gang = _drive_named(service.url, store, names, "w", pods)
        opened = session_open(service.url, nodes)
    # The configuration with prioritizeVerb, for comparison: every fitting node passes.
    with scheduler_process(store, workdir, *flags, "--filter-answers", "all") as service:
        both = drive(service.url, store, names, pods, bind=True, prioritize=True, prefix="q")
    print(
        f"  {nodes:>6} nodes, as shipped (filter answers the best): filter p50 "
        f"{ours.filter_p50:.1f} ms (floor {floor.filter_p50:.1f}), p99 {ours.cycle_p99:.1f} ms "
        f"(floor {floor.cycle_p99:.1f}, x{ours.cycle_p99 / floor.cycle_p99:.1f}), bind p50 "
        f"{ours.bind_p50:.1f} ms"
    )
    print(
        f"          with prioritizeVerb (--filter-answers all): filter p50 {both.filter_p50:.1f}"
        f" ms, prioritize p50 {both.prioritize_p50:.1f} ms, filter + prioritize p99 "
        f"{both.cycle_p99:.1f} ms (floor {floor_both.cycle_p99:.1f}, "
        f"x{both.cycle_p99 / floor_both.cycle_p99:.1f})"
    )
    print(
        f"          kube-scheduler-ascend's plugin (place samples the nodes): place p50 "
        f"{plugin.filter_p50:.1f} ms (floor {floor_plugin.filter_p50:.1f}), reserve p50 "
        f"{plugin.prioritize_p50:.1f} ms, place + reserve p99 {plugin.cycle_p99:.1f} ms (floor "
        f"{floor_plugin.cycle_p99:.1f}, x{plugin.cycle_p99 / floor_plugin.cycle_p99:.1f})"
    )
    print(
        f"          with a gang waiting{'' if waiting else ' (not seen waiting)'}: filter p50 "
        f"{with_gang.filter_p50:.1f} ms (+{with_gang.filter_p50 - ours.filter_p50:.1f}); "
        f"Volcano onSessionOpen of the {nodes}-node session ({opened[1] / 2**20:.0f} MiB): "
        f"{opened[0]:.0f} ms"
    )


def _drive_named(
    url: str, store: MemoryCluster, names: list[str], prefix: str, pods: int
) -> Latency:
    filter_ms = []
    for i in range(pods):
        pod = store.get_pod("ns", f"{prefix}{i}")
        start = time.perf_counter()
        post(f"{url}/filter", {"Pod": pod, "Nodes": None, "NodeNames": names})
        filter_ms.append((time.perf_counter() - start) * 1e3)
    return Latency(percentile(filter_ms, 50), 0.0, 0.0)


def _wait_for_gang(url: str, store: MemoryCluster, names: list[str]) -> bool:
    """Filter the gang's first pod until the service has read both its pods (it then waits)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer = post(
            f"{url}/filter", {"Pod": store.get_pod("ns", "gang-0"), "NodeNames": names[:1]}
        )
        reasons = " ".join(
            {**answer["FailedNodes"], **answer.get("FailedAndUnresolvableNodes", {})}.values()
        )
        if "does not fit yet" in reasons or "waiting" in reasons:
            return True
        time.sleep(0.1)
    return False


def session_open(url: str, nodes: int) -> tuple[float, int]:
    """Volcano's onSessionOpen with a session of ``nodes`` nodes (each NodeInfo with its Node,
    as Volcano sends them): milliseconds to the answer, and the body's size."""
    # About the size of a real NodeInfo: its Node (labels, annotations, status) and resources.
    meta = {"name": "", "labels": {"a": "b" * 64}, "annotations": {"c": "d" * 3000}}
    node = {"Name": "", "Node": {"metadata": meta, "status": {"images": ["e" * 80] * 20}}}
    session = {"Jobs": {}, "Nodes": {f"node-{i:05d}": node for i in range(nodes)}, "Queues": {}}
    raw = json.dumps(session).encode()
    start = time.perf_counter()
    request = urllib.request.Request(f"{url}/volcano/onSessionOpen", data=raw, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()
    return (time.perf_counter() - start) * 1e3, len(raw)


SIZES = (1, 1, 1, 1, 2, 1, 4, 1)  # chips per pod, in turn


def end_to_end(nodes: int, pods: int) -> None:
    """Everything in this one process."""
    with simulated_cluster(nodes) as sim:
        scheduler = KubeScheduler(sim)
        for i in range(pods):
            sim.store.put("Pod", pod_object("ns", f"p{i:04d}", None, SIZES[i % len(SIZES)]))
        sim.service.refresh()
        start = time.perf_counter()
        scheduled = scheduler.cycle()
        bound_at = time.perf_counter()
        admitted = len(sim.admit())
        done = time.perf_counter()
        scheduler.close()
    print(
        f"  one process: {pods} pods on {nodes} nodes: {scheduled} bound in "
        f"{bound_at - start:.2f} s, {admitted} admitted by the kubelets {done - bound_at:.2f} s "
        f"later; end to end {admitted / (done - start):.0f} pods/s"
    )


def end_to_end_processes(nodes: int, pods: int) -> None:
    """The API server, the scheduler service and the nodes each in a process of their own;
    the stand-in kube-scheduler (informers, asynchronous bindings) in this one. From the
    first scheduling cycle to the last pod Running."""
    with (
        tempfile.TemporaryDirectory() as workdir,
        cluster_processes(nodes, Path(workdir), "--log-level", "WARNING") as parts,
    ):
        creator = pod_creator(parts.api_url)
        for i in range(pods):
            creator(pod_object("ns", f"p{i:04d}", None, SIZES[i % len(SIZES)]))
        cache = InformerCache(parts.api_url)
        try:
            if not wait_for(lambda: cache.synced and len(cache.list_pods(None)[0]) == pods):
                raise SystemExit("the scheduler's informers did not see the pods")
            scheduler = KubeScheduler(RemoteCluster(parts.service_url, cache))
            cpu = CpuMeter(
                {
                    "API server": parts.api.process.pid,
                    "scheduler service": parts.service.pid,
                    "nodes": parts.nodes.process.pid,
                    "kube-scheduler stand-in": os.getpid(),
                }
            )
            start = time.perf_counter()
            bound = scheduler.settle(cache.changed, timeout=300)
            bound_at = time.perf_counter()
            scheduler.close()
        finally:
            cache.stop()
        counts: dict[str, int] = {}

        def all_started() -> bool:
            counts.update(json.loads(parts.nodes.ask("count")))
            return counts["admitted"] + counts["refused"] >= bound

        wait_for(all_started, timeout=60, step=0.01)
        done = time.perf_counter()
        busy = cpu.seconds()
    print(
        f"  processes: {pods} pods on {nodes} nodes: {bound} bound in {bound_at - start:.2f} s "
        f"({bound / (bound_at - start):.0f} pods/s), {counts['admitted']} Running "
        f"{done - bound_at:.2f} s later ({counts['refused']} refused); end to end "
        f"{counts['admitted'] / (done - start):.0f} pods/s"
    )
    admitted = max(counts["admitted"], 1)
    per_pod = {part: seconds * 1e3 / admitted for part, seconds in busy.items()}
    print(
        "    CPU per pod: "
        + ", ".join(f"{part} {ms:.1f} ms" for part, ms in per_pod.items())
        + f"; together {sum(per_pod.values()):.1f} ms, so {os.cpu_count()} cores cap it at "
        f"{1e3 * (os.cpu_count() or 1) / sum(per_pod.values()):.0f} pods/s; with a core each, "
        + ", ".join(f"{part} {1e3 / ms:.0f}" for part, ms in per_pod.items())
        + " pods/s"
    )


class CpuMeter:
    """CPU seconds each process spends from now on."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._processes = {part: psutil.Process(pid) for part, pid in pids.items()}
        self._before = {part: _cpu(p) for part, p in self._processes.items()}

    def seconds(self) -> dict[str, float]:
        return {part: _cpu(p) - self._before[part] for part, p in self._processes.items()}


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=200)
    args = parser.parse_args()
    print("extender over HTTP, as its own process (one pod at a time, every node a candidate)")
    with tempfile.TemporaryDirectory() as workdir:
        for nodes in (1_000, 5_000, 10_000):
            extender_latency(nodes, args.pods, Path(workdir))
    print("simulated cluster, pods submitted at once")
    end_to_end(25, args.pods)
    end_to_end_processes(25, args.pods)


if __name__ == "__main__":
    main()
