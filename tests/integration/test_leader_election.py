"""Two replicas of the scheduler service elect a leader on a Lease: only the leader answers
the verbs and is ready; when it stops, the standby takes over within the lease duration, and
a stream of binds across the takeover places every pod with no chip held twice."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from contract.objects import Obj
from infra.kube.port import KubeError, WatchEvent
from infra.leader import Timing
from scheduler_core.service.extender import Extender
from scheduler_core.service.server import Election, SchedulerService
from simulation.cluster import wait_for
from simulation.memory import MemoryCluster, pod_object
from tests.integration.test_extender import add_node

FAST = Timing(lease=3, renew_deadline=2, retry=1)


class Replica:
    """One replica's own view of the API server: cut it and the replica is gone for it."""

    def __init__(self, store: MemoryCluster) -> None:
        self._store = store
        self.cut = False

    def __getattr__(self, call: str) -> Any:
        method = getattr(self._store, call)

        def through(*args: Any, **kwargs: Any) -> Any:
            if self.cut:
                raise KubeError(f"{call}: this replica lost the API server")
            return method(*args, **kwargs)

        return through

    def watch_pods(self, node: str, resource_version: str, timeout: float) -> Iterator[WatchEvent]:
        return iter(())


def post(url: str, verb: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(f"{url}/{verb}", data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())
    except urllib.error.URLError:
        return 0, {}  # the replica is gone: the Service routes nothing there


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as answer:
            return bool(answer.status == 200)
    except urllib.error.URLError:  # not ready (503), or gone
        return False


@pytest.fixture
def replicas() -> Iterator[tuple[MemoryCluster, list[tuple[Replica, SchedulerService, str]]]]:
    store = MemoryCluster()
    for i in range(4):
        add_node(store, f"n{i}")
    started = []
    for name in ("a", "b"):
        gateway = Replica(store)
        service = SchedulerService(
            gateway,
            Extender(gateway),
            refresh_period=0.2,
            clock=lambda: 1_700_000_000.0,
            election=Election(timing=FAST, holder=f"replica-{name}"),
        )
        started.append((gateway, service, service.start()))
    yield store, started
    for _, service, _ in started:
        service.stop()


def schedule(urls: list[str], pod: Obj) -> str:
    """kube-scheduler's calls through the Service: to whichever replica answers (is ready)."""
    names = [f"n{i}" for i in range(4)]
    while True:
        assert wait_for(lambda: any(ready(u) for u in urls)), "a leader within the lease"
        for url in urls:
            status, answer = post(url, "filter", {"Pod": pod, "NodeNames": names})
            if status != 200:
                continue  # not the leader, or gone: the Service would not route here
            node = answer["NodeNames"][0]
            meta = pod["metadata"]
            binding = {"PodName": meta["name"], "PodNamespace": "ns", "PodUID": meta["uid"]}
            status, bound = post(url, "bind", {**binding, "Node": node})
            if status == 200 and not bound["Error"]:
                return str(node)


def test_the_standby_takes_over_within_the_lease_and_no_chip_is_held_twice(
    replicas: tuple[MemoryCluster, list[tuple[Replica, SchedulerService, str]]],
) -> None:
    store, started = replicas
    urls = [url for _, _, url in started]
    assert wait_for(lambda: sum(ready(u) for u in urls) == 1), "one leader, one standby"
    leader = next(i for i, url in enumerate(urls) if ready(url))
    standby = 1 - leader
    status, answer = post(urls[standby], "filter", {"Pod": {"metadata": {}}, "NodeNames": []})
    assert status == 503 and "does not lead" in answer["Error"]
    for i in range(16):  # a stream of binds: the leader stops in the middle of it
        if i == 8:
            started[leader][0].cut = True  # the leader's pod is gone
            started[leader][1].stop()
        store.put("Pod", pod_object("ns", f"p{i:02d}", None, 2))
        schedule(urls, store.get_pod("ns", f"p{i:02d}"))
    assert ready(urls[standby])
    assert store.get_lease("kube-system", "ascend-npu-scheduler")["spec"]["holderIdentity"] == (
        f"replica-{'ab'[standby]}"
    )
    held: dict[tuple[str, str], str] = {}
    for pod in store.list_pods(None)[0]:
        node = pod["spec"]["nodeName"]
        for chip in pod["metadata"]["annotations"]["huawei.com/Ascend910"].split(","):
            assert (node, chip) not in held, f"{chip} on {node} twice"
            held[(node, chip)] = pod["metadata"]["name"]
    assert len(held) == 32, "every pod placed"


def test_a_replica_that_stops_gives_the_lease_up_and_ends_its_election(
    replicas: tuple[MemoryCluster, list[tuple[Replica, SchedulerService, str]]],
) -> None:
    store, started = replicas
    urls = [url for _, _, url in started]
    assert wait_for(lambda: sum(ready(u) for u in urls) == 1)
    leader = next(i for i, url in enumerate(urls) if ready(url))
    started[leader][1].stop()
    # Released, not left to expire: the standby takes it at its next try.
    assert wait_for(lambda: holder(store) == f"replica-{'ab'[1 - leader]}")
    started[1 - leader][1].stop()
    assert not any(t.name == "leader-election" for t in threading.enumerate())


def holder(store: MemoryCluster) -> str:
    return str(store.get_lease("kube-system", "ascend-npu-scheduler")["spec"]["holderIdentity"])
