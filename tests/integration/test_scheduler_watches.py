"""The scheduler service on watches: a change reaches /filter with no read of the whole
cluster, and after any disconnection (even past the API server's history) its view is the
one a fresh read gives."""

from __future__ import annotations

import random
from typing import Any

from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.cluster import wait_for
from simulation.kube_scheduler import post_json
from simulation.memory import MemoryCluster, pod_object
from tests.integration.test_extender import Clock, add_node

NAMES = [f"n{i}" for i in range(6)]


def store() -> MemoryCluster:
    api = MemoryCluster(history=30, bookmark_seconds=0.05)
    for name in NAMES:
        add_node(api, name)
    return api


def answers(extender: Extender) -> list[Any]:
    """What /filter says for every request size over every node."""
    return [
        sorted(
            extender.filter({"Pod": pod_object("q", "ask", None, npu), "NodeNames": NAMES}).passing
        )
        for npu in (1, 2, 4, 8)
    ]


def fresh_answers(api: MemoryCluster, clock: Clock) -> list[Any]:
    extender = Extender(api, clock=clock)
    SchedulerService(api, extender, clock=clock).refresh()
    return answers(extender)


def running(api: MemoryCluster, name: str, node: str, chips: list[int]) -> None:
    real = ",".join(f"Ascend910-{c}" for c in chips)
    notes = {"huawei.com/AscendReal": real, "huawei.com/Ascend910": real, "predicate-time": "1"}
    api.put("Pod", pod_object("ns", name, node, len(chips), annotations=notes, phase="Running"))


def test_a_chip_fault_reaches_filter_through_the_watch_alone() -> None:
    api, clock = store(), Clock()
    service = SchedulerService(api, Extender(api, clock=clock), clock=clock, refresh_period=3600)
    service.start()
    try:
        asking = pod_object("q", "ask", None, 8)
        api.put("Pod", asking)  # the filter decides for the cluster's pod
        assert service.extender.filter({"Pod": asking, "NodeNames": ["n0"]}).NodeNames == ["n0"]
        add_node(api, "n0", unhealthy=frozenset({3}))
        assert wait_for(
            lambda: service.extender.filter({"Pod": asking, "NodeNames": ["n0"]}).NodeNames == []
        ), "the fault is seen without a read of the whole cluster"
        running(api, "p", "n1", [0, 1, 2, 3, 4, 5, 6, 7])
        assert wait_for(
            lambda: service.extender.filter({"Pod": asking, "NodeNames": ["n1"]}).NodeNames == []
        ), "a pod holding the node's chips is seen"
    finally:
        service.stop()


def test_after_any_disconnection_the_view_equals_a_fresh_read() -> None:
    api, clock = store(), Clock()
    service = SchedulerService(api, Extender(api, clock=clock), clock=clock, refresh_period=3600)
    service.start()
    rng = random.Random(3)
    try:
        for round_ in range(4):
            api.reachable = False
            for i in range(rng.choice([5, 40])):  # within the history, or far past it
                node = rng.choice(NAMES)
                step = rng.random()
                if step < 0.5:
                    chips = sorted(rng.sample(range(8), rng.choice([1, 2, 4, 8])))
                    running(api, f"p{round_}-{i}", node, chips)
                elif step < 0.7:
                    pods = api.list_pods(None)[0]
                    if pods:
                        gone = rng.choice(pods)["metadata"]["name"]
                        api.delete("Pod", "ns", gone)
                else:
                    add_node(api, node, unhealthy=frozenset(rng.sample(range(8), 1)))
            api.reachable = True
            want = fresh_answers(api, clock)

            def caught_up(want: list[Any] = want) -> bool:
                return answers(service.extender) == want

            assert wait_for(caught_up), round_
    finally:
        service.stop()


def test_the_comparer_names_what_a_stuck_watch_missed_and_finds_nothing_once_caught_up() -> None:
    """``POST /debug/compare``: nothing while the watches keep up; with the watches stopped,
    the pod created and the pod deleted since, and the two nodes whose view they change."""
    api, clock = store(), Clock()
    service = SchedulerService(
        api, Extender(api, clock=clock), clock=clock, refresh_period=3600, compare_period=0
    )
    url = service.start()
    try:
        running(api, "p", "n1", [0, 1])
        assert wait_for(lambda: post_json(f"{url}/debug/compare", {}, 5) == {})
        service.informers.stop()
        running(api, "q", "n2", [4])
        api.delete("Pod", "ns", "p")
        drift = post_json(f"{url}/debug/compare", {}, 5)
        assert drift["collections"] == {
            "pods": {"missed": ["ns/q"], "redundant": ["ns/p"], "stale": []}
        }
        assert sorted(drift["node_views"]) == ["n1", "n2"]
        n1 = drift["node_views"]["n1"]
        assert "free=(2, 3, 4, 5, 6, 7)" in n1["watched"], "p's chips held in the watched view"
        assert "free=(0, 1, 2, 3, 4, 5, 6, 7)" in n1["fresh"]
        service.refresh()
        assert post_json(f"{url}/debug/compare", {}, 5) == {}, "a full read catches up"
    finally:
        service.stop()
