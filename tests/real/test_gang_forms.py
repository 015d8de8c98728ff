"""Gangs in the forms kube-scheduler's users write them, on the real control plane: an
indexed Job whose pods carry Kueue's plain pod-group labels, and one whose pods name a
scheduler-plugins coscheduling PodGroup (its CRD installed as such a cluster serves it). Each
8 × 2 job gets two whole nodes and starts together, ranks as the Job controller numbers them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from contract.groups import (
    COSCHEDULING_GROUP_LABEL,
    KUEUE_GROUP_LABEL,
    KUEUE_TOTAL_ANNOTATION,
)
from testbed.cluster import Deployed, deployed, npu_pod, wait_pods
from testbed.control_plane import ControlPlane, wait_until
from testbed.rest import Obj, Rest
from tests.real.test_kube_scheduler import check_chips

CRD = Path(__file__).parent / "data" / "coscheduling-podgroup-crd.yaml"


def install_podgroup_crd(admin: Rest) -> None:
    """The coscheduling PodGroup CRD, applied and waited for until the API server serves it."""
    admin.apply(yaml.safe_load(CRD.read_text()))
    crd = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.x-k8s.io"

    def established() -> bool:
        conditions = (admin.get(crd).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_until(established, 60, "the PodGroup CRD is established")


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Deployed]:
    install_podgroup_crd(control_plane.rest())
    with deployed(control_plane, control_plane.workdir, nodes=4) as running:
        yield running


def indexed_job(name: str, size: int, labels: dict[str, str], annotations: dict[str, str]) -> Obj:
    return {
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": size,
            "parallelism": size,
            "template": npu_pod(8, {"job": name, **labels}, annotations),
        },
    }


def test_gangs_of_kueue_and_coscheduling_start_whole_or_wait_whole(cluster: Deployed) -> None:
    admin = cluster.plane.rest()
    ns = admin.ensure_namespace("gangs")
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    pods = f"/api/v1/namespaces/{ns}/pods"
    admin.create(
        jobs, indexed_job("kq", 2, {KUEUE_GROUP_LABEL: "kq"}, {KUEUE_TOTAL_ANNOTATION: "2"})
    )
    kueue = wait_pods(cluster.plane, ns, "job=kq", 2)
    check_chips(cluster, kueue)
    assert len({p["spec"]["nodeName"] for p in kueue}) == 2, "8 × 2 chips: two whole nodes"

    # 8 × 3 chips with two whole nodes free: the whole gang waits, none of its pods binds.
    admin.create(
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups",
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "pg"},
            "spec": {"minMember": 3},
        },
    )
    admin.create(jobs, indexed_job("co", 3, {COSCHEDULING_GROUP_LABEL: "pg"}, {}))

    def all_refused() -> bool:
        """The Job controller has made all three pods (it creates them in batches) and
        kube-scheduler has tried each and been refused."""
        group = admin.get(pods, labelSelector="job=co")["items"]
        events = admin.get(
            f"/api/v1/namespaces/{ns}/events", fieldSelector="reason=FailedScheduling"
        )
        tried = {e["involvedObject"]["name"] for e in events["items"]}
        return len(group) == 3 and {p["metadata"]["name"] for p in group} <= tried

    wait_until(all_refused, 90, "kube-scheduler tried each pod of the gang and was refused")
    group = admin.get(pods, labelSelector="job=co")["items"]
    assert not any(p["spec"].get("nodeName") for p in group), "no part of the gang binds"
    waiting = admin.get(f"/api/v1/namespaces/{ns}/events", fieldSelector="reason=NPUGangWaiting")
    assert waiting["items"], "the extender says why (Event NPUGangWaiting)"

    # The Kueue job ends: four whole nodes free, and the gang of three starts on three.
    admin.request("DELETE", f"{jobs}/kq", {"propagationPolicy": "Background"})
    started = wait_pods(cluster.plane, ns, "job=co", 3)
    check_chips(cluster, started)
    assert len({p["spec"]["nodeName"] for p in started}) == 3
