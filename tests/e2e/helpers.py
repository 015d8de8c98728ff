"""What the end-to-end tests do to a simulated cluster and read back from it."""

from __future__ import annotations

import json
from typing import Protocol

from chip_topology.products import MODULE_910X8
from contract.objects import Obj
from infra.kube.port import KubeError
from simulation.cluster import SimulatedCluster, wait_for
from simulation.kube_scheduler import KubeScheduler
from simulation.memory import pod_object
from simulation.volcano import VolcanoScheduler


def submit(
    cluster: SimulatedCluster,
    name: str,
    npu: int,
    gang: str | None = None,
    size: int = 0,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str | None = None,
    uid: str | None = None,
    selector: dict[str, str] | None = None,
) -> None:
    """``uid``: a pod made again by its controller has a new one (default: one per name);
    ``selector``: its nodeSelector."""
    pod = pod_object("ns", name, None, npu)
    if selector:
        pod["spec"]["nodeSelector"] = dict(selector)
    if uid is not None:
        pod["metadata"]["uid"] = uid
    if scheduler is not None:
        pod["spec"]["schedulerName"] = scheduler
    pod["metadata"]["labels"] = dict(labels or {})
    pod["metadata"]["annotations"].update(annotations or {})
    if gang:
        pod["metadata"]["labels"]["ascend.npu/gang"] = gang
        pod["metadata"]["annotations"]["ascend.npu/gang-size"] = str(size)
    cluster.store.put("Pod", pod)


def run(cluster: SimulatedCluster, scheduler: KubeScheduler, rounds: int = 20) -> None:
    """Schedule and admit until nothing moves (refreshing the scheduler's view between).
    Nothing moving says nothing of what a later round would do (the service's view may lag
    the pods just made, the agents the chips just freed): a test that expects pods placed
    waits for them with ``place``."""
    for _ in range(rounds):
        bound = scheduler.cycle()
        cluster.admit()
        wait_for(cluster.settled, timeout=10)  # the agents publish what they just gave
        cluster.service.refresh()
        if bound == 0:
            return


def volcano_run(cluster: SimulatedCluster, volcano: VolcanoScheduler, sessions: int = 10) -> None:
    """Volcano's sessions and the kubelets' admissions until a session binds nothing."""
    for _ in range(sessions):
        bound = volcano.session().bound
        cluster.admit()
        cluster.service.refresh()
        if bound == 0:
            return


PLACEMENT = 60.0  # seconds a test waits for its pods to run: room for a loaded machine


def place(
    cluster: SimulatedCluster,
    scheduler: KubeScheduler | VolcanoScheduler,
    *pods: str,
    namespace: str = "ns",
    timeout: float = PLACEMENT,
) -> dict[str, str]:
    """Schedule and admit until each of ``pods`` (names in ``namespace``, or
    ``namespace/name``) runs: bound, and started by its node's kubelet (an NPU pod admitted
    with its devices). Pod → its node. Fails past ``timeout`` naming what the caller
    answered each pod still waiting and what a kubelet refused.

    The service reads the cluster first, as a test means it: the caller decides once the
    service has seen what the test made, the APIs it installed included (a pod naming a
    PodGroup of an API the service has not discovered yet is a job of its own: placed alone,
    without its rank)."""
    keys = {pod: pod if "/" in pod else f"{namespace}/{pod}" for pod in pods}
    nodes: dict[str, str] = {}
    cluster.service.refresh()

    def running() -> bool:
        if isinstance(scheduler, VolcanoScheduler):
            volcano_run(cluster, scheduler)
        else:
            run(cluster, scheduler)
        nodes.clear()
        for pod, key in keys.items():
            stored = cluster.store.get_pod(*key.split("/", 1))
            if stored["status"].get("phase") == "Running":
                nodes[pod] = str(stored["spec"]["nodeName"])
        return len(nodes) == len(keys)

    if not wait_for(running, timeout, step=0.05):
        waiting = {k: scheduler.reasons.get(k) for p, k in keys.items() if p not in nodes}
        refused = {k: cluster.refused[k] for k in keys.values() if k in cluster.refused}
        raise AssertionError(f"not running after {timeout} s: {waiting}; kubelet refused {refused}")
    return nodes


class Caller(Protocol):
    """A stand-in scheduler: what it left pending, and why."""

    reasons: dict[str, dict[str, str]]

    def pending(self) -> list[Obj]: ...


def check_invariants(cluster: SimulatedCluster, scheduler: Caller) -> None:
    held: dict[tuple[str, str], str] = {}
    for key, admitted in cluster.admitted.items():
        namespace, name = key.split("/")
        annotations = cluster.store.get_pod(namespace, name)["metadata"]["annotations"]
        real = annotations["huawei.com/AscendReal"]
        visible = admitted.allocation.response.envs["ASCEND_VISIBLE_DEVICES"]
        assert visible == ",".join(c.rsplit("-", 1)[1] for c in real.split(",")), key
        chips = [int(c) for c in visible.split(",")]
        if len(chips) <= 4:
            assert len({MODULE_910X8.group_of(c) for c in chips}) == 1, f"{key} spans rings"
        if len(chips) == 8:
            assert sorted(chips) == list(range(8))
        for chip in chips:
            assert (admitted.node, str(chip)) not in held, (
                f"{key} and {held.get((admitted.node, str(chip)))}"
            )
            held[(admitted.node, str(chip))] = key
    assert not cluster.refused, cluster.refused
    for pod in scheduler.pending():
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        assert scheduler.reasons.get(key), f"{key} is pending without a reason"


def fault_nodes(cluster: SimulatedCluster) -> list[str] | None:
    """The fault nodes the scheduler recorded in vcjob-fault-npu-cm (None before it does)."""
    try:
        record = cluster.store.get_configmap("volcano-system", "vcjob-fault-npu-cm")["data"]
    except KubeError:
        return None
    nodes: list[str] = json.loads(record["fault-node"])
    return nodes


def ranks(cluster: SimulatedCluster, gang: str, size: int) -> dict[int, str]:
    """Rank → node of the gang's pods, from the hccl/rankIndex the scheduler wrote."""
    result = {}
    for i in range(size):
        pod = cluster.store.get_pod("ns", f"{gang}-{i}")
        result[int(pod["metadata"]["annotations"]["hccl/rankIndex"])] = pod["spec"]["nodeName"]
    return result


def restart_after_fault(cluster: SimulatedCluster, faulty: str, pods: int) -> None:
    """Chip 2 of ``faulty`` fails: the scheduler restarts the job (its pods deleted, the
    fault recorded) and the kubelets free the pods' devices."""
    node = cluster.nodes[faulty]
    node.write_state(frozenset({2}))
    assert node.kubelet.wait_for(lambda: node.kubelet.allocatable("huawei.com/Ascend910") == 7)
    cluster.sync_node_status()
    assert wait_for(lambda: fault_nodes(cluster) == [faulty])
    gone: set[str] = set()

    def all_reaped() -> bool:
        gone.update(cluster.reap())
        return len(gone) == pods

    assert wait_for(all_reaped)
