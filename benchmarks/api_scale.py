"""The control plane's API budget at the scale of a real cluster.

Run: ``.venv/bin/python -m benchmarks.api_scale [--nodes 5000 --pods 50000]``. The scheduler
service runs as its own process (``python -m scheduler_core serve``) against the loopback
API server, which serves an in-memory store of ``--nodes`` module910x8 nodes with their
DeviceInfo ConfigMaps and ``--pods`` running pods of realistic size (managedFields, status,
conditions: about 5.5 KB of JSON each; one 8-chip training pod on most nodes, the rest
daemon and service pods). Bookmarks come once a minute, as a real API server sends them.
Printed (goals of issue 13 in brackets):

- time to first ready, from the process start to ``/readyz``;
- bytes per second the scheduler reads at rest [≤ 16 KiB/s];
- scheduler RSS now and at its peak [≤ 400 MiB];
- event → visible in ``/filter``, p50 / p99, with 100 pod events per second written
  meanwhile [≤ 100 ms / ≤ 500 ms]: a pod taking all 8 chips of a free node is created and
  ``/filter`` asked until that node fails;
- filter + prioritize over every node, p99, with the watches running [≤ 20 ms, quiet machine];
- requests per agent per minute at rest [≤ 2]: one agent (``python -m agent``) against an
  API server of its own, counted over ``--agent-seconds``.

Asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from contract.deviceinfo import CONSUMER_LABEL, DeviceInfo, configmap_name, encode
from simulation.kubelet import KubeletSimulator
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster, pod_object
from simulation.processes import scheduler_process

RESOURCE = "huawei.com/Ascend910"
PROBE_NODES = 200  # kept free of the background churn, for the visibility probe


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def realistic(pod: dict[str, Any], i: int) -> dict[str, Any]:
    """What a pod carries besides what the scheduler reads: ~5.5 KB of JSON in all."""
    meta = pod["metadata"]
    meta["labels"] = {"app": f"app-{i % 97}", "pod-template-hash": f"{i:010x}", "team": "ml"}
    meta["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "x" * 1200
    meta["managedFields"] = [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-11-20T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {f"f:field{j}": {} for j in range(25)},
        }
        for manager in ("kubectl", "kube-scheduler", "kubelet")
    ]
    pod["spec"].update(
        serviceAccountName="default",
        tolerations=[{"key": f"taint-{j}", "operator": "Exists"} for j in range(6)],
        volumes=[{"name": f"vol-{j}", "emptyDir": {}} for j in range(6)],
    )
    pod["status"].update(
        conditions=[
            {"type": t, "status": "True", "lastTransitionTime": "2026-11-20T10:00:00Z"}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        containerStatuses=[
            {
                "name": "main",
                "image": "registry.example.com/train/pytorch-npu:2.1.0-cann8",
                "imageID": "sha256:" + "ab" * 32,
                "containerID": "containerd://" + "cd" * 32,
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-11-20T10:00:01Z"}},
            }
        ],
        podIP=f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
        hostIP="192.168.0.1",
        qosClass="Burstable",
    )
    return pod


def build(nodes: int, pods: int, seed: int) -> tuple[MemoryCluster, list[str]]:
    rng = random.Random(seed)
    store = MemoryCluster(bookmark_seconds=60.0)
    now = int(time.time())
    names = [f"node-{i:05d}" for i in range(nodes)]
    label, value = CONSUMER_LABEL
    for i, name in enumerate(names):
        store.put(
            "Node",
            {
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "status": {
                    "capacity": {RESOURCE: "8"},
                    "allocatable": {RESOURCE: "8"},
                    "addresses": [
                        {"type": "InternalIP", "address": f"192.168.{i // 250}.{i % 250}"}
                    ],
                    "images": [{"names": [f"image-{j}"], "sizeBytes": 10**9} for j in range(20)],
                },
            },
        )
        info = DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), update_time=now + 3600)
        store.put(
            "ConfigMap",
            {
                "metadata": {
                    "namespace": "kube-system",
                    "name": configmap_name(name),
                    "labels": {label: value},
                },
                "data": encode(info),
            },
        )
    training = [n for n in names[PROBE_NODES:] if rng.random() < 0.8]
    chips = ",".join(f"Ascend910-{c}" for c in range(8))
    for i in range(pods):
        if i < len(training):
            node, npu = training[i], 8
            notes = {RESOURCE: chips, "huawei.com/AscendReal": chips, "predicate-time": "1"}
        else:
            node, npu, notes = names[PROBE_NODES + i % (nodes - PROBE_NODES)], 0, {}
        pod = pod_object("work", f"pod-{i:06d}", node, npu, annotations=notes, phase="Running")
        store.put("Pod", realistic(pod, i))
    return store, names


def rss(pid: int) -> tuple[float, float]:
    """(now, peak) resident memory of a process in MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def churn(store: MemoryCluster, names: list[str], rate: float, stop: threading.Event) -> None:
    """``rate`` pod events per second on the nodes the probe leaves alone: one-chip pods
    created and deleted in turn."""
    rng = random.Random(1)
    live: list[str] = []
    period, next_at = 1 / rate, time.monotonic()
    while not stop.is_set():
        if live and (len(live) > 50 or rng.random() < 0.5):
            store.delete("Pod", "churn", live.pop(rng.randrange(len(live))))
        else:
            name = f"c-{rng.randrange(10**9)}"
            node = rng.choice(names[PROBE_NODES:])
            notes = {RESOURCE: "Ascend910-0", "predicate-time": "1"}
            store.put("Pod", pod_object("churn", name, node, 1, annotations=notes))
            live.append(name)
        next_at += period
        stop.wait(max(0.0, next_at - time.monotonic()))


def visibility(url: str, store: MemoryCluster, names: list[str], probes: int) -> list[float]:
    """ms from writing a pod that fills a free node to ``/filter`` refusing that node."""
    asking = pod_object("probe", "asking", None, 8)
    chips = ",".join(f"Ascend910-{c}" for c in range(8))
    seen = []
    for i in range(probes):
        node = names[i % PROBE_NODES]
        notes = {RESOURCE: chips, "huawei.com/AscendReal": chips, "predicate-time": "1"}
        start = time.perf_counter()
        store.put("Pod", pod_object("probe", f"fill-{i}", node, 8, annotations=notes))
        while post(f"{url}/filter", {"Pod": asking, "NodeNames": [node]})["NodeNames"]:
            time.sleep(0.001)
        seen.append((time.perf_counter() - start) * 1e3)
        store.delete("Pod", "probe", f"fill-{i}")
    return seen


def verbs(url: str, names: list[str], calls: int) -> list[float]:
    asking = pod_object("probe", "asking", None, 8)
    timings = []
    for _ in range(calls):
        start = time.perf_counter()
        passing = post(f"{url}/filter", {"Pod": asking, "NodeNames": names})["NodeNames"]
        post(f"{url}/prioritize", {"Pod": asking, "NodeNames": passing})
        timings.append((time.perf_counter() - start) * 1e3)
    return timings


def agent_budget(seconds: float) -> tuple[int, dict[str, int]]:
    """Requests one agent makes at rest over ``seconds`` (after it settled)."""
    root = Path(tempfile.mkdtemp(prefix="budget", dir="/tmp"))
    store = MemoryCluster(bookmark_seconds=60.0)
    store.put("Node", {"metadata": {"name": "n1"}, "status": {}})
    api = LoopbackApiServer(store)
    (root / "kubeconfig").write_text(kubeconfig(api.start()))
    (root / "state.yaml").write_text(
        "product: module910x8\nchips:\n" + "".join(f"  - {{id: {i}}}\n" for i in range(8))
    )
    kubelet = KubeletSimulator(root / "plugins", root / "podres.sock")
    kubelet.start()
    command = [sys.executable, "-m", "agent", "--driver", "fake", "--fake-state"]
    command += [str(root / "state.yaml"), "--plugin-dir", str(root / "plugins")]
    command += ["--kube", "kubeconfig", "--kubeconfig", str(root / "kubeconfig")]
    command += ["--node-name", "n1", "--pod-resources-socket", str(root / "podres.sock")]
    command += ["--ascend-runtime", "true", "--log-level", "WARNING"]
    command += ["--allow-missing-policies"]  # the in-memory API server has none
    process = subprocess.Popen(command)
    try:
        if not kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 8, timeout=60):
            raise SystemExit("the agent did not register")
        time.sleep(10)  # its first writes (DeviceInfo, node label) are done
        before, _ = api.traffic()
        time.sleep(seconds)
        after, _ = api.traffic()
    finally:
        process.terminate()
        process.wait(timeout=30)
        kubelet.stop()
        api.stop()
    made = after - before
    return sum(made.values()), dict(made)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--rest-seconds", type=float, default=60.0)
    parser.add_argument("--events-per-second", type=float, default=100.0)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--agent-seconds", type=float, default=180.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    started = time.perf_counter()
    store, names = build(args.nodes, args.pods, args.seed)
    size = len(json.dumps(store.list_pods(None)[0][-1]))
    print(
        f"{args.nodes} nodes, {args.pods} running pods of {size / 1000:.1f} KB "
        f"(store built in {time.perf_counter() - started:.0f} s)"
    )
    with tempfile.TemporaryDirectory() as workdir:
        started = time.perf_counter()
        with scheduler_process(store, Path(workdir), "--log-level", "WARNING") as service:
            ready = time.perf_counter() - started
            pid = service.process.pid
            print(f"time to first ready: {ready:.1f} s")
            print("scheduler RSS now / peak: {:.0f} / {:.0f} MiB".format(*rss(pid)))
            _, read_before = service.api.traffic()
            time.sleep(args.rest_seconds)
            requests, read_after = service.api.traffic()
            at_rest = (read_after - read_before) / args.rest_seconds
            print(f"read at rest: {at_rest / 1024:.2f} KiB/s over {args.rest_seconds:.0f} s")
            quiet = verbs(service.url, names, args.calls)
            print(
                f"filter + prioritize over {args.nodes} nodes, quiet: p50 "
                f"{percentile(quiet, 50):.1f} ms, p99 {percentile(quiet, 99):.1f} ms"
            )
            stop = threading.Event()
            writer = threading.Thread(
                target=churn, args=(store, names, args.events_per_second, stop), daemon=True
            )
            writer.start()
            try:
                seen = visibility(service.url, store, names, args.probes)
                busy = verbs(service.url, names, args.calls)
            finally:
                stop.set()
                writer.join()
            print(
                f"event → visible in /filter under {args.events_per_second:.0f} pod events/s: "
                f"p50 {statistics.median(seen):.1f} ms, p99 {percentile(seen, 99):.1f} ms"
            )
            print(
                f"filter + prioritize with {args.events_per_second:.0f} events/s: p50 "
                f"{percentile(busy, 50):.1f} ms, p99 {percentile(busy, 99):.1f} ms"
            )
            print("scheduler RSS now / peak: {:.0f} / {:.0f} MiB".format(*rss(pid)))
            print(f"scheduler requests: {dict(requests)}")
    total, made = agent_budget(args.agent_seconds)
    per_minute = total / (args.agent_seconds / 60)
    print(
        f"one agent at rest: {per_minute:.2f} requests/min ({made} in {args.agent_seconds:.0f} s)"
    )


if __name__ == "__main__":
    main()
