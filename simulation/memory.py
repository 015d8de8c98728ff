"""An in-memory Kubernetes store for the demo and fast tests (like client-go's fake clientset).

It keeps the API server's rules the agent and the scheduler depend on: every write bumps a
cluster-wide resourceVersion; a precondition on a stale resourceVersion is a Conflict; lists
are paginated, every page read at the version of the first; watches deliver every change
after the version they start from (an object leaving the selectors as DELETED, one entering
them as ADDED) with bookmarks; the history is bounded, so a version older than it, or a
continue token of a list that old, is Gone (410); and the server can be made unreachable.
"""

from __future__ import annotations

import copy
import itertools
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.deviceinfo_publisher import configmap
from contract.chip_names import RESOURCE_NAME
from contract.deviceinfo import DeviceInfo
from contract.objects import Obj
from infra.kube.port import Conflict, Gone, KubeError, NotFound, Page, Selection, WatchEvent
from simulation.selectors import Selector

Key = tuple[str, str, str]  # kind, namespace, name
DRA_API = ("resource.k8s.io", "v1")
HISTORY = 10_000  # changes kept for watches to resume from
SNAPSHOTS = 32  # paginated lists whose continue tokens stay valid


class Wake:
    """Put in a watch's feed to make it look at its ``until`` event."""


@dataclass(frozen=True, slots=True)
class Change:
    version: int
    kind: str
    type: str  # ADDED, MODIFIED, DELETED
    old: Obj | None
    new: Obj  # for DELETED, the object as it was (with the deletion's resourceVersion)


def _event(change: Change, namespace: str, selector: Selector) -> WatchEvent | None:
    """The change as a watch with these selectors sees it (None: not at all)."""

    def inside(obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        return namespace in ("", meta.get("namespace", "")) and selector.matches(obj)

    now, before = inside(change.new), inside(change.old)
    if change.type == "DELETED":
        return WatchEvent("DELETED", change.new) if now else None
    if now and before:
        return WatchEvent("MODIFIED", change.new)
    if now:
        return WatchEvent("ADDED", change.new)
    if before:
        left = copy.deepcopy(change.old) or {}
        left.setdefault("metadata", {})["resourceVersion"] = str(change.version)
        return WatchEvent("DELETED", left)
    return None


Feed = queue.Queue[WatchEvent | Wake | None]


@dataclass(eq=False)
class Watcher:
    """One open watch: what it selects, and the feed its events are put in."""

    what: Selection
    selector: Selector
    feed: Feed = field(default_factory=queue.Queue)

    @property
    def kind(self) -> str:
        return self.what.kind

    def sees(self, change: Change) -> WatchEvent | None:
        return _event(change, self.what.namespace, self.selector)


class MemoryCluster:
    def __init__(
        self, history: int = HISTORY, bookmark_seconds: float = 1.0, graceful: bool = False
    ) -> None:
        # graceful: a bound pod deleted with a grace period stays, terminating, until its
        # kubelet is done (``finish_terminating``) or a deletion with grace 0 forces it out.
        self._graceful = graceful
        self._objects: dict[Key, Obj] = {}
        self._history: deque[Change] = deque(maxlen=history)
        self._version = 0
        self._lock = threading.Lock()
        # Each watch's feed gets the events its selectors see, filtered as they are written
        # (a real API server's watch cache filters before it sends): a pod write wakes only
        # the watches that see it, not every node's. None in a feed: the stream is cut;
        # Wake: its ``until`` may be set.
        self._watchers: list[Watcher] = []
        self._until: list[tuple[threading.Event, Feed]] = []
        self._snapshots: OrderedDict[int, tuple[int, list[Obj]]] = OrderedDict()
        self._snapshot_ids = itertools.count(1)
        self.bookmark_seconds = bookmark_seconds
        self._reachable = True
        self.events: list[Obj] = []
        # The API groups served beyond core and coordination: DRA's (built in since 1.34),
        # and custom resources whose CRDs are installed: (group, version).
        self.apis: set[tuple[str, str]] = {DRA_API}
        self._compacted_to = 0
        # Bindings that are stored but answered with an error (a lost answer), still to come.
        self.lost_bind_answers = 0

    @property
    def reachable(self) -> bool:
        return self._reachable

    @reachable.setter
    def reachable(self, value: bool) -> None:
        """An unreachable server fails every call and cuts every open watch at once."""
        with self._lock:
            self._reachable = value
            if not value:
                for watcher in self._watchers:
                    watcher.feed.put(None)

    # ---- store -----------------------------------------------------------------------

    def _check(self, call: str) -> None:
        if not self._reachable:
            raise KubeError(f"{call}: the API server is unreachable")

    @property
    def compacted(self) -> int:
        """The newest version a watch can no longer start from."""
        if len(self._history) < (self._history.maxlen or 0):
            return self._compacted_to
        return max(self._history[0].version - 1, self._compacted_to)

    def compact(self) -> None:
        """Etcd compacts its history: a watch or a continued list from any version before
        now is answered 410 Gone (open watches go on)."""
        with self._lock:
            self._history.clear()
            self._snapshots.clear()
            self._compacted_to = self._version

    def _write(self, kind: str, obj: Obj, event: str) -> Obj:
        meta = obj.setdefault("metadata", {})
        key = (kind, meta.get("namespace", ""), meta["name"])
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        old = self._objects.get(key)
        if event == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj
        change = Change(self._version, kind, event, old, copy.deepcopy(obj))
        self._history.append(change)
        for watcher in self._watchers:
            if watcher.kind == kind and (seen := watcher.sees(change)) is not None:
                watcher.feed.put(seen)
        return copy.deepcopy(obj)

    def put(self, kind: str, obj: Obj) -> Obj:
        """Create or replace an object (test and demo setup, no precondition)."""
        with self._lock:
            meta = obj.setdefault("metadata", {})
            exists = (kind, meta.get("namespace", ""), meta["name"]) in self._objects
            return self._write(kind, copy.deepcopy(obj), "MODIFIED" if exists else "ADDED")

    def delete(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            obj = self._objects.get((kind, namespace, name))
            if obj is None:
                raise NotFound(f"{kind} {namespace}/{name} not found")
            self._write(kind, copy.deepcopy(obj), "DELETED")

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        with self._lock:
            self._check(f"get {kind}")
            obj = self._objects.get((kind, namespace, name))
            if obj is None:
                raise NotFound(f"{kind} {namespace}/{name} not found")
            return copy.deepcopy(obj)

    # ---- the gateway: lists and watches ------------------------------------------------

    def list_page(self, what: Selection, limit: int, token: str = "") -> Page:
        with self._lock:
            self._check(f"list {what}")
        return self._list_page(what, limit, token)

    def _list_page(self, what: Selection, limit: int, token: str) -> Page:
        selector = Selector.parse(what.labels, what.fields)
        with self._lock:
            if token:
                version, items, offset = self._continued(token)
            else:
                version, offset = self._version, 0
                items = [
                    o
                    for (kind, namespace, _), o in sorted(self._objects.items())
                    if kind == what.kind
                    and what.namespace in ("", namespace)
                    and selector.matches(o)
                ]
            end = len(items) if limit <= 0 else offset + limit
            following = ""
            if end < len(items):
                snapshot = next(self._snapshot_ids)
                self._snapshots[snapshot] = (version, items)
                while len(self._snapshots) > SNAPSHOTS:
                    self._snapshots.popitem(last=False)
                following = f"{snapshot}:{end}"
            # Stored objects are replaced on write, never changed in place: a page of
            # references stays the list's version until it is copied out.
            return Page([copy.deepcopy(o) for o in items[offset:end]], str(version), following)

    def _continued(self, token: str) -> tuple[int, list[Obj], int]:
        snapshot, _, offset = token.partition(":")
        found = self._snapshots.get(int(snapshot)) if snapshot.isdigit() else None
        if found is None or not offset.isdigit():
            raise Gone(f"continue token {token!r} has expired: list again")
        version, items = found
        if version <= self.compacted:
            raise Gone(f"continue token {token!r} is older than the history: list again")
        return version, items, int(offset)

    def watch(
        self,
        what: Selection,
        resource_version: str,
        timeout: float,
        until: threading.Event | None = None,
    ) -> Iterator[WatchEvent]:
        """``until``: the harness server ends the stream when it stops."""
        watcher = Watcher(what, Selector.parse(what.labels, what.fields))
        feed = watcher.feed
        with self._lock:
            self._check(f"watch {what}")
            since = int(resource_version) if resource_version.isdigit() else 0
            if since < self.compacted:
                raise Gone(f"watch {what}: resourceVersion {since} is too old")
            for change in self._history:
                fresh = change.version > since and change.kind == what.kind
                if fresh and (seen := watcher.sees(change)) is not None:
                    feed.put(seen)
            self._watchers.append(watcher)
            if until is not None:
                self._until.append((until, feed))
        deadline = time.monotonic() + timeout
        quiet_since = time.monotonic()
        try:
            while (left := deadline - time.monotonic()) > 0 and not (until and until.is_set()):
                # Changes are pushed into the feed as they are written: the stream waits for
                # the next one, or until a bookmark is due.
                bookmark_in = quiet_since + self.bookmark_seconds - time.monotonic()
                try:
                    got = feed.get(timeout=max(min(left, bookmark_in), 0.0))
                except queue.Empty:
                    if time.monotonic() - quiet_since >= self.bookmark_seconds:
                        quiet_since = time.monotonic()
                        if (bookmark := self._bookmark(feed)) is not None:
                            yield bookmark
                    continue
                if isinstance(got, Wake):
                    continue
                if got is None:
                    raise KubeError(f"watch {what}: the API server is unreachable")
                quiet_since = time.monotonic()
                yield got
        finally:
            with self._lock:
                self._watchers.remove(watcher)
                if until is not None:
                    self._until.remove((until, feed))

    def wake(self, until: threading.Event) -> None:
        """The streams watching ``until`` look at it now (their server stops)."""
        with self._lock:
            for event, feed in self._until:
                if event is until:
                    feed.put(Wake())

    def _bookmark(self, feed: Feed) -> WatchEvent | None:
        """Every change up to the current version has been sent: say so (changes are fed
        under the lock, so an empty feed here means none is on its way)."""
        with self._lock:
            if not feed.empty():
                return None
            return WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": str(self._version)}})

    # ---- harness conveniences (not the gateway): whole lists for test assertions --------

    def list_pods(self, node: str | None) -> tuple[list[Obj], str]:
        """Pods bound to ``node`` (every pod when None) and the store's resourceVersion,
        even while the server is made unreachable."""
        fields = f"spec.nodeName={node}" if node else ""
        page = self._list_page(Selection("Pod", fields=fields), 0, "")
        return page.items, page.resource_version

    def list_configmaps(self, namespace: str) -> list[Obj]:
        return self._list_page(Selection("ConfigMap", namespace), 0, "").items

    def list_nodes(self) -> list[Obj]:
        return self._list_page(Selection("Node"), 0, "").items

    # ---- the gateway: writes and reads of one object ----------------------------------

    def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        with self._lock:
            pod = self._pod_with_uid("bind pod", namespace, name, uid)
            if pod.get("spec", {}).get("nodeName"):
                raise Conflict(
                    f"pod {namespace}/{name} is already bound to {pod['spec']['nodeName']}"
                )
            bound = copy.deepcopy(pod)
            bound["spec"]["nodeName"] = node
            bound["metadata"].setdefault("annotations", {}).update(annotations)
            self._write("Pod", bound, "MODIFIED")
            if self.lost_bind_answers > 0:
                self.lost_bind_answers -= 1
                raise KubeError(f"bind pod {namespace}/{name}: the answer was lost (stored)")

    def get_pod(self, namespace: str, name: str) -> Obj:
        return self.get("Pod", namespace, name)

    def delete_pod(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> None:
        with self._lock:
            pod = self._pod_with_uid("delete pod", namespace, name, uid)
            bound = bool((pod.get("spec") or {}).get("nodeName"))
            if self._graceful and bound and grace_seconds != 0:
                if pod["metadata"].get("deletionTimestamp"):
                    return  # terminating already: a second polite deletion changes nothing
                terminating = copy.deepcopy(pod)
                grace = grace_seconds
                if grace is None:
                    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                terminating["metadata"]["deletionTimestamp"] = "1970-01-01T00:00:00Z"
                terminating["metadata"]["deletionGracePeriodSeconds"] = grace
                self._write("Pod", terminating, "MODIFIED")
                return
            self._write("Pod", copy.deepcopy(pod), "DELETED")

    def terminating(self) -> list[tuple[str, int]]:
        """The pods being deleted gracefully: (namespace/name, grace seconds)."""
        with self._lock:
            return sorted(
                (f"{ns}/{name}", int(obj["metadata"].get("deletionGracePeriodSeconds", 0)))
                for (kind, ns, name), obj in self._objects.items()
                if kind == "Pod" and obj["metadata"].get("deletionTimestamp")
            )

    def _pod_with_uid(self, call: str, namespace: str, name: str, uid: str) -> Obj:
        """The stored pod, if it still has ``uid`` (any when empty); the lock is held."""
        self._check(call)
        pod = self._objects.get(("Pod", namespace, name))
        if pod is None:
            raise NotFound(f"pod {namespace}/{name} not found")
        if uid and pod["metadata"].get("uid") != uid:
            raise Conflict(f"pod {namespace}/{name}: UID {uid} does not match")
        return pod

    def patch_metadata(
        self,
        kind: str,
        namespace: str,
        name: str,
        changes: Mapping[str, Mapping[str, str | None]],
        resource_version: str = "",
    ) -> Obj:
        """A merge patch of ``metadata.annotations`` / ``metadata.labels`` (None removes a
        key), only if the object still has ``resource_version`` when one is given."""
        with self._lock:
            self._check(f"patch {kind}")
            obj = self._objects.get((kind, namespace, name))
            if obj is None:
                raise NotFound(f"{kind} {namespace}/{name} not found")
            current = obj["metadata"]["resourceVersion"]
            if resource_version and resource_version != current:
                raise Conflict(
                    f"{kind} {namespace}/{name}: resourceVersion {resource_version} is stale "
                    f"(now {current})"
                )
            updated = copy.deepcopy(obj)
            for field_name, values in changes.items():
                target = updated["metadata"].setdefault(field_name, {})
                for key, value in values.items():
                    if value is None:
                        target.pop(key, None)
                    else:
                        target[key] = value
            return self._write(kind, updated, "MODIFIED")

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str,
        *,
        uid: str = "",
    ) -> Obj:
        if uid:
            with self._lock:  # another pod of that name: Conflict, as delete_pod answers
                self._pod_with_uid("patch pod", namespace, name, uid)
        return self.patch_metadata(
            "Pod", namespace, name, {"annotations": annotations}, resource_version
        )

    def patch_pod_labels(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> Obj:
        return self.patch_metadata("Pod", namespace, name, {"labels": labels})

    def get_configmap(self, namespace: str, name: str) -> Obj:
        return self.get("ConfigMap", namespace, name)

    def create_configmap(self, body: Obj) -> Obj:
        return self._create("ConfigMap", body)

    def update_configmap(self, body: Obj) -> Obj:
        return self._update("ConfigMap", body)

    def read_configmap_by_patch(self, namespace: str, name: str) -> Obj:
        return self.get("ConfigMap", namespace, name)  # a patch of nothing changes nothing

    def get_lease(self, namespace: str, name: str) -> Obj:
        return self.get("Lease", namespace, name)

    def create_lease(self, body: Obj) -> Obj:
        return self._create("Lease", body)

    def update_lease(self, body: Obj) -> Obj:
        return self._update("Lease", body)

    def _create(self, kind: str, body: Obj) -> Obj:
        with self._lock:
            self._check(f"create {kind.lower()}")
            meta = body["metadata"]
            if (kind, meta.get("namespace", ""), meta["name"]) in self._objects:
                raise Conflict(f"{kind.lower()} {_where(meta)} already exists")
            return self._write(kind, copy.deepcopy(body), "ADDED")

    def _update(self, kind: str, body: Obj) -> Obj:
        """Replace an object; a resourceVersion in the body is a precondition."""
        with self._lock:
            self._check(f"update {kind.lower()}")
            meta = body["metadata"]
            current = self._objects.get((kind, meta.get("namespace", ""), meta["name"]))
            if current is None:
                raise NotFound(f"{kind.lower()} {_where(meta)} not found")
            wanted = meta.get("resourceVersion", "")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise Conflict(f"{kind.lower()} {_where(meta)}: stale resourceVersion")
            return self._write(kind, copy.deepcopy(body), "MODIFIED")

    def served(self, group: str, version: str) -> bool:
        with self._lock:
            self._check(f"discover {group}/{version}")
            return (group, version) in self.apis

    def get_object(self, kind: str, namespace: str, name: str) -> Obj:
        return self.get(kind, namespace, name)

    def create_object(self, kind: str, body: Obj) -> Obj:
        """An object of another API group created (``kind``: ``plural.group/version``)."""
        return self._create(kind, body)

    def replace_object(self, kind: str, body: Obj) -> Obj:
        return self._update(kind, body)

    def delete_object(self, kind: str, namespace: str, name: str) -> None:
        with self._lock:
            self._check(f"delete {kind}")
        self.delete(kind, namespace, name)

    def delete_collection(self, what: Selection) -> int:
        """Every object of a collection its selectors match deleted (the kubelet wipes a
        node's ResourceSlices so); how many."""
        with self._lock:
            self._check(f"delete {what}")
            selector = Selector.parse(what.labels, what.fields)
            doomed = [
                o
                for (kind, namespace, _), o in self._objects.items()
                if kind == what.kind and what.namespace in ("", namespace) and selector.matches(o)
            ]
            for obj in doomed:
                self._write(what.kind, copy.deepcopy(obj), "DELETED")
            return len(doomed)

    def create_pod(self, body: Obj) -> Obj:
        """A pod as a controller or a user creates it: a UID given when it has none, Pending."""
        pod = copy.deepcopy(body)
        meta = pod.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{meta.get('namespace', '')}-{meta.get('name', '')}")
        pod.setdefault("status", {}).setdefault("phase", "Pending")
        return self._create("Pod", pod)

    def patch_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> Obj:
        """The kubelet's status update (merged into ``status``)."""
        with self._lock:
            self._check("patch pod status")
            pod = self._objects.get(("Pod", namespace, name))
            if pod is None:
                raise NotFound(f"pod {namespace}/{name} not found")
            patched = copy.deepcopy(pod)
            patched.setdefault("status", {}).update(status)
            return self._write("Pod", patched, "MODIFIED")

    def get_node(self, name: str) -> Obj:
        return self.get("Node", "", name)

    def patch_node_labels(self, name: str, labels: Mapping[str, str]) -> Obj:
        return self.patch_metadata("Node", "", name, {"labels": labels})

    def patch_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> Obj:
        return self.patch_metadata("Node", "", name, {"annotations": annotations})

    def create_event(self, namespace: str, body: Obj) -> Obj:
        with self._lock:
            self._check("create event")
            self.events.append(copy.deepcopy(body))
            return copy.deepcopy(body)


def _where(meta: Mapping[str, Any]) -> str:
    namespace = meta.get("namespace", "")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


def pod_object(
    namespace: str,
    name: str,
    node: str | None,
    npu: int,
    *,
    annotations: Mapping[str, str] | None = None,
    phase: str = "Pending",
    resource: str = RESOURCE_NAME,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A minimal pod as the API server returns it (for tests and the demo), asking for
    ``npu`` of ``resource``, of the kube-scheduler profile NPU pods choose (the overlay's)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{namespace}-{name}",
            "annotations": dict(annotations or {}),
            "labels": dict(labels or {}),
        },
        "spec": {
            **({"nodeName": node} if node else {}),
            "schedulerName": "ascend-npu-scheduler",
            "containers": [{"name": "main", "resources": {"limits": {resource: str(npu)}}}],
        },
        "status": {"phase": phase},
    }


def put_npu_node(
    store: MemoryCluster,
    name: str,
    info: DeviceInfo,
    *,
    allocatable: int = 8,
    resource: str = RESOURCE_NAME,
    chips: int = 8,
    labels: Mapping[str, str] | None = None,
) -> None:
    """A node of ``chips`` chips (``allocatable`` of them at the kubelet) labelled ``labels``,
    and the DeviceInfo its agent would publish, as the scheduler reads them."""
    status = {"capacity": {resource: str(chips)}, "allocatable": {resource: str(allocatable)}}
    meta = {"name": name, "labels": dict(labels or {})}
    store.put("Node", {"metadata": meta, "status": status})
    store.put("ConfigMap", configmap(name, info))
