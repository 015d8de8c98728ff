"""The real Volcano placing NPU pods: Huawei's plugin beside our extender and our in-process
adapter, one after the other.

Run: ``.venv/bin/python -m benchmarks.volcano_speed --nodes 1000 --pods 300 [--period 1s]
[--seed 7] [--sides huawei extender adapter]``. Each side gets a control plane of its own
(etcd, kube-apiserver and kube-controller-manager of the test bed, started afresh, so that
nothing of one side, neither its objects nor Volcano's CRDs of another version nor our
admission policies, is there for the other) holding the same cluster and the same backlog:

- ``--nodes`` Ascend 910 x8 servers as Node objects without kubelets: ``huawei.com/Ascend910: 8``
  with cpu, memory and pods, Ready, an InternalIP, the labels Huawei's installation gives an
  Atlas 800 (``accelerator``, ``accelerator-type: module``, ``host-arch``, ``servertype``,
  ``node.kubernetes.io/npu.chip.name``) and the annotations Huawei's device plugin writes
  (``baseDeviceInfos`` etc.), and each node's DeviceInfo ConfigMap as our agent writes it.
  Without kubelets no node heartbeats its Lease, so the controller manager runs without its
  node-lifecycle controller (which would taint every node unreachable after 50 s), and the API
  server without the ``TaintNodesByCondition`` admission plugin (whose not-ready taint that
  controller would lift).
- The agents' part the schedulers read, played by this process: each node's DeviceInfo
  rewritten when a pod is bound there with its chips (free = healthy chips no bound pod holds,
  as ``agent/deviceinfo_publisher.py`` publishes it), and one sweep over all nodes per 120 s
  as the heartbeat (the service leaves out a DeviceInfo older than 300 s). Huawei's plugin,
  with ``self-maintain-available-card: "false"``, takes the free chips from there, and refuses
  a node whose free list is longer than Volcano's idle count (``plugin/node.go``
  checkNPUResourceStable).
- The backlog: ``--pods`` plain pods of 1, 2, 4 or 8 chips (seeded), ``schedulerName:
  volcano``, labelled ``ring-controller.atlas: ascend-910`` as Huawei's 910 samples are, no
  nodeSelector (Huawei's plugin then takes the 910 x8 handler); Volcano's pg controller makes a
  PodGroup for each. Created from threads as fast as the API server takes them, while the
  scheduler runs.

Side A, Huawei's plugin: Volcano v1.12.0's vc-controller-manager and vc-scheduler with
``volcano-npu_v26.1.0.so``, Huawei's shipped ``volcano-scheduler.conf`` with the init-params
``useClusterInfoManager`` and ``self-maintain-available-card`` ``"false"`` (no ClusterD here).
Side B, ours: Volcano v1.15.0 (v1.12.0's extender plugin has no allocateFunc), the same
configuration without Huawei's plugin and with our extender entry as the chart ships it
(``ascend-npu-volcano-extender``, merged by ``scheduler_core.volcano_config.merged`` with the
token in its URL), Volcano trusting the service's CA through ``SSL_CERT_DIR``; the service
``python -m scheduler_core serve`` with the chart's ``scheduler.yaml`` and arguments over HTTPS,
under its ServiceAccount's token, the overlay's RBAC and admission policies applied (not its
workloads).
Side C, our adapter: Volcano v1.12.0 (as side A) loading ``ascend-npu-adapter.so``
(``volcano_adapter/``) where side A loads Huawei's plugin, its entry as
the chart's entry with ``volcano.adapter`` merged as its merge Job writes it, the same service.

Before the backlog one 1-chip pod is placed and deleted (both schedulers have synced and, on
sides B and C, Volcano reaches the service). Per side: pods bound per second, from the first bind to
the last and from the first pod's submission to the last bind; per-pod latency p50 / p99,
creation request → bound as a watch sees it; Volcano's sessions and their time (its
``/metrics``: ``volcano_e2e_scheduling_latency_milliseconds``, per action and per plugin);
CPU seconds of each process (``/proc/<pid>/stat``) over submission → last bind; for sides B
and C the service's calls and time by verb (its ``/metrics``). Checked: every bound pod
carries its chips (``huawei.com/Ascend910``), legal on a 910 x8 server (1, 2 or 4 in one ring
of four, or all 8), no chip given twice and no node holding more than 8. A side whose pods are
not all bound in time (``--timeout``; the warm-up pod: 300 s) is reported as failed, with what
vc-scheduler logged most, and the run goes on. Results: ``benchmarks/data/volcano_speed.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.deviceinfo_publisher import configmap
from agent.node_annotations import BASE_DEVICE_INFOS, SERVER_INDEX, SERVER_TYPE, SUPER_POD_ID
from benchmarks.cpu import cpu_seconds
from benchmarks.pod_watch import PodWatch
from benchmarks.real_scheduler import percentile, pod_sizes
from contract.annotations import (
    ACCELERATOR_TYPE_LABEL,
    CHIPS_ANNOTATION,
    RING_CONTROLLER_LABEL,
    SERVER_TYPE_LABEL,
)
from contract.chip_names import RESOURCE_NAME, InvalidInput, chip_name, parse_chip_list
from contract.deviceinfo import DeviceInfo
from contract.go_json import go_json
from contract.rank_table import UNKNOWN
from contract.vnpu import CHIP_NAME_LABEL
from scheduler_core.volcano_config import merged
from testbed.build import ROOT
from testbed.control_plane import ControlPlane, scratch, wait_until
from testbed.rest import Obj, Rest, RestError
from testbed.volcano import (
    HUAWEI_VERSION,
    Volcano,
    charts_adapter_entry,
    open_queue,
    running_volcano,
)
from testbed.volcano import NAMESPACE as VOLCANO_NAMESPACE
from testbed.volcano_service import (
    CONFIGMAP,
    KEY,
    Service,
    huawei_configuration,
    our_service,
    parse_metrics,
    service_metrics,
    without_huawei,
)

OUR_VERSION = "v1.15.0"  # the first Volcano built here whose extender plugin has allocateFunc
LABELS = {
    "huawei": "A: Huawei's plugin",
    "extender": "B: our extender",
    "adapter": "C: our adapter",
}
CHIPS = 8
RING = 4
THREADS = 8
BACKLOG = "backlog"  # the namespace of the measured pods
WARM = "warm"  # the namespace of the warm-up pod
HEARTBEAT_SWEEP = 120.0  # seconds per rewrite of every DeviceInfo (real agents: 60)
# No kubelet heartbeats a Lease: the node-lifecycle controller would taint every node.
CONTROLLERS = "--controllers=*,-node-lifecycle-controller"
NODE_LABELS = {
    "accelerator": "huawei-Ascend910",
    ACCELERATOR_TYPE_LABEL: "module",
    "host-arch": "huawei-arm",
    SERVER_TYPE_LABEL: "Ascend910-32",
    CHIP_NAME_LABEL: "910A",
}
E2E = "volcano_e2e_scheduling_latency_milliseconds"
DATA = Path(__file__).parent / "data" / "volcano_speed.json"


# --- the cluster ---------------------------------------------------------------------------


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def node_object(i: int) -> Obj:
    """An Atlas 800 (910 x8) as its kubelet and Huawei's device plugin leave it."""
    name = node_name(i)
    base = {
        chip_name(c): {"IP": f"10.{100 + c}.{i // 250}.{i % 250 + 1}", "SuperDeviceID": 0}
        for c in range(CHIPS)
    }
    resources = {RESOURCE_NAME: str(CHIPS), "cpu": "192", "memory": "1536Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**NODE_LABELS, "kubernetes.io/hostname": name},
            "annotations": {
                BASE_DEVICE_INFOS: go_json(base),
                SUPER_POD_ID: str(UNKNOWN),
                SERVER_INDEX: str(UNKNOWN),
                SERVER_TYPE: "",
            },
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [
                {"type": "InternalIP", "address": f"10.80.{i // 250}.{i % 250 + 1}"},
                {"type": "Hostname", "address": name},
            ],
        },
    }


def deviceinfo(name: str, free: frozenset[int], update_time: int) -> Obj:
    """The agent's DeviceInfo ConfigMap of ``name``: no faults, ``free`` free."""
    return configmap(name, DeviceInfo(free, frozenset(), frozenset(), update_time=update_time))


def populate(plane: ControlPlane, count: int) -> list[str]:
    """``count`` nodes, each after its DeviceInfo, from threads. The status is kept as
    given at creation (a kubelet registers its Node so)."""
    names = [node_name(i) for i in range(count)]
    local = threading.local()
    now = int(time.time())

    def make(i: int) -> None:
        if not hasattr(local, "rest"):
            local.rest = plane.rest()
        rest: Rest = local.rest
        all_free = frozenset(range(CHIPS))
        rest.create(
            "/api/v1/namespaces/kube-system/configmaps", deviceinfo(names[i], all_free, now)
        )
        rest.create("/api/v1/nodes", node_object(i))

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(make, range(count)))
    node = plane.rest().get(f"/api/v1/nodes/{names[0]}")
    if node["status"].get("allocatable", {}).get(RESOURCE_NAME) != str(CHIPS):
        raise RuntimeError(f"the API server dropped the node's status: {node['status']}")
    return names


def npu_pod(name: str, namespace: str, chips: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {RING_CONTROLLER_LABEL: "ascend-910"},
        },
        "spec": {
            "schedulerName": "volcano",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "ascend-training:latest",
                    "resources": {
                        "requests": {RESOURCE_NAME: str(chips)},
                        "limits": {RESOURCE_NAME: str(chips)},
                    },
                }
            ],
        },
    }


def written_chips(pod: Obj) -> tuple[int, ...] | None:
    """The chips a scheduler wrote on ``pod`` (None: none, or not a chip list)."""
    text = (pod["metadata"].get("annotations") or {}).get(CHIPS_ANNOTATION)
    if not text:
        return None
    try:
        return parse_chip_list(text)
    except InvalidInput:
        return None


# --- watching pods: the binds, and the agents' DeviceInfo ----------------------------------


class Binds:
    """When each pod of ``namespace`` was first seen bound (a PodWatch handler)."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.bound: dict[str, float] = {}

    def handle(self, kind: str, pod: Obj, at: float) -> None:
        meta = pod["metadata"]
        if kind == "DELETED" or meta.get("namespace") != self.namespace:
            return
        if pod.get("spec", {}).get("nodeName") and meta["name"] not in self.bound:
            self.bound[meta["name"]] = at


class Agents:
    """The part of every node's agent the schedulers read: its DeviceInfo, free = the chips no
    bound pod holds (a PodWatch handler notes the chips of each bound pod and gives them back
    when it is deleted), written at once when that changes and once per ``sweep`` seconds
    (spread over the sweep) as the heartbeat. UpdateTime in seconds, as the agent writes it,
    rising with each write of a node."""

    def __init__(self, plane: ControlPlane, names: list[str], sweep: float) -> None:
        self._rest = plane.rest()
        self._names = names
        self._sweep = sweep
        self._held: dict[str, dict[str, tuple[int, ...]]] = {n: {} for n in names}
        self._pods: dict[str, tuple[str, tuple[int, ...]]] = {}  # uid → node, chips
        self._written = {n: int(time.time()) for n in names}
        self._dirty: dict[str, None] = {}  # ordered
        self._wake = threading.Condition()
        self._stopped = False
        self.writes = 0
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._run, name="agents", daemon=True)
        self._thread.start()

    def handle(self, kind: str, pod: Obj, at: float) -> None:
        uid = pod["metadata"].get("uid", "")
        node = pod.get("spec", {}).get("nodeName")
        if kind == "DELETED":
            gone = self._pods.pop(uid, None)
            if gone is not None:
                self._held[gone[0]].pop(uid, None)
                self._mark(gone[0])
            return
        if not node or uid in self._pods or node not in self._held:
            return
        chips = written_chips(pod)
        if chips is None:
            return  # bound before its chips show: a later event carries them
        self._pods[uid] = (node, chips)
        self._held[node][uid] = chips
        self._mark(node)

    def _mark(self, node: str) -> None:
        with self._wake:
            self._dirty[node] = None
            self._wake.notify()

    def _run(self) -> None:
        step = self._sweep / max(1, len(self._names))
        beat, index = time.monotonic() + step, 0
        while True:
            with self._wake:
                self._wake.wait_for(
                    lambda: self._stopped or bool(self._dirty),
                    max(0.0, beat - time.monotonic()),
                )
                if self._stopped:
                    return
                now = time.monotonic()
                if self._dirty:
                    node = next(iter(self._dirty))
                    del self._dirty[node]
                elif now >= beat:
                    node = self._names[index]
                    index = (index + 1) % len(self._names)
                    beat = max(beat + step, now - 10 * step)  # no burst after a stall
                else:
                    continue
                taken: set[int] = set()
                for chips in self._held[node].values():
                    taken.update(chips)
                update_time = max(int(time.time()), self._written[node] + 1)
                self._written[node] = update_time
            body = deviceinfo(node, frozenset(range(CHIPS)) - taken, update_time)
            try:
                name = body["metadata"]["name"]
                self._rest.request("PUT", f"/api/v1/namespaces/kube-system/configmaps/{name}", body)
                self.writes += 1
            except (RestError, OSError) as failed:
                self.errors.append(f"{node}: {failed}")

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
        self._thread.join(timeout=30)


# --- metrics -------------------------------------------------------------------------------


def histograms(
    before: dict[str, float], after: dict[str, float], name: str
) -> dict[str, tuple[int, float]]:
    """Each labelled series of histogram ``name`` between two scrapes: {labels: (count, sum)}
    (labels as written, "" for none)."""
    found: dict[str, tuple[int, float]] = {}
    for series, value in after.items():
        if series == f"{name}_count" or series.startswith(f"{name}_count{{"):
            labels = series.removeprefix(f"{name}_count")
            count = value - before.get(series, 0.0)
            total = after.get(f"{name}_sum{labels}", 0.0) - before.get(f"{name}_sum{labels}", 0.0)
            if count:
                found[labels] = (round(count), total)
    return found


def label(labels: str, key: str) -> str:
    """The value of ``key`` in ``{a="x",b="y"}``."""
    for part in labels.strip("{}").split(","):
        name, _, value = part.partition("=")
        if name == key:
            return value.strip('"')
    return ""


# --- one side ------------------------------------------------------------------------------


@dataclass
class Side:
    key: str  # one of LABELS
    label: str
    volcano: str
    nodes: int
    pods: int
    setup_seconds: float
    submit_seconds: float  # creating the backlog took
    first_to_last_seconds: float
    submit_to_last_seconds: float
    pods_per_second: float  # first bind → last
    pods_per_second_from_submit: float
    p50_ms: float  # creation request → bound
    p99_ms: float
    sessions: int  # ended from submission through the first to end after the last bind
    session_ms: float  # their mean e2e time (volcano_e2e_scheduling_latency_milliseconds)
    session_seconds: float  # their e2e time added up
    actions_ms: dict[str, float]  # mean per run, by action (one run per session)
    action_runs: dict[str, int]
    plugins_ms: dict[str, float]  # mean per session, by "<plugin> <OnSessionOpen|Close>"
    cpu_seconds: dict[str, float]  # per process, submission → last bind
    verbs: dict[str, int] = field(default_factory=dict)  # sides B and C: calls by verb
    verb_ms: dict[str, float] = field(default_factory=dict)  # mean service time by verb
    bound: int = 0
    with_chips: int = 0
    illegal: int = 0  # chips not legal for the request on a 910 x8 server
    chips_twice: int = 0  # nodes where a chip was given twice
    over_capacity: int = 0  # nodes asked more than 8 chips by their pods
    deviceinfo_writes: int = 0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)  # os.getloadavg() at the end

    def summary(self) -> dict[str, Any]:
        def rounded(value: Any) -> Any:
            if isinstance(value, float):
                return round(value, 3)
            if isinstance(value, dict):
                return {k: rounded(v) for k, v in value.items()}
            if isinstance(value, tuple | list):
                return [rounded(v) for v in value]
            return value

        return {k: rounded(v) for k, v in asdict(self).items()}


def legal(asked: int, chips: tuple[int, ...]) -> bool:
    """Huawei's 910 x8 rule: 1, 2 or 4 chips inside one ring of four, or all eight."""
    if len(chips) != asked or len(set(chips)) != asked:
        return False
    return asked == CHIPS or (asked in (1, 2, 4) and len({c // RING for c in chips}) == 1)


def check(side: Side, pods: list[Obj]) -> None:
    """The placement's checks on the backlog's pods as the API server has them at the end."""
    per_node: dict[str, list[int]] = {}
    asked_per_node: dict[str, int] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        side.bound += 1
        asked = int(pod["spec"]["containers"][0]["resources"]["requests"][RESOURCE_NAME])
        asked_per_node[node] = asked_per_node.get(node, 0) + asked
        chips = written_chips(pod)
        if chips is None:
            continue
        side.with_chips += 1
        side.illegal += not legal(asked, chips)
        per_node.setdefault(node, []).extend(chips)
    side.chips_twice = sum(len(c) != len(set(c)) for c in per_node.values())
    side.over_capacity = sum(asked > CHIPS for asked in asked_per_node.values())


def warm_up(plane: ControlPlane, watch: PodWatch, binds: Binds, timeout: float) -> None:
    """One 1-chip pod placed (both schedulers synced, the service reached), then deleted."""
    admin = plane.rest()
    admin.create(f"/api/v1/namespaces/{WARM}/pods", npu_pod("warm", WARM, 1))
    watch.wait_for(lambda: "warm" in binds.bound, timeout, "the warm-up pod bound")
    admin.request(
        "DELETE", f"/api/v1/namespaces/{WARM}/pods/warm", query={"gracePeriodSeconds": "0"}
    )
    wait_until(
        lambda: not admin.get(f"/api/v1/namespaces/{WARM}/pods")["items"], 60, "warm-up deleted"
    )


def create_backlog(plane: ControlPlane, sizes: list[int]) -> dict[str, float]:
    """Pods ``pod-<i>`` of ``sizes`` chips, from threads: when each creation request began."""
    created: dict[str, float] = {}
    local = threading.local()

    def create(item: tuple[int, int]) -> None:
        i, chips = item
        if not hasattr(local, "rest"):
            local.rest = plane.rest()
        name = f"pod-{i:05d}"
        created[name] = time.monotonic()
        local.rest.create(f"/api/v1/namespaces/{BACKLOG}/pods", npu_pod(name, BACKLOG, chips))

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(create, enumerate(sizes)))
    return created


class SideFailed(RuntimeError):
    """A side that placed nothing or not all in time: why, and what vc-scheduler logged most."""

    def __init__(self, key: str, reason: str, complaints: list[str]) -> None:
        self.key = key
        self.reason = reason
        self.complaints = complaints
        super().__init__(f"{key}: {reason}")


_KLOG = re.compile(r"^[EW]\d{4} [\d:.]+\s+\d+ ")
_USERINFO = re.compile(r"//[^/@\s]*@")


def complaints(log: Path, most: int = 5) -> list[str]:
    """The warnings and errors vc-scheduler logged most, each with its count (the token in
    an extender URL's userinfo left out)."""
    counted: dict[str, int] = {}
    with contextlib.suppress(OSError), log.open(errors="replace") as lines:
        for line in lines:
            if _KLOG.match(line):
                text = _USERINFO.sub("//***@", _KLOG.sub("", line.rstrip()))[:300]
                counted[text] = counted.get(text, 0) + 1
    ranked = sorted(counted.items(), key=lambda kv: -kv[1])[:most]
    return [f"{count}× {text}" for text, count in ranked]


def start_side(
    key: str, stack: ExitStack, plane: ControlPlane, volcano: Volcano, *, nodes: int, period: str
) -> Service | None:
    """Volcano's controller and scheduler as the side runs them, with the service where the
    side has one (closed with ``stack``)."""
    if key == "huawei":
        volcano.start_controller_manager()
        volcano.start_scheduler(huawei_configuration(), plugins=True, period=period)
        return None
    service = stack.enter_context(our_service(plane, nodes))
    if key == "adapter":
        conf = merged(without_huawei(), charts_adapter_entry(service.url).with_token(service.token))
    else:  # the merged configuration our_service wrote into Volcano's ConfigMap
        path = f"/api/v1/namespaces/{VOLCANO_NAMESPACE}/configmaps/{CONFIGMAP}"
        conf = str(plane.rest().get(path)["data"][KEY])
    volcano.start_controller_manager()
    adapter = key == "adapter"
    volcano.start_scheduler(
        conf, adapter=adapter, period=period, environment=service.trust, account=True
    )
    return service


def run_side(
    key: str,
    nodes: int,
    sizes: list[int],
    *,
    period: str,
    timeout: float,
    keep: bool,
) -> Side:
    """One side on a control plane of its own: set up, warm up, the backlog placed."""
    began = time.monotonic()
    workdir = scratch(f"vs-{key}-")
    plane = ControlPlane(workdir, admission_plugins_off=("TaintNodesByCondition",))
    try:
        plane.start(controllers=False)
        plane.start_controller_manager(CONTROLLERS)
        names = populate(plane, nodes)
        admin = plane.rest()
        for namespace in (BACKLOG, WARM):
            admin.ensure_namespace(namespace)
        version = OUR_VERSION if key == "extender" else HUAWEI_VERSION
        with ExitStack() as stack:
            volcano = stack.enter_context(running_volcano(plane, version, workdir / "volcano"))
            agents = Agents(plane, names, HEARTBEAT_SWEEP)
            stack.callback(agents.stop)
            binds, warm = Binds(BACKLOG), Binds(WARM)
            watch = PodWatch(plane, [agents.handle, binds.handle, warm.handle])
            stack.callback(watch.stop)
            service = start_side(key, stack, plane, volcano, nodes=nodes, period=period)
            open_queue(plane)
            try:
                warm_up(plane, watch, warm, 300)
                setup = time.monotonic() - began
                side = measure(
                    key,
                    plane,
                    volcano=volcano,
                    service=service,
                    watch=watch,
                    binds=binds,
                    nodes=nodes,
                    sizes=sizes,
                    timeout=timeout,
                )
            except (TimeoutError, RuntimeError) as failed:  # read while vc-scheduler runs
                said = complaints(volcano.processes["vc-scheduler"].log)
                raise SideFailed(key, str(failed).splitlines()[0], said) from failed
            side.setup_seconds = setup
            side.deviceinfo_writes = agents.writes
            if agents.errors:
                print(f"{key}: {len(agents.errors)} DeviceInfo writes failed: {agents.errors[:3]}")
            return side
    finally:
        plane.stop()
        if keep:
            print(f"{key}: the control plane's folder (logs) is kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def sessions_ended(volcano: Volcano) -> float:
    return parse_metrics(volcano.metrics()).get(f"{E2E}_count", 0.0)


def measure(
    key: str,
    plane: ControlPlane,
    *,
    volcano: Volcano,
    service: Service | None,
    watch: PodWatch,
    binds: Binds,
    nodes: int,
    sizes: list[int],
    timeout: float,
) -> Side:
    pids = {
        "vc-scheduler": volcano.processes["vc-scheduler"].pid,
        "vc-controller-manager": volcano.processes["vc-controller-manager"].pid,
        "kube-apiserver": plane.processes["kube-apiserver"].pid,
        "etcd": plane.processes["etcd"].pid,
    }
    if service is not None:
        pids["scheduler-service"] = service.process.pid
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    volcano_before = parse_metrics(volcano.metrics())
    service_before = service_metrics(service.metrics_url) if service else {}
    submitted = time.monotonic()
    created = create_backlog(plane, sizes)
    submit_seconds = time.monotonic() - submitted
    watch.wait_for(
        lambda: len(binds.bound) >= len(sizes), timeout, f"{len(sizes)} backlog pods bound"
    )
    cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    service_after = service_metrics(service.metrics_url) if service else {}
    # Volcano counts a session when it ends: the one running at the last bind is waited for
    # (when the last bind came after its session's end, this adds one session without work).
    at_last_bind = sessions_ended(volcano)
    wait_until(lambda: sessions_ended(volcano) > at_last_bind, 300, "the last session ended")
    volcano_after = parse_metrics(volcano.metrics())
    with watch.changed:
        bound = dict(binds.bound)
    first, last = min(bound.values()), max(bound.values())
    latency = [(bound[p] - created[p]) * 1e3 for p in created]

    e2e = histograms(volcano_before, volcano_after, E2E)
    sessions, session_total = e2e.get("", (0, 0.0))
    actions = histograms(
        volcano_before, volcano_after, "volcano_action_scheduling_latency_milliseconds"
    )
    plugins = histograms(
        volcano_before, volcano_after, "volcano_plugin_scheduling_latency_milliseconds"
    )
    verbs: dict[str, int] = {}
    verb_ms: dict[str, float] = {}
    if service is not None:
        for labels, (count, total) in histograms(
            service_before, service_after, "ascend_scheduler_request_seconds"
        ).items():
            verb = label(labels, "verb").removeprefix("volcano/")
            verbs[verb] = count
            verb_ms[verb] = total / count * 1e3
    side = Side(
        key=key,
        label=LABELS[key],
        volcano=volcano.build.version,
        nodes=nodes,
        pods=len(sizes),
        setup_seconds=0.0,
        submit_seconds=submit_seconds,
        first_to_last_seconds=last - first,
        submit_to_last_seconds=last - submitted,
        pods_per_second=len(sizes) / (last - first) if last > first else float("inf"),
        pods_per_second_from_submit=len(sizes) / (last - submitted),
        p50_ms=statistics.median(latency),
        p99_ms=percentile(latency, 99),
        sessions=sessions,
        session_ms=session_total / sessions if sessions else 0.0,
        session_seconds=session_total / 1e3,
        actions_ms={label(k, "action"): t / c for k, (c, t) in actions.items()},
        action_runs={label(k, "action"): c for k, (c, _) in actions.items()},
        plugins_ms={
            f"{label(k, 'plugin')} {label(k, 'OnSession')}": t / c for k, (c, t) in plugins.items()
        },
        cpu_seconds=cpu,
        verbs=verbs,
        verb_ms=verb_ms,
        load=os.getloadavg(),
    )
    check(side, plane.rest().get(f"/api/v1/namespaces/{BACKLOG}/pods")["items"])
    return side


# --- the report ----------------------------------------------------------------------------


def table(sides: list[Side]) -> str:
    """A row per side, then each other side's ratios to the first (A, Huawei's plugin)."""
    rows = [
        "| side | Volcano | pods/s first → last bind | pods/s submit → last | latency p50 / p99 "
        "| sessions | session mean | allocate mean | CPU s vc-scheduler | CPU s service "
        "| CPU s kube-apiserver |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for side in sides:
        rows.append(
            f"| {side.label} | {side.volcano} | {side.pods_per_second:.2f} "
            f"| {side.pods_per_second_from_submit:.2f} "
            f"| {side.p50_ms / 1e3:.1f} / {side.p99_ms / 1e3:.1f} s | {side.sessions} "
            f"| {side.session_ms:.0f} ms | {side.actions_ms.get('allocate', 0.0):.0f} ms "
            f"| {side.cpu_seconds['vc-scheduler']:.1f} "
            f"| {side.cpu_seconds.get('scheduler-service', 0.0):.1f} "
            f"| {side.cpu_seconds['kube-apiserver']:.1f} |"
        )
    a = sides[0]
    for b in sides[1:]:
        ratio = f"{b.label[0]}/{a.label[0]}"
        allocate = b.actions_ms.get("allocate", 0.0) / max(a.actions_ms.get("allocate", 0.0), 1e-9)
        rows.append(
            f"| {ratio} | | {b.pods_per_second / a.pods_per_second:.3f} "
            f"| {b.pods_per_second_from_submit / a.pods_per_second_from_submit:.3f} "
            f"| {b.p50_ms / a.p50_ms:.1f} / {b.p99_ms / a.p99_ms:.1f} "
            f"| {b.sessions / max(1, a.sessions):.1f} "
            f"| {b.session_ms / max(a.session_ms, 1e-9):.1f} | {allocate:.1f}"
            f" | {b.cpu_seconds['vc-scheduler'] / max(a.cpu_seconds['vc-scheduler'], 1e-9):.1f} | "
            f"| {b.cpu_seconds['kube-apiserver'] / max(a.cpu_seconds['kube-apiserver'], 1e-9):.1f}"
            " |"
        )
    return "\n".join(rows)


def details(side: Side) -> list[str]:
    lines = [
        f"{side.label}: {side.bound} of {side.pods} bound, {side.with_chips} with chips, "
        f"{side.illegal} not legal on a 910 x8, {side.chips_twice} nodes with a chip twice, "
        f"{side.over_capacity} nodes over {CHIPS} chips; setup {side.setup_seconds:.0f} s, "
        f"backlog created in {side.submit_seconds:.1f} s, {side.deviceinfo_writes} DeviceInfo "
        f"writes; load {', '.join(f'{x:.1f}' for x in side.load)}",
        "  actions (runs, mean ms): "
        + ", ".join(
            f"{k} {side.action_runs[k]}× {v:.1f}" for k, v in sorted(side.actions_ms.items())
        ),
        "  plugins (mean ms per session): "
        + ", ".join(
            f"{k} {v:.1f}" for k, v in sorted(side.plugins_ms.items(), key=lambda kv: -kv[1])[:6]
        ),
        "  CPU s: " + ", ".join(f"{k} {v:.1f}" for k, v in side.cpu_seconds.items()),
    ]
    if side.verbs:
        lines.append(
            "  verbs: "
            + ", ".join(
                f"{verb} {count} calls ({count / side.pods:.0f}/pod, {side.verb_ms[verb]:.2f} ms)"
                for verb, count in sorted(side.verbs.items(), key=lambda kv: -kv[1])
            )
        )
    return lines


def machine() -> str:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} CPUs ({model}), {memory:.0f} GiB, Python {platform.python_version()}"


def commit() -> str:
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return ""
    return found.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--period", default="1s", help="vc-scheduler's --schedule-period")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per side's backlog")
    parser.add_argument(
        "--sides", nargs="+", choices=tuple(LABELS), default=["huawei", "extender", "adapter"]
    )
    parser.add_argument("--keep", action="store_true", help="keep each control plane's folder")
    parser.add_argument("--out", type=Path, default=DATA)
    args = parser.parse_args()
    sizes = pod_sizes(args.pods, args.seed)
    started = time.time()
    load_before = os.getloadavg()
    sides: dict[str, Side] = {}
    failures: dict[str, dict[str, Any]] = {}
    for key in args.sides:
        try:
            side = run_side(
                key, args.nodes, sizes, period=args.period, timeout=args.timeout, keep=args.keep
            )
        except SideFailed as failed:
            failures[key] = {"reason": failed.reason, "vc_scheduler_logged": failed.complaints}
            print(f"{key} FAILED: {failed.reason}; vc-scheduler logged most:", flush=True)
            print("\n".join(f"  {line}" for line in failed.complaints), flush=True)
            continue
        sides[key] = side
        print("\n".join(details(side)), flush=True)
    if "huawei" in sides and len(sides) > 1:
        print(table([sides["huawei"], *(s for k, s in sides.items() if k != "huawei")]))
    results = {
        "command": f"python -m benchmarks.volcano_speed --nodes {args.nodes} --pods {args.pods} "
        f"--period {args.period} --seed {args.seed} --sides {' '.join(args.sides)}",
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(started)),
        "machine": machine(),
        "load_before": [round(x, 2) for x in load_before],
        "sizes": {str(s): sizes.count(s) for s in sorted(set(sizes))},
        "sides": {key: side.summary() for key, side in sides.items()},
        "failed": failures,
    }
    if "huawei" in sides:
        a = sides["huawei"]
        results["over_huawei"] = {
            key: {
                "pods_per_second": round(b.pods_per_second / a.pods_per_second, 4),
                "pods_per_second_from_submit": round(
                    b.pods_per_second_from_submit / a.pods_per_second_from_submit, 4
                ),
            }
            for key, b in sides.items()
            if key != "huawei"
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
