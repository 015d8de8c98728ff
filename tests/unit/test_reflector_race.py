"""A write's answer never overrides a newer watch event: the object a create or update
returned can reach the reflector after the watch has delivered a later change of it (its
deletion by the kubelet's wipe, say). A deleted object must not come back into the cache;
the DRA driver's publisher, which trusts its cache, would then never create its slice
again."""

from __future__ import annotations

import threading

from chip_drivers.chips import Chip, NodeChips
from contract.dra import DEFAULT_DRIVER, SLICE_KIND, slice_name
from contract.objects import Obj
from dra_driver.publisher import SlicePublisher
from infra.kube.port import Selection
from infra.kube.reflector import TOMBSTONE_TTL, Backoff, Reflector
from simulation.cluster import wait_for
from simulation.dra_cluster import dra_node_object
from simulation.memory import MemoryCluster

NODE = "node-00"
CHIPS = NodeChips("Ascend910", "module910x8", tuple(Chip(i, i) for i in range(8)))
SLICES = Selection(SLICE_KIND)
BOOKMARKS = 0.05  # seconds: a stopped watch ends with the next bookmark


def a_slice(name: str) -> Obj:
    return {"metadata": {"name": name}, "spec": {"driver": DEFAULT_DRIVER, "nodeName": NODE}}


def version_of(obj: Obj | None) -> str | None:
    return None if obj is None else str(obj["metadata"]["resourceVersion"])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def slices(store: MemoryCluster, clock: Clock | None = None) -> Reflector[Obj]:
    return Reflector(
        store, SLICES, lambda obj: obj, backoff=Backoff(0.01, 0.05), clock=clock or Clock()
    )


def test_a_write_answered_before_a_deletion_the_watch_delivered_stays_deleted() -> None:
    store = MemoryCluster(bookmark_seconds=BOOKMARKS)
    reflector = slices(store)
    reflector.start()
    try:
        assert wait_for(lambda: reflector.synced)
        written = store.create_object(SLICE_KIND, a_slice("s"))
        store.delete_object(SLICE_KIND, "", "s")
        assert wait_for(lambda: reflector.counts.events == 2), "added, then deleted"
        reflector.apply(written)  # the create's answer, late
        assert reflector.get("s") is None
    finally:
        reflector.stop()


def test_an_update_the_watch_delivered_wins_over_an_older_write_answer() -> None:
    store = MemoryCluster(bookmark_seconds=BOOKMARKS)
    reflector = slices(store)
    reflector.start()
    try:
        written = store.create_object(SLICE_KIND, a_slice("s"))
        newer = store.replace_object(SLICE_KIND, {**written, "spec": {"driver": "other"}})
        assert wait_for(lambda: version_of(reflector.get("s")) == version_of(newer))
        reflector.apply(written)
        assert version_of(reflector.get("s")) == version_of(newer)
    finally:
        reflector.stop()


def test_a_deletion_a_list_found_is_remembered_too() -> None:
    store = MemoryCluster(bookmark_seconds=BOOKMARKS)
    reflector = slices(store)
    written = store.create_object(SLICE_KIND, a_slice("s"))
    reflector.relist()
    store.delete_object(SLICE_KIND, "", "s")
    reflector.relist()
    reflector.apply(written)
    assert reflector.get("s") is None


def test_an_object_made_again_after_its_deletion_is_kept() -> None:
    store = MemoryCluster(bookmark_seconds=BOOKMARKS)
    reflector = slices(store)
    store.create_object(SLICE_KIND, a_slice("s"))
    reflector.relist()
    store.delete_object(SLICE_KIND, "", "s")
    reflector.relist()
    again = store.create_object(SLICE_KIND, a_slice("s"))
    reflector.apply(again)
    assert version_of(reflector.get("s")) == version_of(again)
    assert reflector.tombstones == 0


def test_deletions_are_forgotten_after_the_ttl() -> None:
    store, clock = MemoryCluster(bookmark_seconds=BOOKMARKS), Clock()
    reflector = slices(store, clock)
    for name in ("a", "b"):
        store.create_object(SLICE_KIND, a_slice(name))
    reflector.relist()
    store.delete_object(SLICE_KIND, "", "a")
    reflector.relist()
    clock.now += TOMBSTONE_TTL / 2
    store.delete_object(SLICE_KIND, "", "b")
    reflector.relist()
    assert reflector.tombstones == 2
    clock.now += TOMBSTONE_TTL / 2
    assert reflector.tombstones == 1, "a's deletion is a TTL old"
    clock.now += TOMBSTONE_TTL / 2
    assert reflector.tombstones == 0


class SlowCreate(MemoryCluster):
    """An API server whose first create answers late: after the test has deleted the
    object and the watch has delivered the deletion."""

    def __init__(self) -> None:
        super().__init__(bookmark_seconds=BOOKMARKS)
        self.created = threading.Event()
        self.answer = threading.Event()

    def create_object(self, kind: str, body: Obj) -> Obj:
        stored = super().create_object(kind, body)
        if not self.created.is_set():
            self.created.set()
            self.answer.wait(timeout=10)
        return stored


def test_a_slice_the_kubelet_wiped_while_its_create_was_answered_is_created_again() -> None:
    store = SlowCreate()
    store.put("Node", dra_node_object(NODE, 0))
    publisher = SlicePublisher(store, DEFAULT_DRIVER, NODE, lambda: CHIPS, frozenset)
    name = slice_name(NODE, DEFAULT_DRIVER)
    publisher.start()
    try:
        assert store.created.wait(timeout=10)
        store.delete_object(SLICE_KIND, "", name)
        assert wait_for(lambda: publisher.slices.counts.events == 2), "added, then deleted"
        store.answer.set()
        assert wait_for(lambda: bool(store.list_page(SLICES, 0).items), timeout=5), (
            "the deleted slice is published again"
        )
        assert publisher.writes == 2
    finally:
        store.answer.set()
        publisher.stop()
