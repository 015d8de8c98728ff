"""kube-scheduler when the extender does not answer, on the real control plane: the shipped
extender is not ``ignorable``, so a failed filter call fails the pod's scheduling cycle
(``pkg/scheduler/schedule_one.go``, ``findNodesThatPassExtenders``); the pod is not bound
anywhere without the extender's chips, backs off, and is placed once the extender answers
again (``pkg/scheduler/backend/queue``: backoff 1 s doubling to 10 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.cluster import Deployed, deployed, npu_pod
from testbed.control_plane import ControlPlane, wait_until
from tests.real.test_kube_scheduler import check_chips


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane) -> Iterator[Deployed]:
    with deployed(control_plane, control_plane.workdir, nodes=1) as running:
        yield running


def test_no_pod_is_bound_while_the_extender_is_down_and_all_are_once_it_is_back(
    cluster: Deployed,
) -> None:
    admin = cluster.plane.rest()
    ns = admin.ensure_namespace("down")
    pods = f"/api/v1/namespaces/{ns}/pods"
    cluster.service.stop()
    for name, chips in (("a", 4), ("b", 2)):
        pod = npu_pod(chips, {"tier": "waiting"})
        pod["metadata"]["name"] = name
        admin.create(pods, pod)

    def refused_thrice() -> bool:
        events = admin.get(
            f"/api/v1/namespaces/{ns}/events", fieldSelector="reason=FailedScheduling"
        )
        # kube-scheduler's events API folds repeats into a series (core/v1 shows its count).
        counts = [
            max(int(e.get("count") or 1), int((e.get("series") or {}).get("count", 1)))
            for e in events["items"]
            if f"{cluster.service_url}/filter" in e["message"]
        ]
        return sum(counts) >= 3  # a's and b's first tries, and a retry after the backoff

    wait_until(refused_thrice, 90, "kube-scheduler reports the extender's failure")
    assert all(not p["spec"].get("nodeName") for p in admin.get(pods)["items"]), "none bound"

    cluster.start_service()
    wait_until(
        lambda: all(p["status"].get("phase") == "Running" for p in admin.get(pods)["items"]),
        120,
        "both pods run once the extender answers again",
    )
    check_chips(cluster, admin.get(pods)["items"])
