"""Pod-level rescheduling and process-level recovery (issue 39) on the real control plane:
the shipped manifests (RBAC and admission policies), kube-scheduler with our extender, the
scheduler service, and per node the agent on the fake driver. A chip fault is written in the
fake driver's state file of a node, as the driver would report it; the agent publishes it in
the node's DeviceInfo; the scheduler deletes what the job's settings say. The test plays the
job's controller: it makes a deleted pod again under its name (a new UID).

- ``pod-rescheduling: "on"``: only the pod on the failed chip moves; the three others keep
  their UIDs, ranks and nodes; the job's ``reset-config-<job>`` counts one retry.
- rank 0 failing: the whole job restarts.
- ``process-recover-enable: on``: no healthy pod is ever deleted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from simulation.cluster import state_file
from testbed.cluster import Deployed, deployed, npu_pod, wait_pods
from testbed.control_plane import ControlPlane, wait_until
from testbed.rest import Obj, Rest, RestError

RESET = {"reset.json": '{"status":"initializing"}', "checkCode": ""}  # Huawei's sample


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Deployed]:
    with deployed(control_plane, control_plane.workdir, nodes=5) as running:
        yield running


def fault(cluster: Deployed, node: str, chips: frozenset[int]) -> None:
    """The fake driver of ``node`` reports ``chips`` unhealthy (none: healthy again)."""
    home = cluster.plane.workdir / "nodes" / node
    partial = home / "state.tmp"
    partial.write_text(state_file(chips))
    partial.replace(home / "state.yaml")


def submit(admin: Rest, namespace: str, rank: int, labels: dict[str, str]) -> None:
    job = {"ascend.npu/gang": "train", "job": "train", **labels}
    notes = {"ascend.npu/gang-size": "4", "hccl/rankIndex": str(rank)}
    pod = npu_pod(8, job, notes)
    pod["metadata"]["name"] = f"train-{rank}"
    admin.create(f"/api/v1/namespaces/{namespace}/pods", pod)


def pods(admin: Rest, namespace: str) -> dict[str, Obj]:
    listed = admin.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="job=train")
    return {p["metadata"]["name"]: p for p in listed["items"]}


def placed(admin: Rest, namespace: str) -> dict[str, tuple[str, str]]:
    """Pod → (UID, node)."""
    return {
        name: (p["metadata"]["uid"], p["spec"].get("nodeName", ""))
        for name, p in pods(admin, namespace).items()
    }


def run_job(
    cluster: Deployed, namespace: str, labels: dict[str, str]
) -> dict[str, tuple[str, str]]:
    admin = cluster.plane.rest()
    for rank in range(4):
        submit(admin, namespace, rank, labels)
    wait_pods(cluster.plane, namespace, "job=train", 4, timeout=120)
    return placed(admin, namespace)


def retry_time(admin: Rest, namespace: str) -> object:
    data = admin.get(f"/api/v1/namespaces/{namespace}/configmaps/reset-config-train")["data"]
    return json.loads(data["reset.json"]).get("RetryTime")


def finish(cluster: Deployed, namespace: str, node: str) -> None:
    """The node healthy again and the job's pods gone, for the next test."""
    fault(cluster, node, frozenset())
    admin = cluster.plane.rest()
    for name in pods(admin, namespace):
        try:
            admin.request(
                "DELETE",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                {"gracePeriodSeconds": 0},
            )
        except RestError as gone:
            if gone.status != 404:
                raise
    wait_until(lambda: not pods(admin, namespace), 60, f"the pods of {namespace} are gone")


def test_a_chip_fault_moves_only_the_faulty_pod_of_a_pod_rescheduling_job(
    cluster: Deployed,
) -> None:
    admin = cluster.plane.rest()
    namespace = admin.ensure_namespace("pod-level")
    admin.create(
        f"/api/v1/namespaces/{namespace}/configmaps",
        {"metadata": {"name": "reset-config-train", "labels": {"reset": "true"}}, "data": RESET},
    )
    labels = {"fault-scheduling": "force", "pod-rescheduling": "on"}
    before = run_job(cluster, namespace, labels)
    # Volcano's update once the job is placed, through the shipped RBAC and admission policy.
    wait_until(lambda: retry_time(admin, namespace) == 0, 60, "reset-config updated")
    faulty = before["train-2"][1]
    fault(cluster, faulty, frozenset({3}))
    wait_until(
        lambda: placed(admin, namespace).get("train-2", ("",))[0] != before["train-2"][0],
        90,
        "the pod on the failed chip is deleted",
    )
    kept = {n: before[n] for n in ("train-0", "train-1", "train-3")}
    assert {n: v for n, v in placed(admin, namespace).items() if n in kept} == kept
    submit(admin, namespace, 2, labels)  # its controller makes it again
    wait_pods(cluster.plane, namespace, "job=train", 4, timeout=120)
    after = placed(admin, namespace)
    assert {n: after[n] for n in kept} == kept, "the three others: same UIDs and nodes"
    assert after["train-2"][1] not in ("", faulty)
    ranks = {
        n: p["metadata"]["annotations"]["hccl/rankIndex"] for n, p in pods(admin, namespace).items()
    }
    assert ranks == {f"train-{r}": str(r) for r in range(4)}
    wait_until(lambda: retry_time(admin, namespace) == 1, 60, "one pod-level retry counted")
    finish(cluster, namespace, faulty)


def test_rank_0_failing_restarts_the_whole_pod_rescheduling_job(cluster: Deployed) -> None:
    admin = cluster.plane.rest()
    namespace = admin.ensure_namespace("master-fault")
    labels = {"fault-scheduling": "force", "pod-rescheduling": "on"}
    before = run_job(cluster, namespace, labels)
    faulty = before["train-0"][1]
    fault(cluster, faulty, frozenset({0}))
    wait_until(lambda: not pods(admin, namespace), 90, "every pod of the job is deleted")
    # Made again, the job comes back whole: the healthy ranks on their nodes (held for it).
    after = run_job(cluster, namespace, labels)
    assert all(after[f"train-{r}"][1] == before[f"train-{r}"][1] for r in (1, 2, 3))
    assert after["train-0"][1] != faulty
    finish(cluster, namespace, faulty)


def test_a_process_recovery_job_never_has_a_healthy_pod_deleted(cluster: Deployed) -> None:
    admin = cluster.plane.rest()
    namespace = admin.ensure_namespace("process-level")
    labels = {"fault-scheduling": "force", "process-recover-enable": "on"}
    before = run_job(cluster, namespace, labels)
    faulty = before["train-1"][1]
    fault(cluster, faulty, frozenset({5}))
    wait_until(lambda: "train-1" not in placed(admin, namespace), 90, "the faulty pod is deleted")
    kept = {n: before[n] for n in ("train-0", "train-2", "train-3")}
    submit(admin, namespace, 1, labels)
    wait_pods(cluster.plane, namespace, "job=train", 4, timeout=120)
    after = placed(admin, namespace)
    assert {n: after[n] for n in kept} == kept
    assert after["train-1"][1] not in ("", faulty)
    finish(cluster, namespace, faulty)
