"""The live NPU map over HTTP (``--npu-map``): off unless enabled, behind the verbs'
authentication, the scheduler's own view as JSON, cheap to poll while unchanged."""

from __future__ import annotations

import base64
import http.client
import json
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest

from infra.kube.client import KubernetesGateway
from scheduler_core.service.access import OPEN, Access
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from scheduler_core.service.views.npu_map import FAULTY, HELD
from simulation.cluster import SimulatedCluster, simulated_cluster, tor_configmap, wait_for
from simulation.kube_scheduler import KubeScheduler
from simulation.loopback import LoopbackApiServer
from simulation.memory import MemoryCluster
from tests.e2e.helpers import PLACEMENT, place, submit

TOKEN = "map-token-0123456789"


def basic(password: str) -> dict[str, str]:
    """HTTP Basic with the token as its password, as a browser sends it."""
    return {"Authorization": "Basic " + base64.b64encode(f"admin:{password}".encode()).decode()}


def fetch(
    url: str, path: str, headers: Mapping[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """A GET: its status, headers (names in lower case) and body."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=10)
    try:
        connection.request("GET", path, headers=dict(headers or {}))
        answer = connection.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        connection.close()


@contextmanager
def service_of_no_nodes(
    npu_map: bool, access: Access = OPEN
) -> Iterator[tuple[str, SchedulerService]]:
    """The scheduler service over an empty cluster (its verbs' URL), with a metrics port."""
    api = LoopbackApiServer(MemoryCluster())
    api.start()
    gateway = KubernetesGateway.for_url(api.url)
    service = SchedulerService(gateway, Extender(gateway), refresh_period=0.5, npu_map=npu_map)
    try:
        yield service.start(access=access, metrics_at=("127.0.0.1", 0)), service
    finally:
        service.stop()
        api.stop()


def test_the_map_is_not_served_unless_enabled() -> None:
    with service_of_no_nodes(npu_map=False) as (url, _):
        for path in ("/map", "/map/state", "/map/map.js"):
            assert fetch(url, path)[0] == 404, path


def test_the_map_takes_the_verbs_credentials_and_only_on_their_port() -> None:
    with service_of_no_nodes(npu_map=True, access=Access(token=TOKEN)) as (url, service):
        for path in ("/map", "/map/state", "/map/map.js", "/map/state?x=1"):
            code, headers, body = fetch(url, path)
            assert code == 401, path
            assert headers["www-authenticate"].startswith("Basic "), "a browser asks for it"
            assert b"token" in body
            assert fetch(url, path, basic("a guess"))[0] == 401, path
        assert service.metrics.text().count('reason="no_credentials"'), "refusals are counted"
        code, headers, body = fetch(url, "/map", basic(TOKEN))
        assert code == 200 and headers["content-type"].startswith("text/html")
        assert b'<script src="/map/map.js"' in body
        assert "script-src 'self'" in headers["content-security-policy"]
        assert "default-src 'none'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        code, headers, _ = fetch(url, "/map/map.js", {"Authorization": f"Bearer {TOKEN}"})
        assert code == 200 and headers["content-type"].startswith("text/javascript")
        # The probes stay open; the port monitoring reaches serves no map at all.
        assert fetch(url, "/healthz")[0] == 200
        assert fetch(service.metrics_url, "/map", basic(TOKEN))[0] == 404
        assert fetch(service.metrics_url, "/map/state")[0] == 404


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimulatedCluster]:
    with simulated_cluster(4, npu_map=True, super_pods={"node-00": 1, "node-01": 1}) as built:
        built.store.put("ConfigMap", tor_configmap(4, 2))
        yield built


def state(cluster: SimulatedCluster) -> dict[str, Any]:
    code, _, body = fetch(cluster.url, "/map/state")
    assert code == 200
    answer: dict[str, Any] = json.loads(body)
    return answer


def chips(snapshot: Mapping[str, Any]) -> dict[tuple[str, int], tuple[str, str]]:
    """(node, chip) → (state, holder) over the whole snapshot."""
    return {
        (node["name"], chip): (what, holder)
        for pod in snapshot["superpods"]
        for tor in pod["tors"]
        for node in tor["nodes"]
        for group in node["groups"]
        for chip, what, holder in group
    }


def fail_chip(cluster: SimulatedCluster, name: str, chip: int) -> None:
    """The fake driver reports the chip unhealthy; the kubelet then counts one chip fewer in
    the node's status (the scheduler leaves a node out while the two disagree)."""
    node = cluster.nodes[name]
    node.set_health(frozenset({chip}))
    assert node.kubelet.wait_for(lambda: node.kubelet.allocatable("huawei.com/Ascend910") == 7)
    cluster.sync_node_status()


def test_the_state_is_the_schedulers_view(cluster: SimulatedCluster) -> None:
    submit(cluster, "train", 4)
    node = place(cluster, KubeScheduler(cluster), "train")["train"]
    assert wait_for(
        lambda: sum(v == (HELD, "ns/train") for v in chips(state(cluster)).values()) == 4
    )
    seen = chips(state(cluster))
    held = {c for (n, c), (what, _) in seen.items() if n == node and what == HELD}
    assert held == set(cluster.service.extender.state.session.nodes[node].free) ^ set(range(8))
    snapshot = state(cluster)
    grouping = {
        pod["id"]: {tor["id"]: [n["name"] for n in tor["nodes"]] for tor in pod["tors"]}
        for pod in snapshot["superpods"]
    }
    assert grouping == {1: {0: ["node-00", "node-01"]}, None: {1: ["node-02", "node-03"]}}


def waiting_gangs(cluster: SimulatedCluster) -> list[tuple[str, bool]]:
    """A scheduling cycle, then the gangs the map shows waiting: name, and whether its reason
    is that 2 of its 3 pods exist (the cycle may come before the service saw them both)."""
    scheduler = KubeScheduler(cluster)
    try:
        scheduler.cycle()
    finally:
        scheduler.close()
    return [(g["name"], "2 of 3 pods exist" in g["reason"]) for g in state(cluster)["gangs"]]


def test_a_waiting_gang_says_why(cluster: SimulatedCluster) -> None:
    submit(cluster, "g-0", 8, gang="wide", size=3)
    submit(cluster, "g-1", 8, gang="wide", size=3)
    assert wait_for(lambda: waiting_gangs(cluster) == [("ns/wide", True)], timeout=PLACEMENT), (
        state(cluster)["gangs"]
    )


def test_a_fault_shows_and_an_unchanged_state_is_not_sent_again(cluster: SimulatedCluster) -> None:
    fail_chip(cluster, "node-03", 5)
    assert wait_for(lambda: chips(state(cluster)).get(("node-03", 5)) == (FAULTY, ""))
    tag = fetch(cluster.url, "/map/state")[1]["etag"]
    again = fetch(cluster.url, "/map/state", {"If-None-Match": tag})
    assert again[0] == 304 and again[2] == b"", "the poll of an unchanged state reads nothing"
    assert again[1]["etag"] == tag
    assert fetch(cluster.url, "/map/state", {"If-None-Match": '"other"'})[0] == 200
