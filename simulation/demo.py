"""The demo: a simulated cluster in one process, from pod creation to the container.

The loopback API server; per node the fake driver, the agent (annotation handshake through
the official kubernetes client), its DeviceInfo publisher and a kubelet simulator over real
gRPC sockets; the scheduler service over HTTP, driven by a stand-in of kube-scheduler
(filter, prioritize, bind, without its node cache), then by a stand-in of Volcano's
sessions. No kubelet asks for the preferred allocation: they pick random device IDs, and the
handshake has to give containers the scheduler's chips.

The two-pod job is gang-scheduled as kube-scheduler users do it: a coscheduling PodGroup
(``scheduling.x-k8s.io/v1alpha1``) and the label ``scheduling.x-k8s.io/pod-group``.

Beside the 910 training pods, a 310P node serves inference pods dynamic vNPUs: the scheduler
cuts a template out of a chip's AI cores, the agent creates the vNPU at Allocate and destroys
it once its pod is gone.
"""

from __future__ import annotations

from dataclasses import dataclass

from chip_drivers.fake import parse_fake_state
from contract.annotations import REAL_ANNOTATION, SCHEDULE_POLICY_ANNOTATION
from contract.chip_names import RESOURCE_NAME, InvalidInput
from contract.groups import COSCHEDULING, COSCHEDULING_GROUP_LABEL, PODGROUP_APIS, podgroups
from contract.vnpu import (
    NPU_CORE_ANNOTATION,
    NPU_CORE_RESOURCE,
    parse_core_choice,
    parse_virtual_name,
)
from simulation.cluster import (
    SimulatedCluster,
    simulated_cluster,
    tor_configmap,
    wait_for,
)
from simulation.hardware import ATLAS_800T_A3
from simulation.kube_scheduler import ExtenderConfig, KubeScheduler
from simulation.memory import pod_object
from simulation.volcano import VolcanoScheduler

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
# Inference pods asking for AI cores of the 310P node: 2 → vir02_1c, 4 → vir04_3c,
# 1 → vir01, 8 → a whole chip.
VNPU_PODS = [("serve-a", 2), ("serve-b", 2), ("serve-c", 4), ("serve-d", 1), ("serve-e", 8)]
ROW = "{:12} {:8} {:18} {:18} {}"
VNPU_ROW = "{:12} {:9} {:12} {:6} {:8} {}"
PER_TOR = 2
A3_JOB = "a3-train-0"
CYCLES = 8  # a node creates one vNPU template at a time: a few rounds place them all


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
                    COSCHEDULING_GROUP_LABEL: job,
                    "tor-affinity": "normal-schema",
                }
            cluster.store.put("Pod", pod)
            names.append(name)
        if len(sizes) > 1:
            # Its PodGroup, as a training operator makes it for the coscheduling plugin.
            cluster.store.apis.add(PODGROUP_APIS[COSCHEDULING])
            podgroup = {"metadata": {"namespace": "demo", "name": job}, "spec": {"minMember": 2}}
            cluster.store.create_object(podgroups(COSCHEDULING), podgroup)
    for name, cores in VNPU_PODS:
        cluster.store.put("Pod", pod_object("demo", name, None, cores, resource=NPU_CORE_RESOURCE))
    return names


def run(nodes: int = 5, policy: str = "huawei") -> int:
    faulty = {"node-02": frozenset({3})}
    with simulated_cluster(
        nodes,
        policy,
        faulty,
        every_kubelet_random=True,
        vnpu_nodes=1,
        hardware=((ATLAS_800T_A3, 1),),
    ) as cluster:
        # kube-scheduler's default: no node cache, a NodeList each way.
        scheduler = KubeScheduler(cluster, ExtenderConfig(cluster.url, node_cache_capable=False))
        cluster.store.put("ConfigMap", tor_configmap(nodes, PER_TOR))
        names = _submit(cluster)
        cluster.service.refresh()
        for _ in range(CYCLES):
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
                print(f"{name:12} not placed: {_reason(cluster, scheduler, key)}")
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
        code = _summary(admitted)
        code = _volcano_part(cluster) or code
        code = _a3_part(cluster, scheduler) or code
        return _vnpu_table(cluster, scheduler) or code


def _a3_part(cluster: SimulatedCluster, scheduler: KubeScheduler) -> int:
    """The A3 node: the chips its agent serves and publishes, by die, then a job of
    ``huawei.com/schedule_policy: chip2-node16`` placed on it. Non-zero when the container
    does not get the scheduler's chips, or they are not whole dies."""
    node = cluster.nodes["a3-00"]
    chips = parse_fake_state((node.home / "state.yaml").read_text())
    listed = sorted(node.kubelet.devices(RESOURCE_NAME), key=lambda d: int(d.rsplit("-", 1)[1]))
    by_die: dict[int, list[str]] = {}
    for chip in chips.chips:
        die = chips.die_of(chip.id)
        if die is not None:
            by_die.setdefault(die, []).append(str(chip.id))
    dies = " ".join(f"{d}:{','.join(c)}" for d, c in sorted(by_die.items()))
    print(
        f"{node.name}: an Atlas 800T A3 node ({chips.product}), {len(listed)} chips in dies of "
        f"{chips.die_size} (die:chips {dies}); the kubelet lists {listed[0]}..{listed[-1]}, "
        f"its DeviceInfo publishes {cluster.published_free(node.name)} free"
    )
    # As Huawei's current samples write it: the schedule policy names the handler.
    pod = pod_object(
        "demo", A3_JOB, None, 4, annotations={SCHEDULE_POLICY_ANNOTATION: "chip2-node16"}
    )
    cluster.store.put("Pod", pod)
    cluster.service.refresh()
    for _ in range(3):
        bound = scheduler.cycle()
        cluster.admit()
        cluster.service.refresh()
        if bound == 0 or f"demo/{A3_JOB}" in cluster.admitted:
            break
    entry = cluster.admitted.get(f"demo/{A3_JOB}")
    if entry is None:
        print(f"{A3_JOB}: not placed: {_reason(cluster, scheduler, f'demo/{A3_JOB}')}")
        return 1
    given = cluster.store.get_pod("demo", A3_JOB)["metadata"]["annotations"][RESOURCE_NAME]
    visible = entry.allocation.response.envs.get("ASCEND_VISIBLE_DEVICES", "")
    ids = [int(c) for c in visible.split(",") if c]
    whole = all(ids.count(c ^ 1) for c in ids)  # both chips of each die (2k, 2k + 1)
    print(
        f"{A3_JOB} (4 chips, schedule_policy chip2-node16) on {entry.node}: the scheduler "
        f"chose {given}, the container sees {visible}; whole dies: {'yes' if whole else 'no'}"
    )
    return 0 if visible == _ids(tuple(given.split(","))) and whole else 1


def _volcano_part(cluster: SimulatedCluster) -> int:
    """The same service behind Volcano's extender plugin: ``big-0`` ends, and two 4-chip
    jobs of Volcano's (``schedulerName: volcano``) go through its sessions (enqueue,
    predicate, prioritize, allocateFunc, the binder). Non-zero when a container does not get
    the chips allocateFunc chose."""
    cluster.finish("demo/big-0", delete=True)
    cluster.service.refresh()
    volcano = VolcanoScheduler(cluster)
    jobs = ("vc-a", "vc-b")
    for name in jobs:
        pod = pod_object("demo", name, None, 4)
        pod["spec"]["schedulerName"] = "volcano"
        cluster.store.put("Pod", pod)
    cluster.service.refresh()
    sessions = 0
    while sessions < 3 and not all(f"demo/{n}" in cluster.admitted for n in jobs):
        sessions += 1
        bound = volcano.session().bound
        cluster.admit()
        cluster.service.refresh()
        if bound == 0:
            break
    wrong = 0
    for name in jobs:
        entry = cluster.admitted.get(f"demo/{name}")
        if entry is None:
            print(f"volcano: {name} not placed: {volcano.reasons.get(f'demo/{name}', {})}")
            wrong += 1
            continue
        chips = cluster.store.get_pod("demo", name)["metadata"]["annotations"][
            "huawei.com/Ascend910"
        ]
        visible = entry.allocation.response.envs.get("ASCEND_VISIBLE_DEVICES", "")
        wrong += visible != _ids(tuple(chips.split(",")))
        print(
            f"volcano: {name} on {entry.node}: allocateFunc chose {chips}, "
            f"the container sees {visible}"
        )
    print(f"volcano: {len(jobs) - wrong} of {len(jobs)} jobs placed in {sessions} session(s)")
    return 1 if wrong else 0


def _reason(cluster: SimulatedCluster, scheduler: KubeScheduler, key: str) -> str:
    """Why a pod was not placed: the first reason of a node of its kind (910 or 310P)."""
    inference = key.split("/")[1].startswith("serve-")
    reasons = sorted(
        {
            r
            for n, r in scheduler.reasons.get(key, {}).items()
            if n.startswith("infer-") == inference
        }
    )
    return reasons[0] if reasons else cluster.refused.get(key, "")


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


def _vnpu_table(cluster: SimulatedCluster, scheduler: KubeScheduler) -> int:
    """The vNPU pods: the scheduler's choice, what the container got; then the pods end and
    the agent destroys their vNPUs. Non-zero when a container got another chip than chosen,
    or a vNPU outlives its pod."""
    node = cluster.nodes["infer-00"]
    cores = node.agent.cores
    assert cores is not None, "infer-00 runs dynamic vNPU"
    print(
        f"{node.name}: a 310P node of 4 chips x 8 AI cores (7 AI CPUs), dynamic vNPU; "
        "one template is created at a time per node"
    )
    print(VNPU_ROW.format("pod", "node", "npu-core", "cores", "visible", "AscendReal"))
    given = wrong = 0
    for name, _ in VNPU_PODS:
        key = f"demo/{name}"
        entry = cluster.admitted.get(key)
        if entry is None:
            print(f"{name:12} not placed: {_reason(cluster, scheduler, key)}")
            wrong += 1
            continue
        notes = cluster.store.get_pod("demo", name)["metadata"]["annotations"]
        choice, real = notes[NPU_CORE_ANNOTATION], notes.get(REAL_ANNOTATION, "")
        visible = entry.allocation.response.envs.get("ASCEND_VISIBLE_DEVICES", "")
        wrong += not _got_the_choice(choice, real, visible)
        given += parse_core_choice(choice).template is not None
        print(
            VNPU_ROW.format(
                name, entry.node, choice, len(entry.allocation.device_ids), visible, real
            )
        )
    for name, _ in VNPU_PODS:
        cluster.finish(f"demo/{name}", delete=True)
    gone = wait_for(lambda: cores.destroyed >= cores.created > 0, timeout=20)
    print(
        f"vNPUs: {cores.created} created, {given} given to containers, {cores.destroyed} "
        f"destroyed once their pods were gone; {wrong} pods without the scheduler's choice"
    )
    return 0 if gone and wrong == 0 and given == cores.created else 1


def _got_the_choice(choice: str, real: str, visible: str) -> bool:
    """The container runs on the chip the scheduler chose: its vNPU (visible by vdev id)
    is on that chip, or it has exactly the whole chips chosen."""
    try:
        chosen = parse_core_choice(choice)
        if chosen.template is None:
            return visible == ",".join(str(c) for c in chosen.chips)
        vnpu = parse_virtual_name(real)
    except InvalidInput:
        return False
    return vnpu.phy == chosen.chips[0] and visible == str(vnpu.vdev)
