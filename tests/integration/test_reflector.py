"""The reflector keeps a collection as a fresh read would show it, whatever happens to the
stream: lists once, follows a watch, resumes a dropped stream from its version, lists again
only on 410 Gone, and after any interleaving of writes and disconnections holds exactly what
a new list holds. Against the in-memory store and, over HTTP, the official client."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from contract.objects import Obj
from infra.kube.client import KubernetesGateway
from infra.kube.port import KubeGateway, Selection, list_all
from infra.kube.reflector import Backoff, Change, Reflector
from simulation.cluster import wait_for
from simulation.loopback import LoopbackApiServer
from simulation.memory import MemoryCluster, pod_object

RUNNING = Selection("Pod", fields="status.phase!=Succeeded,status.phase!=Failed")
FAST = Backoff(0.01, 0.05)


@dataclass
class Setup:
    store: MemoryCluster
    gateway: KubeGateway
    server: LoopbackApiServer | None
    down: bool = False

    def disconnect(self) -> None:
        if self.down:
            return
        self.down = True
        if self.server is None:
            self.store.reachable = False
        else:
            self.server.stop()

    def reconnect(self) -> None:
        if not self.down:
            return
        self.down = False
        if self.server is None:
            self.store.reachable = True
        else:
            self.server.start()


@pytest.fixture(params=["memory", "http"])
def setup(request: pytest.FixtureRequest) -> Iterator[Setup]:
    store = MemoryCluster(history=40, bookmark_seconds=0.05)
    if request.param == "memory":
        yield Setup(store, store, None)
        return
    server = LoopbackApiServer(store)
    yield Setup(store, KubernetesGateway.for_url(server.start()), server)
    server.stop()


def names(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['name']}@{meta['resourceVersion']}"


def follow(setup: Setup, what: Selection = RUNNING) -> tuple[Reflector[str], list[Change[str]]]:
    heard: list[Change[str]] = []
    reflector: Reflector[str] = Reflector(
        setup.gateway, what, names, on_change=heard.extend, page_size=3, backoff=FAST
    )
    reflector.start()
    assert wait_for(lambda: reflector.synced)
    return reflector, heard


def caught_up(setup: Setup, reflector: Reflector[str]) -> Callable[[], bool]:
    """The reflector has seen the store's latest version (from an event or a bookmark)."""
    return lambda: int(reflector.version or 0) >= int(setup.store.list_pods(None)[1])


def fresh(setup: Setup, what: Selection = RUNNING) -> list[str]:
    return sorted(names(o) for o in list_all(setup.store, what)[0])


def put_pods(store: MemoryCluster, count: int, prefix: str = "p") -> None:
    for i in range(count):
        store.put("Pod", pod_object("ns", f"{prefix}{i}", "n1", 1, phase="Running"))


def test_it_lists_in_pages_then_follows_the_watch(setup: Setup) -> None:
    put_pods(setup.store, 7)
    reflector, heard = follow(setup)
    try:
        assert sorted(reflector.values()) == fresh(setup)
        assert len(heard) == 7, "the first list reports every object as added"
        setup.store.put("Pod", pod_object("ns", "late", "n1", 1, phase="Running"))
        setup.store.delete("Pod", "ns", "p0")
        assert wait_for(caught_up(setup, reflector))
        assert sorted(reflector.values()) == fresh(setup)
        assert [(c.key, c.new is None) for c in heard[7:]] == [("ns/late", False), ("ns/p0", True)]
        assert reflector.counts.lists == 1
    finally:
        reflector.stop()


def test_a_pod_that_finishes_leaves_the_store(setup: Setup) -> None:
    put_pods(setup.store, 2)
    reflector, _ = follow(setup)
    try:
        done = setup.store.get_pod("ns", "p1")
        done["status"]["phase"] = "Succeeded"
        setup.store.put("Pod", done)
        assert wait_for(caught_up(setup, reflector))
        assert [v.split("@")[0] for v in reflector.values()] == ["p0"]
    finally:
        reflector.stop()


def test_a_burst_while_disconnected_is_caught_up_from_the_last_version_without_a_list(
    setup: Setup,
) -> None:
    put_pods(setup.store, 3)
    reflector, _ = follow(setup)
    try:
        setup.disconnect()
        put_pods(setup.store, 20, prefix="burst")  # fewer changes than the history keeps
        setup.store.delete("Pod", "ns", "p1")
        setup.reconnect()
        assert wait_for(caught_up(setup, reflector))
        assert sorted(reflector.values()) == fresh(setup)
        assert reflector.counts.lists == 1, "resumed from its version, not listed again"
    finally:
        reflector.stop()


def test_a_version_older_than_the_history_makes_it_list_again(setup: Setup) -> None:
    put_pods(setup.store, 3)
    reflector, heard = follow(setup)
    try:
        setup.disconnect()
        put_pods(setup.store, 60, prefix="many")  # more than the 40 changes kept
        setup.store.delete("Pod", "ns", "p2")
        setup.reconnect()
        assert wait_for(caught_up(setup, reflector))
        assert sorted(reflector.values()) == fresh(setup)
        assert reflector.counts.gone >= 1
        assert reflector.counts.lists == 2
        assert ("ns/p2", True) in [(c.key, c.new is None) for c in heard]
    finally:
        reflector.stop()


def test_a_dropped_stream_is_resumed_from_its_version(setup: Setup) -> None:
    if setup.server is None:
        pytest.skip("dropping a connection is the HTTP server's")
    put_pods(setup.store, 2)
    reflector, _ = follow(setup)
    try:
        watches = reflector.counts.watches
        assert setup.server is not None
        setup.server.drop_connections()
        setup.store.put("Pod", pod_object("ns", "after", "n1", 1, phase="Running"))
        assert wait_for(lambda: reflector.counts.watches > watches)
        assert wait_for(caught_up(setup, reflector))
        assert sorted(reflector.values()) == fresh(setup)
        assert reflector.counts.lists == 1
    finally:
        reflector.stop()


@pytest.mark.parametrize("seed", range(4))
def test_after_any_interleaving_the_store_equals_a_fresh_read(setup: Setup, seed: int) -> None:
    """Writes of every kind (new pods, changes, deletions, pods finishing and coming back)
    interleaved with disconnections short and long (past the history)."""
    rng = random.Random(seed)
    put_pods(setup.store, 5)
    reflector, _ = follow(setup)
    try:
        for _ in range(6):
            for _ in range(rng.randrange(1, 30)):
                name = f"p{rng.randrange(12)}"
                step = rng.random()
                pods = {p["metadata"]["name"]: p for p in setup.store.list_pods(None)[0]}
                if name in pods and step < 0.25:
                    setup.store.delete("Pod", "ns", name)
                elif name in pods and step < 0.6:
                    pod = pods[name]
                    pod["status"]["phase"] = rng.choice(["Running", "Succeeded", "Pending"])
                    setup.store.put("Pod", pod)
                else:
                    setup.store.put("Pod", pod_object("ns", name, "n1", 1, phase="Running"))
                if rng.random() < 0.05:
                    setup.disconnect()
                if rng.random() < 0.1:
                    setup.reconnect()
            setup.reconnect()
            assert wait_for(caught_up(setup, reflector))
            assert sorted(reflector.values()) == fresh(setup)
    finally:
        reflector.stop()


def test_its_own_write_is_kept_until_a_newer_version_arrives(setup: Setup) -> None:
    put_pods(setup.store, 1)
    reflector, _ = follow(setup)
    try:
        written = setup.store.patch_pod_annotations("ns", "p0", {"k": "v"}, "")
        reflector.apply(written)
        assert reflector.get("ns/p0") == names(written)
        stale = {**written, "metadata": {**written["metadata"], "resourceVersion": "1"}}
        reflector.apply(stale)
        assert reflector.get("ns/p0") == names(written), "an older version never wins"
    finally:
        reflector.stop()


def test_waits_after_failures_grow_with_jitter_up_to_the_cap() -> None:
    backoff, rng = Backoff(), random.Random(7)
    waits = [backoff.delay(n, rng) for n in range(1, 10)]
    assert 0.4 <= waits[0] <= 0.8
    assert all(15.0 <= w <= 30.0 for w in waits[6:])
    assert len({round(backoff.delay(3, rng), 3) for _ in range(20)}) > 10, "jittered"
