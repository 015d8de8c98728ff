"""The demo: a simulated cluster in one process, from pod creation to the container.

The loopback API server; per node the fake driver, the agent (annotation handshake through
the official kubernetes client), its DeviceInfo publisher and a kubelet simulator over real
gRPC sockets; the scheduler service over HTTP, driven the way kube-scheduler drives an
extender (filter, prioritize, bind). No kubelet asks for the preferred allocation: they
pick random device IDs, and the handshake has to give containers the scheduler's chips.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulation.cluster import SimulatedCluster, simulated_cluster, tor_configmap
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import pod_object

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
ROW = "{:12} {:8} {:18} {:18} {}"
PER_TOR = 2


@dataclass(frozen=True)
class Row:
    pod: str
    node: str
    scheduler: tuple[str, ...]
    kubelet: tuple[str, ...]
    visible: str
    real: str


def _submit(cluster: SimulatedCluster) -> list[str]:
    names = []
    for job, sizes in DEMO_JOBS:
        for k, npu in enumerate(sizes):
            name = f"{job}-{k}"
            pod = pod_object("demo", name, None, npu)
            if len(sizes) > 1:  # a gang, asking for switch (ToR) affinity
                pod["metadata"]["labels"] = {
                    "ascend.npu/gang": job,
                    "tor-affinity": "normal-schema",
                }
                pod["metadata"]["annotations"]["ascend.npu/gang-size"] = str(len(sizes))
            cluster.store.put("Pod", pod)
            names.append(name)
    return names


def run(nodes: int = 5, policy: str = "huawei") -> int:
    faulty = {"node-02": frozenset({3})}
    with simulated_cluster(nodes, policy, faulty, every_kubelet_random=True) as cluster:
        scheduler = KubeScheduler(cluster)
        cluster.store.put("ConfigMap", tor_configmap(nodes, PER_TOR))
        names = _submit(cluster)
        cluster.service.refresh()
        for _ in range(5):
            bound = scheduler.cycle()
            cluster.admit()
            cluster.service.refresh()
            if bound == 0:
                break
        print(
            f"{nodes} nodes of 8 chips (rings 0-3 | 4-7); node-02 has a faulty chip 3; no kubelet "
            f"asks for the preferred allocation: all pick random IDs. Policy {policy}. "
            f"ToRs of {PER_TOR} nodes (node-00, node-01 | node-02, node-03 | …)."
        )
        print(ROW.format("pod", "node", "scheduler chips", "kubelet IDs", "ASCEND_VISIBLE_DEVICES"))
        admitted = []
        for name in names:
            key = f"demo/{name}"
            pod = cluster.store.get_pod("demo", name)
            entry = cluster.admitted.get(key)
            if entry is None:
                reasons = sorted(set(scheduler.reasons.get(key, {}).values()))
                print(
                    f"{name:12} not placed: {reasons[0] if reasons else cluster.refused.get(key)}"
                )
                continue
            annotations = pod["metadata"]["annotations"]
            row = Row(
                name,
                entry.node,
                tuple(annotations["huawei.com/Ascend910"].split(",")),
                entry.allocation.device_ids,
                entry.allocation.response.envs.get("ASCEND_VISIBLE_DEVICES", ""),
                annotations.get("huawei.com/AscendReal", ""),
            )
            admitted.append(row)
            print(
                ROW.format(row.pod, row.node, _ids(row.scheduler), _ids(row.kubelet), row.visible)
            )
        _gang_line(cluster)
        return _summary(admitted)


def _gang_line(cluster: SimulatedCluster) -> None:
    pods = [
        p for p in cluster.store.list_pods(None)[0] if p["metadata"]["name"].startswith("gang-")
    ]
    placed = sorted(
        (p["metadata"]["annotations"].get("hccl/rankIndex", "?"), p["spec"].get("nodeName", ""))
        for p in pods
    )
    tors = sorted({int(node.rsplit("-", 1)[1]) // PER_TOR for _, node in placed if node})
    print(
        "switch affinity (gang, normal-schema): "
        + ", ".join(f"rank {r} on {n}" for r, n in placed)
        + f"; ToRs used: {tors}"
    )


def _ids(names: tuple[str, ...]) -> str:
    return ",".join(n.rsplit("-", 1)[1] for n in names)


def _summary(admitted: list[Row]) -> int:
    mismatches = sum(
        1 for a in admitted if a.visible != _ids(a.scheduler) or a.real != ",".join(a.scheduler)
    )
    seen: set[tuple[str, str]] = set()
    doubles = 0
    for a in admitted:
        for chip in a.visible.split(","):
            doubles += (a.node, chip) in seen
            seen.add((a.node, chip))
    corrected = sum(1 for a in admitted if set(a.kubelet) != set(a.scheduler))
    print(
        f"summary: {len(admitted)} pods admitted, {corrected} with kubelet IDs that differ from "
        f"the scheduler's chips (corrected by the handshake), {mismatches} mismatches, "
        f"{doubles} double assignments"
    )
    return 0 if mismatches == 0 and doubles == 0 and admitted else 1
