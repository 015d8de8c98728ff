"""Gang holds within quota (issue 38, audit finding 2), on the real control plane with the
shipped manifests, kube-scheduler and the scheduler service as deployed (holds may cost half
the cluster here, per namespace and all together: ``--hold-share-per-namespace 0.5``):

- the issue's attack: 1-chip pods each claiming a gang of 2 in an annotation held a whole node
  each against another tenant; now they hold nothing, and the other tenant's pods run;
- the finding's attack: a PodGroup of ``minMember: 1000`` and one 1-chip member held a chip on
  every server, so another tenant's 8-chip pod ran nowhere; now only the member that exists
  is held for, its node charged as a whole server, and the 8-chip pods run on the rest;
- its namespaces together: many 1-chip members in PodGroups of two namespaces hold at most
  the share of the servers, all namespaces counted together;
- a gang whose coscheduling PodGroup states its size, whose pods exist but do not fit yet,
  still holds the whole node it fits on against a stream of small pods, and starts there.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator

import pytest

from contract import deviceinfo
from contract.groups import COSCHEDULING_GROUP_LABEL
from testbed.cluster import Deployed, deployed, npu_pod, wait_pods
from testbed.control_plane import ControlPlane, wait_until
from testbed.rest import Obj, Rest
from tests.real.test_gang_forms import install_podgroup_crd

GANG_WAITING = "NPUGangWaiting"
NODES = 4


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Deployed]:
    install_podgroup_crd(control_plane.rest())
    flags = ("--hold-share-per-namespace", "0.5")
    with deployed(
        control_plane, control_plane.workdir, nodes=NODES, service_flags=flags
    ) as running:
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


def settled(cluster: Deployed) -> None:
    """The service has let every deleted gang go (``ascend_scheduler_waiting_gangs`` all 0, its
    holds with them) and every deleted pod's chips (no chip of a node held): a pod it refused
    is retried by kube-scheduler only on a cluster event or after minutes, so the next test
    starts once the service sees the cluster empty."""

    def empty() -> bool:
        with urllib.request.urlopen(f"{cluster.metrics_url}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        counts = re.findall(r"^ascend_scheduler_waiting_gangs\{[^}]*\} (\S+)$", text, re.M)
        held = re.findall(
            r'^ascend_scheduler_node_chips\{[^}]*state="held"[^}]*\} (\S+)$', text, re.M
        )
        free = re.findall(
            r'^ascend_scheduler_node_chips\{[^}]*state="free"[^}]*\} (\S+)$', text, re.M
        )
        return (
            bool(counts)
            and all(float(c) == 0 for c in counts)
            and len(free) == NODES
            and all(float(h) == 0 for h in held)
        )

    wait_until(empty, 60, "no gang waiting and no chip held")
    # And every agent has seen its node's pods go (its DeviceInfo offers all 8 chips): an
    # agent still counting a deleted pod's chips refuses the next pod's Allocate.
    admin = cluster.plane.rest()

    def freed(node: str) -> bool:
        path = f"/api/v1/namespaces/kube-system/configmaps/{deviceinfo.configmap_name(node)}"
        return len(deviceinfo.decode(admin.get(path)["data"]).free) == 8

    nodes = [n["metadata"]["name"] for n in admin.get("/api/v1/nodes")["items"]]
    wait_until(lambda: all(freed(n) for n in nodes), 60, "every agent offers all its chips")


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
    settled(cluster)


def create_podgroup(admin: Rest, namespace: str, name: str, size: int) -> None:
    admin.create(
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": {"minMember": size},
        },
    )


def create_members(admin: Rest, namespace: str, group: str, chips: int, count: int) -> list[str]:
    """``count`` pods of ``chips`` chips in the coscheduling PodGroup ``group``."""
    names = [f"{group}-{i}" for i in range(count)]
    for name in names:
        create_pod(
            admin, namespace, name, npu_pod(chips, {"job": group, COSCHEDULING_GROUP_LABEL: group})
        )
    return names


def refused_for(admin: Rest, namespace: str, gang: str) -> bool:
    """kube-scheduler recorded a pod of ``namespace`` refused for a hold of ``gang``."""
    events = admin.get(
        f"/api/v1/namespaces/{namespace}/events", fieldSelector="reason=FailedScheduling"
    )
    return any(f"held for gang {gang}" in e["message"] for e in events["items"])


def test_a_podgroup_of_1000_with_one_one_chip_member_leaves_other_tenants_the_servers(
    cluster: Deployed,
) -> None:
    # Audit finding 2: the member's hold share (16 of 32 chips) became a 1-chip hold on each
    # of the 4 servers (999 members "missing"), so an 8-chip pod of another tenant passed on
    # no node, for the hold limit and again after each backoff.
    admin = cluster.plane.rest()
    tenant = admin.ensure_namespace("tenant-a")
    create_podgroup(admin, tenant, "huge", 1000)
    (member,) = create_members(admin, tenant, "huge", 1, 1)
    wait_gang_waiting(admin, tenant, [member])
    victim = admin.ensure_namespace("tenant-b")
    for i in range(3):
        create_pod(admin, victim, f"whole-{i}", npu_pod(8, {"job": "whole"}))
    # One server is held for the member that exists; the three others run the 8-chip pods.
    running = wait_pods(cluster.plane, victim, "job=whole", 3, timeout=60)
    assert len({p["spec"]["nodeName"] for p in running}) == 3
    delete_all_pods(admin, victim)
    delete_all_pods(admin, tenant)
    settled(cluster)


def test_a_tenants_namespaces_together_hold_at_most_the_share_of_the_servers(
    cluster: Deployed,
) -> None:
    # Four 1-chip members in a PodGroup of 1000 in each of two namespaces: each namespace
    # could hold a chip on every server (before: its own share, counted in chips); now both
    # together hold at most half of the 4 servers (each held node counted whole).
    admin = cluster.plane.rest()
    namespaces = [admin.ensure_namespace(f"tenant-c{i}") for i in range(2)]
    for namespace in namespaces:
        create_podgroup(admin, namespace, "many", 1000)
        wait_gang_waiting(admin, namespace, create_members(admin, namespace, "many", 1, 4))
    victim = admin.ensure_namespace("tenant-d")
    for i in range(4):
        create_pod(admin, victim, f"whole-{i}", npu_pod(8, {"job": "whole"}))
    running = wait_pods(cluster.plane, victim, "job=whole", 2, timeout=60)
    assert len({p["spec"]["nodeName"] for p in running}) == 2
    gangs = [f"{namespace}/many" for namespace in namespaces]
    wait_until(
        lambda: any(refused_for(admin, victim, gang) for gang in gangs),
        60,
        "the other two 8-chip pods are refused the held servers",
    )
    listed = admin.get(f"/api/v1/namespaces/{victim}/pods", labelSelector="job=whole")["items"]
    assert sum(p["status"].get("phase") == "Running" for p in listed) == 2
    delete_all_pods(admin, victim)
    for namespace in namespaces:
        delete_all_pods(admin, namespace)
    settled(cluster)


def test_a_podgroup_gang_whose_pods_exist_holds_its_node_ahead_of_small_pods_and_starts(
    cluster: Deployed,
) -> None:
    admin = cluster.plane.rest()
    other = admin.ensure_namespace("other")
    for i in range(3):  # three of the four servers busy: the gang of two does not fit yet
        create_pod(admin, other, f"busy-{i}", npu_pod(8, {"job": "busy"}))
    busy = wait_pods(cluster.plane, other, "job=busy", 3)
    train = admin.ensure_namespace("train")
    create_podgroup(admin, train, "pg", 2)
    wait_gang_waiting(admin, train, create_members(admin, train, "pg", 8, 2))
    # Both its pods exist: the one server it fits on is held against a small pod.
    create_pod(admin, other, "small", npu_pod(1, {"job": "small"}))
    wait_until(lambda: refused_for(admin, other, "train/pg"), 60, "the small pod is refused")
    busy_nodes = {p["spec"]["nodeName"] for p in busy}
    freed = busy[0]
    admin.request(
        "DELETE",
        f"/api/v1/namespaces/{other}/pods/{freed['metadata']['name']}",
        {"gracePeriodSeconds": 0},
    )
    # A busy server frees: the gang starts there and on the server held for it.
    started = wait_pods(cluster.plane, train, "job=pg", 2)
    gang_nodes = {p["spec"]["nodeName"] for p in started}
    held = {n["metadata"]["name"] for n in admin.get("/api/v1/nodes")["items"]} - busy_nodes
    assert gang_nodes == held | {freed["spec"]["nodeName"]}, (gang_nodes, held)
    delete_all_pods(admin, other)
    delete_all_pods(admin, train)
