"""The real kube-scheduler placing NPU pods, with the project's extender and without it.

Run: ``.venv/bin/python -m benchmarks.real_scheduler [--nodes 1000 5000 --pods 1000]``. Per
node count: etcd and kube-apiserver of the test bed (no controller manager, no
``TaintNodesByCondition``: the nodes need no kubelet), ``--nodes`` Ready node objects with
``huawei.com/Ascend910: 8`` and their agents' DeviceInfo ConfigMaps, and the scheduler service
(``python -m scheduler_core serve``). Then kube-scheduler v1.36 places ``--pods`` pods of 1, 2,
4 or 8 chips (seeded), all created at once from threads:

- (a) with the extender, as shipped (``daemonset/overlays/kube-scheduler``: filter and bind by
  the service, ``nodeCacheCapable``, over HTTPS with kube-scheduler's client certificate;
  ``--plain-http`` calls every extender over plain HTTP);
- (b) the same profile without extenders: the resource fit alone, kube-scheduler binding;
- (c) the same profile with an extender that decides nothing, on the service's own HTTP server
  and client (``benchmarks/floor_extender.py``), and (d) the same in Go
  (``benchmarks/floor_extender_go``): what calling any extender costs on this machine;
- (e) kube-scheduler-ascend with the ``kube-scheduler-plugin`` overlay's profile: no extender,
  the AscendNPU plugin asking the same service (``/place`` in PreFilter, ``/reserve`` in
  Reserve) and binding with the chips itself (docs/scheduler.md, "The kube-scheduler plugin").

Printed: throughput, pods bound per second for a backlog of ``--pods`` pods created while
kube-scheduler is paused (SIGSTOP; Python cannot create pods as fast as kube-scheduler binds
them), from its release to the last pod bound (bindings seen on a watch); per-pod latency p50 /
p99, creation → bound, of ``--latency-pods`` pods created at ``--rate`` per second; the ratios;
where (a)'s time goes (the service's own time per verb from its ``/metrics``, kube-scheduler's
scheduling-algorithm time per attempt from its ``/metrics``); the CPU each process spent per
pod of the backlog and the API server's requests per pod (on a machine of few cores every
process shares them, and the ratio of throughputs follows the ratio of CPU per pod); and how
many node names reach ``/filter`` per pod (a short run through a counting proxy). The
extenders as processes are ``benchmarks/extenders.py``.
Goal (the issue): ≥ 0.8 × (b) at 5,000 nodes; (e) is how the project meets it. Results:
``benchmarks/data/real_scheduler.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import ssl
import statistics
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.deviceinfo_publisher import configmap
from benchmarks.cpu import cpu_of
from benchmarks.extenders import (
    CountingProxy,
    extender_process,
    floor_command,
    go_floor_command,
    service_command,
)
from benchmarks.pod_watch import PodWatch
from contract.annotations import CHIPS_ANNOTATION
from contract.chip_names import RESOURCE_NAME
from contract.deviceinfo import DeviceInfo
from scheduler_core.service.verbs.plugin import feasible_nodes_to_find
from testbed.build import PLUGIN_SCHEDULER
from testbed.cluster import ExtenderTls, extender_configuration, npu_pod, plugin_configuration
from testbed.control_plane import ControlPlane, Process, scratch, wait_until
from testbed.rest import Obj
from testbed.volcano_service import parse_metrics

SIZES = (1, 2, 4, 8)
THREADS = 8
HEARTBEAT_SWEEP = 120.0  # seconds per rewrite of every DeviceInfo
DATA = Path(__file__).parent / "data" / "real_scheduler.json"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def pod_sizes(pods: int, seed: int) -> list[int]:
    """Chips of each pod ``pod-<i>``, seeded."""
    rng = random.Random(seed)
    return [rng.choice(SIZES) for _ in range(pods)]


# --- the cluster ---------------------------------------------------------------------------


def node_object(name: str) -> Obj:
    """A Ready node as its kubelet would register it (status included at creation)."""
    resources = {RESOURCE_NAME: "8", "cpu": "192", "memory": "1536Gi", "pods": "110"}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def deviceinfo(name: str) -> Obj:
    """The agent's DeviceInfo ConfigMap of ``name``: all 8 chips healthy, written now."""
    now = int(time.time())
    return configmap(
        name, DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), update_time=now)
    )


def populate(plane: ControlPlane, count: int) -> list[str]:
    """``count`` nodes and their DeviceInfo ConfigMaps, from threads."""
    names = [f"node-{i:05d}" for i in range(count)]
    local = threading.local()

    def make(name: str) -> None:
        if not hasattr(local, "rest"):
            local.rest = plane.rest()
        local.rest.create("/api/v1/nodes", node_object(name))
        local.rest.create("/api/v1/namespaces/kube-system/configmaps", deviceinfo(name))

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(make, names))
    return names


@contextmanager
def heartbeats(
    plane: ControlPlane, names: list[str], sweep: float = HEARTBEAT_SWEEP
) -> Iterator[None]:
    """The agents' DeviceInfo rewritten with a new UpdateTime, one sweep over all nodes per
    ``sweep`` seconds: the service leaves out a node whose DeviceInfo is over MAX_AGE (300 s)
    old (contract/deviceinfo.py). Real agents write every 60 s (agent/deviceinfo_publisher.py
    HEARTBEAT); half that rate keeps the added API load down."""
    stop = threading.Event()

    def beat() -> None:
        rest = plane.rest()
        base = "/api/v1/namespaces/kube-system/configmaps"
        while not stop.is_set():
            began = time.monotonic()
            for i, name in enumerate(names):
                wanted = began + sweep * i / len(names)
                if stop.wait(max(0.0, wanted - time.monotonic())):
                    return
                body = deviceinfo(name)
                rest.request("PUT", f"{base}/{body['metadata']['name']}", body)

    thread = threading.Thread(target=beat, name="heartbeats", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def named_pod(namespace: str, name: str, chips: int) -> Obj:
    pod = npu_pod(chips, {})
    pod["metadata"].update(name=name, namespace=namespace)
    return pod


def clear(plane: ControlPlane, ns: str, timeout: float = 300) -> None:
    """Delete every pod of ``ns`` at once (no kubelet to wait for: grace 0)."""
    admin = plane.rest()
    admin.request("DELETE", f"/api/v1/namespaces/{ns}/pods", query={"gracePeriodSeconds": "0"})
    wait_until(
        lambda: not admin.get(f"/api/v1/namespaces/{ns}/pods", limit="1")["items"],
        timeout,
        f"pods of {ns} deleted",
    )


# --- watching the bindings -----------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    at: float  # time.monotonic() when the watch showed spec.nodeName
    node: str
    chips: str  # the extender's chips annotation, "" without it


class BindWatch:
    """The pods of a namespace: when each first shows a node (a ``PodWatch`` of them)."""

    def __init__(self, plane: ControlPlane, ns: str) -> None:
        self.bound: dict[str, Bound] = {}
        self._watch = PodWatch(plane, [self._handle], f"/api/v1/namespaces/{ns}/pods")

    def _handle(self, kind: str, pod: Obj, at: float) -> None:
        node = pod.get("spec", {}).get("nodeName")
        name = pod["metadata"].get("name")
        if kind in ("ADDED", "MODIFIED") and node and name not in self.bound:
            chips = (pod["metadata"].get("annotations") or {}).get(CHIPS_ANNOTATION, "")
            self.bound[name] = Bound(at, node, chips)

    def wait(self, count: int, timeout: float) -> None:
        self._watch.wait_for(lambda: len(self.bound) >= count, timeout, f"{count} pods bound")

    def stop(self) -> None:
        self._watch.stop()


# --- metrics -------------------------------------------------------------------------------


def scrape(url: str, context: ssl.SSLContext | None = None) -> dict[str, float]:
    """A Prometheus text exposition as {series: value}."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10, context=context) as response:
        return parse_metrics(response.read().decode())


def mean_ms(before: dict[str, float], after: dict[str, float], stem: str) -> float:
    """Mean of a histogram ``stem`` (``name{labels}``) between two scrapes, in ms."""
    name, _, labels = stem.partition("{")
    suffix = "{" + labels if labels else ""
    total = after.get(f"{name}_sum{suffix}", 0.0) - before.get(f"{name}_sum{suffix}", 0.0)
    count = after.get(f"{name}_count{suffix}", 0.0) - before.get(f"{name}_count{suffix}", 0.0)
    return total / count * 1e3 if count else 0.0


def admin_context(plane: ControlPlane) -> ssl.SSLContext:
    """The admin's client certificate, the server's not checked (kube-scheduler's serving
    certificate is self-signed)."""
    user = yaml.safe_load(plane.admin.read_text())["users"][0]["user"]
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    return context


def scheduler_metrics(plane: ControlPlane, name: str) -> dict[str, float]:
    """kube-scheduler's /metrics, read as the admin (its secure port authenticates and
    authorizes through the API server)."""
    port = next(
        a.split("=", 1)[1] for a in plane.processes[name].command if a.startswith("--secure-port=")
    )
    url, context = f"https://127.0.0.1:{port}", admin_context(plane)
    found: dict[str, float] = {}

    def read() -> bool:
        nonlocal found
        try:
            found = scrape(url, context)
        except urllib.error.HTTPError as refused:
            # A kube-scheduler just started may not have loaded the client CA from the
            # API server's extension-apiserver-authentication ConfigMap yet: the admin's
            # certificate then reads as anonymous, and is refused (seen once in make test).
            if refused.code != 403:
                raise
            return False
        return True

    wait_until(read, 60, f"{name}'s /metrics read as the admin")
    return found


def api_requests(plane: ControlPlane) -> dict[str, float]:
    """kube-apiserver's requests so far by verb, resource and subresource."""
    counted: dict[str, float] = {}
    for series, value in scrape(plane.url, admin_context(plane)).items():
        name, _, labels = series.partition("{")
        if name == "apiserver_request_total":
            label = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            parts = (label.get(k) for k in ("verb", "resource", "subresource"))
            key = " ".join(filter(None, parts))
            counted[key] = counted.get(key, 0.0) + value
    return counted


ALGORITHM = "scheduler_scheduling_algorithm_duration_seconds"


# --- one run -------------------------------------------------------------------------------


@dataclass
class Run:
    mode: str  # "extender" or "resource-only"
    pods: int
    seconds: float  # the backlog released → its last pod bound
    pods_per_second: float
    latency_pods: int
    rate: float  # pods created per second in the latency run
    p50_ms: float  # creation → bound, in the latency run
    p99_ms: float
    algorithm_ms: float  # kube-scheduler's filter + score per attempt (extender calls included)
    service_ms: dict[str, float] = field(default_factory=dict)  # the service's time per verb
    # CPU seconds per pod of each process over the backlog (release → last bound): on a
    # machine of few cores, what the extender costs the others shows here first.
    cpu_ms: dict[str, float] = field(default_factory=dict)
    requests: dict[str, float] = field(default_factory=dict)  # API requests per pod
    placed: dict[str, Bound] = field(default_factory=dict, repr=False)  # the backlog's pods


@contextmanager
def kube_scheduler(
    plane: ControlPlane, configuration: dict[str, Any], name: str, command: str
) -> Iterator[Process]:
    process = plane.start_scheduler(configuration, name, program=command)
    try:
        yield process
    finally:
        process.stop()
        del plane.processes[name]


def create_pods(
    plane: ControlPlane, ns: str, sizes: list[int], prefix: str, rate: float | None = None
) -> dict[str, float]:
    """Pods ``<prefix>-<i>`` of ``sizes`` chips, from threads, at once or ``rate`` per
    second: when each creation began (time.monotonic())."""
    created: dict[str, float] = {}
    local = threading.local()
    began = time.monotonic()

    def create(item: tuple[int, int]) -> None:
        i, chips = item
        if rate:
            time.sleep(max(0.0, began + i / rate - time.monotonic()))
        if not hasattr(local, "rest"):
            local.rest = plane.rest()
        pod = f"{prefix}-{i:05d}"
        created[pod] = time.monotonic()
        local.rest.create(f"/api/v1/namespaces/{ns}/pods", named_pod(ns, pod, chips))

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(create, enumerate(sizes)))
    return created


@dataclass
class Backlog:
    released: float  # time.monotonic() when kube-scheduler was let go
    placed: dict[str, Bound]
    cpu_ms: dict[str, float]  # per pod, per process
    requests: dict[str, float]  # API requests per pod, by verb and resource


def backlog(
    plane: ControlPlane,
    process: Process,
    ns: str,
    sizes: list[int],
    *,
    pids: dict[str, int],
    timeout: float,
) -> Backlog:
    """One pod per entry of ``sizes`` (chips) created while kube-scheduler is paused
    (SIGSTOP), so that pod creation does not bound the figure, then released; the CPU of
    ``pids`` and the API server's requests counted from the release to the last bind."""
    watch = BindWatch(plane, ns)
    try:
        process.signal(signal.SIGSTOP)
        try:
            create_pods(plane, ns, sizes, "pod")
        finally:
            requests_before = api_requests(plane)
            cpu_before = cpu_of(pids)
            process.signal(signal.SIGCONT)
        released = time.monotonic()
        watch.wait(len(sizes), timeout)
        cpu_after = cpu_of(pids)
        requests_after = api_requests(plane)
    finally:
        watch.stop()
    per_pod = 1 / len(sizes)
    return Backlog(
        released,
        dict(watch.bound),
        {k: (cpu_after[k] - cpu_before[k]) * 1e3 * per_pod for k in pids},
        {
            k: round((v - requests_before.get(k, 0.0)) * per_pod, 2)
            for k, v in requests_after.items()
            if v > requests_before.get(k, 0.0)
        },
    )


def place(
    plane: ControlPlane,
    *,
    configuration: dict[str, Any],
    mode: str,
    sizes: list[int],
    service: str | None,
    service_pid: int,
    floor_pid: int | None = None,
    latency_pods: int,
    rate: float,
    timeout: float,
    command: str = "kube-scheduler",
) -> Run:
    """kube-scheduler with ``configuration``: (1) throughput: the ``backlog`` of ``sizes``;
    (2) latency: ``latency_pods`` pods created at ``rate`` per second. The pods are deleted
    after each. ``service``: the extender's URL when it is asked; its process runs in both."""
    ns = plane.rest().ensure_namespace(f"run-{mode}")  # with its default ServiceAccount
    with kube_scheduler(plane, configuration, f"kube-scheduler-{mode}", command) as process:
        # One pod first: kube-scheduler's informers have synced and the extender answers.
        warm = BindWatch(plane, ns)
        try:
            plane.rest().create(f"/api/v1/namespaces/{ns}/pods", named_pod(ns, "warm", 1))
            warm.wait(1, 120)
        finally:
            warm.stop()
        clear(plane, ns)
        before = scheduler_metrics(plane, process.name)
        served = scrape(service) if service else {}
        pids = {name: plane.processes[name].pid for name in ("etcd", "kube-apiserver")}
        pids["kube-scheduler"] = process.pid
        pids["scheduler-service"] = service_pid
        if floor_pid is not None:
            pids["floor-extender"] = floor_pid
        pids["benchmark"] = os.getpid()
        run = backlog(plane, process, ns, sizes, pids=pids, timeout=timeout)
        after = scheduler_metrics(plane, process.name)
        served_after = scrape(service) if service else {}
        clear(plane, ns)
        latency = [0.0]
        if latency_pods:
            paced = BindWatch(plane, ns)
            try:
                created = create_pods(plane, ns, sizes[:latency_pods], "paced", rate)
                paced.wait(len(created), timeout)
            finally:
                paced.stop()
            latency = [(paced.bound[p].at - created[p]) * 1e3 for p in created]
            clear(plane, ns)
    seconds = max(b.at for b in run.placed.values()) - run.released
    verbs = ("place", "reserve") if mode == "plugin" else ("filter", "prioritize", "bind")
    stem = "ascend_scheduler_request_seconds"
    return Run(
        mode,
        len(sizes),
        seconds,
        len(sizes) / seconds,
        latency_pods,
        rate,
        statistics.median(latency),
        percentile(latency, 99),
        mean_ms(before, after, ALGORITHM),
        {v: mean_ms(served, served_after, f'{stem}{{verb="{v}"}}') for v in verbs}
        if service
        else {},
        run.cpu_ms,
        run.requests,
        run.placed,
    )


@dataclass
class Scale:
    nodes: int
    setup_seconds: float
    extender: Run
    plain: Run
    floor: Run  # (c): kube-scheduler with an extender that decides nothing
    go_floor: Run  # (d): the same in Go (benchmarks/floor_extender_go)
    plugin: Run  # (e): kube-scheduler-ascend, the service asked by the AscendNPU plugin
    names_per_filter: list[int]  # from the counting run
    feasible_to_find: int  # kube-scheduler's numFeasibleNodesToFind at this size

    def summary(self) -> dict[str, Any]:
        names = self.names_per_filter
        out: dict[str, Any] = {
            "nodes": self.nodes,
            "setup_seconds": round(self.setup_seconds, 1),
            "extender_over_plain": round(
                self.extender.pods_per_second / self.plain.pods_per_second, 3
            ),
            "plain_over_extender": round(
                self.plain.pods_per_second / self.extender.pods_per_second, 3
            ),
            "floor_over_plain": round(self.floor.pods_per_second / self.plain.pods_per_second, 3),
            "go_floor_over_plain": round(
                self.go_floor.pods_per_second / self.plain.pods_per_second, 3
            ),
            "plugin_over_plain": round(self.plugin.pods_per_second / self.plain.pods_per_second, 3),
            "extender_over_floor": round(
                self.extender.pods_per_second / self.floor.pods_per_second, 3
            ),
            "names_per_filter": {
                "calls": len(names),
                "min": min(names, default=0),
                "median": statistics.median(names) if names else 0,
                "max": max(names, default=0),
            },
            "feasible_nodes_to_find": self.feasible_to_find,
        }
        for run in (self.extender, self.plain, self.floor, self.go_floor, self.plugin):
            fields = asdict(run)
            del fields["placed"]
            out[run.mode] = {
                k: round(v, 2) if isinstance(v, float) else v for k, v in fields.items()
            }
            if run.service_ms:
                out[run.mode]["service_ms"] = {k: round(v, 2) for k, v in run.service_ms.items()}
            out[run.mode]["cpu_ms"] = {k: round(v, 2) for k, v in run.cpu_ms.items()}
        return out


def measure(
    nodes: int,
    pods: int,
    seed: int,
    *,
    count_pods: int = 50,
    latency_pods: int = 150,
    rate: float = 10.0,
    timeout: float = 600,
    client_qps: float | None = None,
    https: bool = True,
) -> Scale:
    """The three runs (and the counting run) on a control plane of ``nodes`` nodes of its
    own. ``client_qps``: kube-scheduler's client rate limit (``clientConnection.qps``, burst
    twice that) in every run; unset, its default (50, burst 100). ``https``: kube-scheduler
    calls the extenders over HTTPS with its client certificate, as the chart ships it; else
    over plain HTTP."""
    sizes = pod_sizes(pods, seed)
    workdir = scratch("rs")
    plane = ControlPlane(workdir, admission_plugins_off=("TaintNodesByCondition",))
    tls = ExtenderTls.make(workdir / "extender-tls") if https else None
    try:
        plane.start(controllers=False)
        started = time.monotonic()
        names = populate(plane, nodes)
        log = workdir / "scheduler-service.log"
        with (
            heartbeats(plane, names),
            extender_process(service_command(plane.admin, tls), tls, log) as service,
        ):
            wait_until(
                lambda: scrape(service.probes).get("ascend_scheduler_npu_nodes") == nodes,
                120,
                f"the service sees {nodes} NPU nodes",
            )
            setup = time.monotonic() - started

            def run(
                configuration: dict[str, Any],
                mode: str,
                count: int,
                paced: int,
                floor_pid: int | None = None,
                *,
                command: str = "kube-scheduler",
            ) -> Run:
                return place(
                    plane,
                    service_pid=service.pid,
                    floor_pid=floor_pid,
                    configuration=configuration,
                    mode=mode,
                    sizes=sizes[:count],
                    service=service.probes if mode in ("extender", "plugin") else None,
                    latency_pods=paced,
                    rate=rate,
                    timeout=timeout,
                    command=command,
                )

            def limited(configuration: dict[str, Any]) -> dict[str, Any]:
                if client_qps is not None:
                    limit = {"qps": client_qps, "burst": int(2 * client_qps)}
                    configuration["clientConnection"] = limit
                return configuration

            def calling(url: str) -> dict[str, Any]:
                return limited(extender_configuration(url, tls=tls, leader_elect=False))

            shipped = calling(service.url)
            extender = run(shipped, "extender", pods, latency_pods)
            proxy = CountingProxy(service.url, tls)
            try:
                counted = extender_configuration(proxy.url, leader_elect=False)
                run(counted, "counted", count_pods, 0)
            finally:
                proxy.stop()
            plain_configuration = {k: v for k, v in shipped.items() if k != "extenders"}
            plain = run(plain_configuration, "resource-only", pods, latency_pods)
            # (e) right after (b), which it is measured against: run last, after five other
            # backlogs on the same control plane, it measured 0.66 where alternating A/B pairs
            # of (b) and (e) on a fresh one measured 0.81-1.16 (docs/results.md).
            asked = limited(plugin_configuration(service.url, tls=tls, leader_elect=False))
            plugin = run(asked, "plugin", pods, latency_pods, command=PLUGIN_SCHEDULER)
            floor_log = workdir / "floor-extender.log"
            with extender_process(floor_command(plane.admin, tls), tls, floor_log) as floor:
                floored = run(calling(floor.url), "floor", pods, latency_pods, floor.pid)
            built = go_floor_command(plane, tls, workdir / "floor-extender-go")
            with extender_process(built, tls, floor_log) as floor:
                go_floored = run(calling(floor.url), "go-floor", pods, latency_pods, floor.pid)
        return Scale(
            nodes,
            setup,
            extender,
            plain,
            floored,
            go_floored,
            plugin,
            proxy.names_per_filter,
            feasible_nodes_to_find(nodes),
        )
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def table(scales: list[Scale]) -> str:
    rows = [
        "| nodes | kube-scheduler | pods/s (backlog) | latency p50 / p99 (paced) "
        "| algorithm ms/pod | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for scale in scales:
        plain = scale.plain.pods_per_second
        for run, label, shown in (
            (
                scale.extender,
                "(a) with extender",
                f"(a)/(b) {scale.extender.pods_per_second / plain:.2f}",
            ),
            (scale.plain, "(b) resource fit only", ""),
            (
                scale.floor,
                "(c) extender deciding nothing",
                f"(c)/(b) {scale.floor.pods_per_second / plain:.2f}",
            ),
            (
                scale.go_floor,
                "(d) the same in Go",
                f"(d)/(b) {scale.go_floor.pods_per_second / plain:.2f}",
            ),
            (
                scale.plugin,
                "(e) kube-scheduler-ascend, the plugin",
                f"(e)/(b) {scale.plugin.pods_per_second / plain:.2f}",
            ),
        ):
            rows.append(
                f"| {scale.nodes:,} | {label} | {run.pods_per_second:.1f} | {run.p50_ms:.0f} / "
                f"{run.p99_ms:.0f} ms | {run.algorithm_ms:.1f} | {shown} |"
            )
    return "\n".join(rows)


def _flags(args: argparse.Namespace) -> Iterator[str]:
    """The command line's options as given (``--out`` aside)."""
    for key, value in vars(args).items():
        flag = f"--{key.replace('_', '-')}"
        if key == "out" or value is None or value is False:
            continue
        if value is True:
            yield flag
        else:
            yield f"{flag} {' '.join(map(str, value)) if isinstance(value, list) else value}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--count-pods", type=int, default=50, help="pods of the counting run")
    parser.add_argument("--latency-pods", type=int, default=150, help="pods of the paced run")
    parser.add_argument("--rate", type=float, default=10.0, help="pods/s of the paced run")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--client-qps",
        type=float,
        help="kube-scheduler's clientConnection.qps in both runs (default: its own, 50)",
    )
    parser.add_argument(
        "--plain-http",
        action="store_true",
        help="kube-scheduler calls the extenders over plain HTTP (default: HTTPS, as shipped)",
    )
    parser.add_argument("--out", type=Path, default=DATA)
    args = parser.parse_args()
    scales = []
    for nodes in args.nodes:
        scale = measure(
            nodes,
            args.pods,
            args.seed,
            count_pods=args.count_pods,
            latency_pods=args.latency_pods,
            rate=args.rate,
            client_qps=args.client_qps,
            https=not args.plain_http,
        )
        scales.append(scale)
        summary = scale.summary()
        print(f"{nodes:,} nodes (setup {scale.setup_seconds:.0f} s): {json.dumps(summary)}")
    print(table(scales))
    for scale in scales:
        names = scale.names_per_filter
        print(
            f"{scale.nodes:,} nodes: node names per /filter median "
            f"{statistics.median(names):.0f} (min {min(names)}, max {max(names)}, "
            f"{len(names)} calls); numFeasibleNodesToFind = {scale.feasible_to_find}"
        )
        for run in (scale.extender, scale.plain, scale.floor, scale.go_floor, scale.plugin):
            print(
                f"{scale.nodes:,} nodes, {run.mode}: CPU ms per pod "
                + ", ".join(f"{name} {ms:.1f}" for name, ms in run.cpu_ms.items())
                + f"; total {sum(run.cpu_ms.values()):.1f}"
            )
        for run in (scale.extender, scale.plugin):
            print(
                f"{scale.nodes:,} nodes, {run.mode}: the service's own time per call: "
                + ", ".join(f"{verb} {ms:.2f} ms" for verb, ms in run.service_ms.items())
            )
    results = {
        "command": "python -m benchmarks.real_scheduler " + " ".join(_flags(args)),
        "https": not args.plain_http,
        "seed": args.seed,
        "scales": [s.summary() for s in scales],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
