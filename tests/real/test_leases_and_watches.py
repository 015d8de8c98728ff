"""Leader election on real Leases and the reflector's watches against a real API server and etcd.

- Two scheduler-service replicas elect a leader on a ``coordination.k8s.io/v1`` Lease: both
  are ready, one leads (``/leader``) and answers the verbs; a leader killed (SIGKILL) or
  paused past its lease (SIGSTOP) is replaced, the Lease's holder moving from one identity to
  the other, the new holder acquiring no earlier than a whole lease after the last renewal it
  saw (client-go ``tools/leaderelection/leaderelection.go``, ``tryAcquireOrRenew``); a paused
  leader that wakes decides nothing more.
- ``infra.kube.reflector.Reflector`` follows ConfigMaps and pods of a namespace: both watch paths
  of the API server are met, because this module's API server runs with the watch cache off for
  ConfigMaps (``--watch-cache-sizes=configmaps#0``): a ConfigMap watch is served by etcd itself
  (``k8s.io/apiserver pkg/storage/etcd3``), a pod watch by the watch cache
  (``pkg/storage/cacher``). Through an API-server restart and past a compaction of etcd, its
  store ends equal to a fresh LIST.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from contract.objects import Obj
from infra.kube.client import KubernetesGateway, api_client
from infra.kube.port import KubeError, Selection, WatchEvent
from infra.kube.reflector import Backoff, Change, Reflector
from simulation.memory import pod_object
from simulation.processes import election_flags, free_port, service_command_with
from testbed.control_plane import ControlPlane, running, wait_until
from testbed.rest import RestError

# A scheduler replica's leader election, seconds: short, yet with room for a loaded 2-core
# machine to answer a renewal within the renew deadline.
LEASE, RENEW, RETRY = 5, 3, 1
# From a leader's end to another's Lease: a whole lease after the standby last saw a renewal
# (seen at most a retry period after it was written), and one more retry period to try.
TAKEOVER = LEASE + 2 * RETRY
SLACK = 30.0  # what a loaded machine may add to any bound here
STARTUP = 120.0  # a replica's first read of the cluster, Python's imports included
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    # ConfigMap watches served by etcd itself (the watch cache off for them), pod watches by
    # the API server's watch cache: both paths of k8s.io/apiserver pkg/storage.
    with running("lw", apiserver_flags=("--watch-cache-sizes=configmaps#0",)) as started:
        yield started


# ---- leader election ----------------------------------------------------------------------


class ServiceReplica:
    """``python -m scheduler_core serve`` with leader election, a process of its own."""

    def __init__(self, kubeconfig: Path, log: Path, lease: str) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        command = service_command_with(
            kubeconfig,
            port,
            *election_flags(LEASE, RENEW, RETRY),
            "--leader-elect-resource-name",
            lease,
            "--refresh-period",
            "0.5",
            "--log-format",
            "text",
        )
        with log.open("ab") as output:
            self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.process.poll() is None

    def leads(self) -> bool:
        return self.alive() and self._answers("leader")

    def serving(self) -> bool:
        return self._answers("healthz")

    def _answers(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/{path}", timeout=5) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def filter(self) -> int:
        """The status of a filter call (0: no answer)."""
        body = {"Pod": pod_object("ns", "probe", None, 1), "NodeNames": []}
        return post(self.url, "filter", body)[0]

    def said(self, text: str) -> bool:
        return text in self.log.read_text(errors="replace")

    def signal(self, number: signal.Signals) -> None:
        if self.alive():
            self.process.send_signal(number)

    def stop(self) -> None:
        self.signal(signal.SIGCONT)  # a paused process cannot end
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()


def post(url: str, verb: str, body: Obj) -> tuple[int, Any]:
    request = urllib.request.Request(f"{url}/{verb}", data=json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())
    except OSError:
        return 0, {}  # gone, or paused past the timeout


@contextmanager
def two_replicas(plane: ControlPlane, lease: str) -> Iterator[list[ServiceReplica]]:
    """Two replicas on the Lease ``kube-system/<lease>`` (one per test: no test inherits
    another's holder), as the admin."""
    started: list[ServiceReplica] = []
    try:
        for name in "ab":
            started.append(
                ServiceReplica(plane.admin, plane.workdir / f"{lease}-{name}.log", lease)
            )
        yield started
    finally:
        for replica in started:
            replica.stop()


def one_leader(plane: ControlPlane, replicas: list[ServiceReplica], lease: str) -> int:
    """Which replica leads, once both serve, exactly one leads, and the Lease names it (its
    log says that the Lease's holder is this replica's identity)."""

    def settled() -> bool:
        assert all(r.alive() for r in replicas), "a replica exited"
        if not all(r.serving() for r in replicas) or sum(r.leads() for r in replicas) != 1:
            return False
        leader = next(i for i, r in enumerate(replicas) if r.leads())
        return replicas[leader].said(f"{holder(plane, lease)} leads")

    wait_until(settled, STARTUP, "one leader, one standby")
    return next(i for i, r in enumerate(replicas) if r.leads())


def lease_spec(plane: ControlPlane, lease: str) -> Obj:
    spec: Obj = plane.rest().get(f"{LEASES}/{lease}")["spec"]
    return spec


def holder(plane: ControlPlane, lease: str) -> str:
    try:
        return str(lease_spec(plane, lease).get("holderIdentity") or "")
    except RestError as missing:
        if missing.status != 404:
            raise
        return ""


def moment(micro: str) -> datetime:
    return datetime.fromisoformat(micro)


def next_holder(plane: ControlPlane, lease: str, old: str) -> tuple[Obj, Obj, float]:
    """The Lease as ``old`` last renewed it and as the next holder first wrote it, once the
    holder changes; the seconds that took."""
    start = time.monotonic()
    seen = {"last": lease_spec(plane, lease)}

    def moved() -> bool:
        spec = lease_spec(plane, lease)
        if spec.get("holderIdentity") == old:
            seen["last"] = spec
            return False
        seen["next"] = spec
        return True

    wait_until(moved, TAKEOVER + SLACK, "another replica holds the Lease")
    return seen["last"], seen["next"], time.monotonic() - start


def check_takeover(last: Obj, new: Obj, old: str) -> None:
    """The new holder acquired the Lease a whole lease after the last renewal it could have
    seen, never over a live one (client-go ``tryAcquireOrRenew``: not before
    ``observedTime + leaseDuration``)."""
    assert last["holderIdentity"] == old
    assert new["holderIdentity"] not in ("", old), "no release: the old leader could not"
    assert new["leaseTransitions"] == last["leaseTransitions"] + 1, "counted as client-go does"
    waited = moment(new["acquireTime"]) - moment(last["renewTime"])
    assert waited.total_seconds() >= last["leaseDurationSeconds"] == LEASE


def test_one_replica_leads_and_a_killed_leader_is_replaced_within_the_lease(
    plane: ControlPlane,
) -> None:
    lease = "leases-kill"
    with two_replicas(plane, lease) as replicas:
        leader = one_leader(plane, replicas, lease)
        standby = replicas[1 - leader]
        status, answer = post(standby.url, "filter", {"Pod": {"metadata": {}}, "NodeNames": []})
        assert status == 503 and "does not lead" in answer["Error"]
        assert replicas[leader].filter() == 200
        old = holder(plane, lease)

        replicas[leader].signal(signal.SIGKILL)
        last, new, took = next_holder(plane, lease, old)
        check_takeover(last, new, old)
        assert took <= TAKEOVER + SLACK
        wait_until(standby.leads, SLACK, "the standby leads once it holds the Lease")
        assert standby.said(f"{new['holderIdentity']} leads")
        assert standby.filter() == 200
        assert holder(plane, lease) == new["holderIdentity"]


def test_a_leader_paused_past_its_lease_never_decides_beside_the_new_leader(
    plane: ControlPlane,
) -> None:
    lease = "leases-pause"
    with two_replicas(plane, lease) as replicas:
        leader = one_leader(plane, replicas, lease)
        paused, standby = replicas[leader], replicas[1 - leader]
        old = holder(plane, lease)
        assert paused.filter() == 200

        # Paused (as by a long GC, a frozen VM) until another holds the Lease, so for more than
        # a lease: it still believes it leads.
        paused.signal(signal.SIGSTOP)
        last, new, _ = next_holder(plane, lease, old)
        check_takeover(last, new, old)
        wait_until(lambda: standby.filter() == 200, SLACK, "the new leader decides")
        # It wakes, past its renew deadline on the monotonic clock: `may_decide` refuses at
        # once, before its election loop learns on its next try that the Lease moved on.
        paused.signal(signal.SIGCONT)
        answered: list[int] = []

        def lost() -> bool:
            answered.extend([paused.filter(), 200 if paused.leads() else 503])
            assert standby.filter() == 200, "the new leader keeps deciding"
            return paused.said(f"{old} lost the lease")

        wait_until(lost, RENEW + SLACK, "the woken leader learns it lost")
        following = time.monotonic() + 2 * LEASE  # and follows from then on, for two leases
        while time.monotonic() < following:
            answered.extend([paused.filter(), 200 if paused.leads() else 503])
            time.sleep(0.5)  # a sample each half second of a fixed window: not a wait
        assert answered and 200 not in answered, "the woken leader never decided"
        assert holder(plane, lease) == new["holderIdentity"]
        renewed = lease_spec(plane, lease)
        assert moment(renewed["renewTime"]) > moment(new["acquireTime"]), "it keeps renewing"


# ---- watches ------------------------------------------------------------------------------

LABEL = "suite=leases-and-watches"
FAST = Backoff(0.2, 1.0)  # back within a second of the API server's return after a restart


class Collection:
    """ConfigMaps or pods of one namespace, labelled for this suite, through the admin."""

    def __init__(self, plane: ControlPlane, kind: str, namespace: str) -> None:
        self.rest = plane.rest()
        self.kind = kind
        self.namespace = self.rest.ensure_namespace(namespace)
        plural = {"ConfigMap": "configmaps", "Pod": "pods"}[kind]
        self.path = f"/api/v1/namespaces/{namespace}/{plural}"
        self.what = Selection(kind, namespace, labels=LABEL)
        self.sentinels = 0

    def create(self, name: str) -> Obj:
        meta = {"name": name, "labels": dict([LABEL.split("=")])}
        if self.kind == "ConfigMap":
            return self.rest.create(self.path, {"metadata": meta, "data": {"v": "0"}})
        pod = {
            "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "ascend-npu-k8s:testbed"}]},
        }
        return self.rest.create(self.path, pod)

    def update(self, name: str, value: str) -> Obj:
        return self.rest.patch(f"{self.path}/{name}", {"metadata": {"annotations": {"v": value}}})

    def delete(self, name: str) -> None:
        self.rest.delete(f"{self.path}/{name}")  # unbound pods go at once, with no grace

    def fresh(self) -> list[str]:
        listed = self.rest.get(self.path, labelSelector=LABEL)["items"]
        return sorted(names(o) for o in listed)

    def key(self, name: str) -> str:
        return f"{self.namespace}/{name}"


def names(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['name']}@{meta['resourceVersion']}"


def follow(gateway: KubernetesGateway, what: Selection) -> tuple[Reflector[str], list[Change[str]]]:
    heard: list[Change[str]] = []
    reflector: Reflector[str] = Reflector(
        gateway, what, names, on_change=heard.extend, page_size=2, backoff=FAST
    )
    reflector.start()
    wait_until(lambda: reflector.synced, SLACK, "the first list")
    return reflector, heard


def caught_up(reflector: Reflector[str], collection: Collection) -> list[str]:
    """Once the reflector holds a new object written last (events come in order, and a list
    holds all before it), its store, which then must equal a fresh LIST."""
    collection.sentinels += 1
    name = f"sentinel-{collection.sentinels}"
    collection.create(name)
    wait_until(lambda: reflector.get(collection.key(name)) is not None, SLACK, f"{name} seen")
    return sorted(reflector.values())


def changes(heard: list[Change[str]]) -> dict[str, list[str]]:
    """What was heard of each object, by name, in order."""
    kinds: dict[str, list[str]] = {}
    for c in heard:
        kind = "added" if c.old is None else "deleted" if c.new is None else "updated"
        kinds.setdefault(c.key.split("/")[1], []).append(kind)
    return kinds


def deleted(heard: list[Change[str]], key: str) -> bool:
    return any(c.key == key and c.new is None for c in heard)


@pytest.mark.parametrize("kind", ["ConfigMap", "Pod"])
def test_the_reflector_sees_creates_updates_and_deletes(plane: ControlPlane, kind: str) -> None:
    collection = Collection(plane, kind, f"watch-{kind.lower()}")
    for i in range(5):  # more than a page of 2
        collection.create(f"o{i}")
    reflector, heard = follow(KubernetesGateway.from_environment(plane.admin), collection.what)
    try:
        assert sorted(reflector.values()) == collection.fresh()
        collection.update("o1", "1")
        collection.delete("o2")
        collection.create("o5")
        assert caught_up(reflector, collection) == collection.fresh()
        # A pod is deleted as pods are, gracefully (its grace 0 when unbound): its deletion is
        # written first, then it goes (``pkg/registry/generic/registry/store.go``, ``Delete``
        # → ``updateForGracefulDeletionAndFinalizers``): an update, then the delete.
        assert changes(heard[5:]) == {
            "o1": ["updated"],
            "o2": ["updated", "deleted"] if kind == "Pod" else ["deleted"],
            "o5": ["added"],
            "sentinel-1": ["added"],
        }
        assert (reflector.counts.lists, reflector.counts.gone) == (1, 0)
    finally:
        reflector.stop()


@pytest.mark.parametrize("kind", ["ConfigMap", "Pod"])
def test_after_an_api_server_restart_the_store_equals_a_fresh_list(
    plane: ControlPlane, kind: str
) -> None:
    collection = Collection(plane, kind, f"restart-{kind.lower()}")
    for i in range(4):
        collection.create(f"o{i}")
    reflector, heard = follow(KubernetesGateway.from_environment(plane.admin), collection.what)
    try:
        collection.delete("o3")  # just before: the old stream may or may not carry it
        plane.restart_apiserver()
        collection.update("o1", "1")  # right after: the new stream must
        collection.delete("o2")
        collection.create("o4")
        assert caught_up(reflector, collection) == collection.fresh()
        assert reflector.get(collection.key("o2")) is None
        assert reflector.get(collection.key("o3")) is None, "nothing deleted comes back"
        assert deleted(heard, collection.key("o2")) and deleted(heard, collection.key("o3"))
        if kind == "ConfigMap":
            # Served by etcd, which keeps every revision until compacted: the watch resumes
            # from the reflector's version, with no new list.
            assert (reflector.counts.lists, reflector.counts.gone) == (1, 0)
    finally:
        reflector.stop()


class Gated(KubernetesGateway):
    """The admin's gateway, whose watches the test can hold: while the gate is shut, a stream
    ends at its next event (the event unseen, as if the connection dropped) and a new watch
    waits at the gate, keeping the version it resumes from (``asked``)."""

    def __init__(self, kubeconfig: Path) -> None:
        super().__init__(api_client(kubeconfig))
        self.open = threading.Event()
        self.open.set()
        self.waiting = threading.Event()
        self.asked: list[str] = []

    def shut(self) -> None:
        self.waiting.clear()
        self.open.clear()

    def watch(self, what: Selection, resource_version: str, timeout: float) -> Iterator[WatchEvent]:
        if not self.open.is_set():
            self.waiting.set()
            self.open.wait()
        self.asked.append(resource_version)
        for event in super().watch(what, resource_version, timeout):
            if not self.open.is_set():
                raise KubeError("held by the test")
            yield event


def test_a_resume_point_compacted_away_in_etcd_makes_it_list_again(plane: ControlPlane) -> None:
    """A ConfigMap watch is etcd's: resumed from a revision etcd compacted away, the API server
    ends it with 410 Gone (``pkg/storage/etcd3/errors.go``: ``ErrCompacted`` → "The
    resourceVersion for the provided watch is too old."), and the reflector lists again."""
    collection = Collection(plane, "ConfigMap", "compact-configmap")
    for i in range(4):
        collection.create(f"o{i}")
    gateway = Gated(plane.admin)
    reflector, heard = follow(gateway, collection.what)
    try:
        before = len(gateway.asked)
        gateway.shut()
        collection.update("o1", "1")  # ends the open stream, unseen
        collection.delete("o2")
        collection.create("o4")
        wait_until(gateway.waiting.is_set, SLACK, "the reflector waits at the gate")
        resume = reflector.version
        compacted = plane.compact()
        assert int(resume) + 1 < compacted, "its next event is compacted away"
        gateway.open.set()
        assert caught_up(reflector, collection) == collection.fresh()
        assert gateway.asked[before] == resume, "it tried to resume first"
        assert (reflector.counts.gone, reflector.counts.lists) == (1, 2)
        assert reflector.get(collection.key("o2")) is None
        assert deleted(heard, collection.key("o2")), "the new list reports the deletion"
    finally:
        gateway.open.set()
        reflector.stop()


def test_the_watch_cache_outlives_a_compaction_but_not_a_restart(plane: ControlPlane) -> None:
    """A pod watch is the watch cache's, which keeps its own window of events: a compaction of
    etcd does not shorten it (``Compact`` in ``pkg/storage/cacher/watch_cache.go`` drops only
    list snapshots), so the reflector resumes without a list. A restarted API server's cache
    starts at the revision of its first list: a version before it is "too old resource
    version" (``getAllEventsSinceLocked``), 410 Gone, and the reflector lists again."""
    collection = Collection(plane, "Pod", "compact-pod")
    for i in range(4):
        collection.create(f"o{i}")
    gateway = Gated(plane.admin)
    reflector, heard = follow(gateway, collection.what)
    try:
        before = len(gateway.asked)
        gateway.shut()
        collection.update("o1", "1")
        collection.delete("o0")
        wait_until(gateway.waiting.is_set, SLACK, "the reflector waits at the gate")
        resume = reflector.version
        assert int(resume) + 1 < plane.compact()
        gateway.open.set()
        assert caught_up(reflector, collection) == collection.fresh()
        assert gateway.asked[before] == resume
        assert (reflector.counts.gone, reflector.counts.lists) == (0, 1), "no new list"

        before = len(gateway.asked)
        gateway.shut()
        collection.update("o1", "2")
        collection.delete("o2")
        collection.create("o4")
        wait_until(gateway.waiting.is_set, SLACK, "the reflector waits at the gate")
        resume = reflector.version
        assert int(resume) + 1 < plane.compact()
        plane.restart_apiserver()
        gateway.open.set()
        assert caught_up(reflector, collection) == collection.fresh()
        assert gateway.asked[before] == resume, "it tried to resume first"
        assert (reflector.counts.gone, reflector.counts.lists) == (1, 2)
        assert reflector.get(collection.key("o2")) is None
        assert deleted(heard, collection.key("o2")), "the new list reports the deletion"
    finally:
        gateway.open.set()
        reflector.stop()


@pytest.mark.parametrize("kind", ["ConfigMap", "Pod"])
def test_a_write_answered_before_its_deletion_was_watched_stays_deleted(
    plane: ControlPlane, kind: str
) -> None:
    """A write's answer applied after the watch delivered the object's deletion (the race a
    slow writer meets) never brings it back: deletions carry their resourceVersion on the real
    API server, from etcd (ConfigMaps) and from the watch cache (Pods) alike."""
    collection = Collection(plane, kind, f"late-{kind.lower()}")
    reflector, heard = follow(KubernetesGateway.from_environment(plane.admin), collection.what)
    try:
        written = collection.create("late")
        collection.delete("late")
        wait_until(lambda: deleted(heard, collection.key("late")), SLACK, "the deletion seen")
        reflector.apply(written)
        assert reflector.get(collection.key("late")) is None
    finally:
        reflector.stop()
