"""The demo: a simulated cluster in one process, from scheduling decision to container.

Nodes each run the fake driver, the agent (annotation handshake) and its DeviceInfo
publisher against an in-memory API server, and a kubelet simulator over real gRPC sockets.
``scheduler_core`` places pods from the published DeviceInfo and binds them with the
scheduler annotations; each node's kubelet admits them. Half of the kubelets ignore the
preferred allocation and pick random device IDs, so the handshake has to correct them.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from agent.annotation_allocator import AnnotationAllocator
from agent.driver import FakeDriver
from agent.handshake import CHIPS_ANNOTATION, PREDICATE_TIME, REAL_ANNOTATION
from agent.manager import Agent
from agent.pod_cache import PodCache
from agent.publisher import DeviceInfoPublisher
from deviceplugin_api.kubelet_sim import KubeletError, KubeletSimulator
from scheduler_core import (
    Job,
    NodeState,
    Placement,
    Session,
    Task,
    chip_name,
    deviceinfo,
    policy_by_name,
)
from scheduler_core.kube.memory import MemoryCluster, pod_object

RESOURCE = "huawei.com/Ascend910"
PRODUCT = "module910x8"
DEMO_JOBS = [
    ("train-a", [2]),
    ("infer-a", [1]),
    ("train-b", [4]),
    ("infer-b", [1]),
    ("big", [8]),
    ("train-c", [2]),
    ("gang", [8, 8]),
    ("infer-c", [1]),
    ("train-d", [4]),
    ("infer-d", [1]),
]


@dataclass
class DemoNode:
    name: str
    kubelet: KubeletSimulator
    publisher: DeviceInfoPublisher


@dataclass(frozen=True)
class Admitted:
    pod: str
    node: str
    scheduler: tuple[str, ...]
    kubelet: tuple[str, ...]
    visible: str
    real: str


def _state(unhealthy: frozenset[int]) -> str:
    lines = [f"product: {PRODUCT}", "chips:"]
    for i in range(8):
        health = "Unhealthy" if i in unhealthy else "Healthy"
        lines.append(f"  - {{id: {i}, health: {health}, ip: 10.0.0.{i + 10}}}")
    return "\n".join(lines) + "\n"


@contextmanager
def simulated_cluster(nodes: int, root: Path) -> Iterator[tuple[MemoryCluster, list[DemoNode]]]:
    api = MemoryCluster()
    with ExitStack() as stack:
        built = []
        for i in range(nodes):
            name = f"node-{chr(ord('a') + i)}"
            home = root / name
            home.mkdir()
            api.put(
                "Node",
                {
                    "metadata": {"name": name},
                    "status": {
                        "addresses": [{"type": "InternalIP", "address": f"192.168.0.{i + 1}"}]
                    },
                },
            )
            (home / "state.yaml").write_text(_state(frozenset({3}) if i == 2 else frozenset()))
            kubelet = KubeletSimulator(home / "plugins", use_preferred=i % 2 == 0, seed=i)
            kubelet.start()
            stack.callback(kubelet.close)
            cache = PodCache(api, name, watch_seconds=0.5)
            cache.start()
            stack.callback(cache.stop)
            allocator = AnnotationAllocator(api, cache, f"192.168.0.{i + 1}")
            agent = Agent(FakeDriver(home / "state.yaml"), home / "plugins", True, allocator)
            agent.start()
            stack.callback(agent.stop)
            assert agent.state is not None
            publisher = DeviceInfoPublisher(api, name, state=agent.state, cache=cache, period=5)
            cache.subscribe(publisher.nudge)
            publisher.start()
            stack.callback(publisher.stop)
            built.append(DemoNode(name, kubelet, publisher))
        yield api, built


def read_cluster(api: MemoryCluster, names: list[str]) -> list[NodeState]:
    """The scheduler's view: every node's published DeviceInfo (CheckCode verified)."""
    states = []
    for name in names:
        info = deviceinfo.decode(
            api.get_configmap(deviceinfo.NAMESPACE, deviceinfo.configmap_name(name))["data"]
        )
        free = tuple(sorted(info.free, key=chip_name))  # the published (string) order
        states.append(
            NodeState(
                name,
                PRODUCT,
                free,
                8 - len(info.unhealthy),
                frozenset(info.unhealthy),
                frozenset(info.network_unhealthy),
            )
        )
    return states


def _admit(
    api: MemoryCluster, kubelet: KubeletSimulator, placement: Placement, when: int
) -> Admitted | str:
    """Bind the pod with the scheduler's annotations, then let the node's kubelet admit it."""
    annotations = {CHIPS_ANNOTATION: ",".join(placement.chip_names), PREDICATE_TIME: str(when)}
    count = len(placement.chips)
    api.put(
        "Pod", pod_object("demo", placement.task, placement.node, count, annotations=annotations)
    )
    try:
        allocation = kubelet.allocate(f"demo/{placement.task}", "main", RESOURCE, count)
    except KubeletError as failed:
        return f"admission failed: {failed}"
    pod = api.get_pod("demo", placement.task)
    return Admitted(
        placement.task,
        placement.node,
        placement.chip_names,
        allocation.device_ids,
        allocation.response.envs.get("ASCEND_VISIBLE_DEVICES", ""),
        pod["metadata"]["annotations"].get(REAL_ANNOTATION, ""),
    )


ROW = "{:12} {:7} {:18} {:18} {}"


def run(nodes: int = 5, policy: str = "huawei") -> int:
    root = Path(tempfile.mkdtemp(prefix="demo", dir="/tmp"))
    clock = itertools.count(time.time_ns())
    try:
        with simulated_cluster(nodes, root) as (api, cluster):
            by_name = {n.name: n for n in cluster}
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(n.publisher.writes == 0 for n in cluster):
                time.sleep(0.05)
            session = Session(read_cluster(api, list(by_name)), policy_by_name(policy))
            print(
                f"{nodes} nodes of 8 chips (rings 0-3 | 4-7); node-c has a faulty chip 3; the "
                f"kubelets of node-b and node-d ignore the preferred allocation. Policy {policy}."
            )
            print(
                ROW.format(
                    "pod", "node", "scheduler chips", "kubelet IDs", "ASCEND_VISIBLE_DEVICES"
                )
            )
            admitted: list[Admitted] = []
            for job_name, sizes in DEMO_JOBS:
                tasks = tuple(Task(f"{job_name}-{k}", n) for k, n in enumerate(sizes))
                decision = session.place(Job(job_name, PRODUCT, tasks))
                if not decision.feasible:
                    print(f"{job_name:12} not placed: {decision.reason}")
                for p in decision.placements:
                    row = _admit(api, by_name[p.node].kubelet, p, next(clock))
                    if isinstance(row, str):
                        print(f"{p.task:12} {p.node:7} {row}")
                        continue
                    admitted.append(row)
                    print(
                        ROW.format(
                            row.pod, row.node, _ids(row.scheduler), _ids(row.kubelet), row.visible
                        )
                    )
            return _summary(admitted)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _ids(names: tuple[str, ...]) -> str:
    return ",".join(n.rsplit("-", 1)[1] for n in names)


def _summary(admitted: list[Admitted]) -> int:
    mismatches = sum(
        1 for a in admitted if a.visible != _ids(a.scheduler) or a.real != ",".join(a.scheduler)
    )
    seen: dict[tuple[str, str], str] = {}
    doubles = 0
    for a in admitted:
        for chip in a.visible.split(","):
            if (a.node, chip) in seen:
                doubles += 1
            seen[(a.node, chip)] = a.pod
    corrected = sum(1 for a in admitted if set(a.kubelet) != set(a.scheduler))
    print(
        f"summary: {len(admitted)} pods admitted, {corrected} with kubelet IDs that differ from "
        f"the scheduler's chips (corrected by the handshake), {mismatches} mismatches, "
        f"{doubles} double assignments"
    )
    return 0 if mismatches == 0 and doubles == 0 and admitted else 1
