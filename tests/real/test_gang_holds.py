"""Gang holds within quota (issue 38), on the real control plane with the shipped manifests,
kube-scheduler and the scheduler service as deployed (one namespace may hold half the cluster
here: ``--hold-share-per-namespace 0.5``):

- the issue's attack: 1-chip pods each claiming a gang of 2 in an annotation held a whole node
  each against another tenant; now they hold nothing, and the other tenant's pods run;
- a gang whose coscheduling PodGroup states its size still holds the chips of its missing
  members against a stream of small pods, and starts on them when its last pod comes.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.groups import COSCHEDULING_GROUP_LABEL
from testbed.cluster import Deployed, deployed, npu_pod, wait_pods
from testbed.control_plane import ControlPlane, wait_until
from testbed.rest import Obj, Rest
from tests.real.test_gang_forms import install_podgroup_crd

GANG_WAITING = "NPUGangWaiting"


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Deployed]:
    install_podgroup_crd(control_plane.rest())
    flags = ("--hold-share-per-namespace", "0.5")
    with deployed(control_plane, control_plane.workdir, nodes=4, service_flags=flags) as running:
        yield running


def create_pod(admin: Rest, namespace: str, name: str, pod: Obj) -> None:
    pod["metadata"]["name"] = name
    admin.create(f"/api/v1/namespaces/{namespace}/pods", pod)


def wait_gang_waiting(admin: Rest, namespace: str, names: list[str]) -> None:
    """The extender has tried each pod and said its gang waits (Event NPUGangWaiting)."""

    def said() -> bool:
        events = admin.get(
            f"/api/v1/namespaces/{namespace}/events", fieldSelector=f"reason={GANG_WAITING}"
        )
        return set(names) <= {e["involvedObject"]["name"] for e in events["items"]}

    wait_until(said, 60, f"{names} are refused: their gangs wait")


def delete_all_pods(admin: Rest, namespace: str) -> None:
    pods = f"/api/v1/namespaces/{namespace}/pods"
    for pod in admin.get(pods)["items"]:
        admin.request("DELETE", f"{pods}/{pod['metadata']['name']}", {"gracePeriodSeconds": 0})
    wait_until(lambda: not admin.get(pods)["items"], 60, f"the pods of {namespace} are gone")


def test_pods_claiming_gangs_in_an_annotation_hold_no_chips_against_another_tenant(
    cluster: Deployed,
) -> None:
    admin = cluster.plane.rest()
    attacker = admin.ensure_namespace("attacker")
    claimed = [f"claim-{i}" for i in range(3)]
    for i, name in enumerate(claimed):
        pod = npu_pod(1, {"ascend.npu/gang": f"g{i}"}, {"ascend.npu/gang-size": "2"})
        create_pod(admin, attacker, name, pod)
    wait_gang_waiting(admin, attacker, claimed)
    # Three whole nodes were held (one per claimed gang): only one of these could run.
    victim = admin.ensure_namespace("victim")
    for i in range(3):
        create_pod(admin, victim, f"train-{i}", npu_pod(8, {"job": "train"}))
    running = wait_pods(cluster.plane, victim, "job=train", 3, timeout=60)
    assert len({p["spec"]["nodeName"] for p in running}) == 3
    delete_all_pods(admin, victim)
    delete_all_pods(admin, attacker)


def test_a_podgroup_gang_holds_its_chips_ahead_of_small_pods_and_starts_on_them(
    cluster: Deployed,
) -> None:
    admin = cluster.plane.rest()
    train = admin.ensure_namespace("train")
    admin.create(
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{train}/podgroups",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "pg"},
            "spec": {"minMember": 2},
        },
    )
    gang = {"job": "pg", COSCHEDULING_GROUP_LABEL: "pg"}
    create_pod(admin, train, "pg-0", npu_pod(8, gang))
    wait_gang_waiting(admin, train, ["pg-0"])
    # Small pods of another tenant fill the two nodes not held, and no more.
    other = admin.ensure_namespace("other")
    for i in range(17):
        create_pod(admin, other, f"small-{i}", npu_pod(1, {"job": "small"}))
    small = wait_pods(cluster.plane, other, "job=small", 16)
    assert len({p["spec"]["nodeName"] for p in small}) == 2

    def refused_for_the_gang() -> bool:
        events = admin.get(
            f"/api/v1/namespaces/{other}/events", fieldSelector="reason=FailedScheduling"
        )
        return any("held for gang train/pg" in e["message"] for e in events["items"])

    wait_until(refused_for_the_gang, 60, "the 17th small pod is refused the held nodes")
    create_pod(admin, train, "pg-1", npu_pod(8, gang))
    started = wait_pods(cluster.plane, train, "job=pg", 2)
    gang_nodes = {p["spec"]["nodeName"] for p in started}
    assert len(gang_nodes) == 2 and not gang_nodes & {p["spec"]["nodeName"] for p in small}
