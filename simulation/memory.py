"""An in-memory Kubernetes store for the demo and fast tests (like client-go's fake clientset).

It keeps the API server's rules the agent depends on: every write bumps a cluster-wide
resourceVersion, a precondition on a stale resourceVersion is a Conflict, watches deliver
every change after the version they start from, and the server can be made unreachable.
"""

from __future__ import annotations

import copy
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from contract.objects import Obj
from infra.kube.port import Conflict, KubeError, NotFound, WatchEvent

Key = tuple[str, str, str]  # kind, namespace, name


class MemoryCluster:
    def __init__(self) -> None:
        self._objects: dict[Key, Obj] = {}
        self._history: list[tuple[int, str, WatchEvent]] = []
        self._version = 0
        self._lock = threading.Lock()
        self._watchers: list[queue.Queue[WatchEvent]] = []
        self.reachable = True
        self.events: list[Obj] = []

    # ---- store -----------------------------------------------------------------------

    def _check(self, call: str) -> None:
        if not self.reachable:
            raise KubeError(f"{call}: the API server is unreachable")

    def _write(self, kind: str, obj: Obj, event: str) -> Obj:
        meta = obj.setdefault("metadata", {})
        key = (kind, meta.get("namespace", ""), meta["name"])
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        if event == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj
        change = WatchEvent(event, copy.deepcopy(obj))
        self._history.append((self._version, kind, change))
        if kind == "Pod":
            for watcher in self._watchers:
                watcher.put(change)
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
            self._write(kind, obj, "DELETED")

    def get(self, kind: str, namespace: str, name: str) -> Obj:
        with self._lock:
            self._check(f"get {kind}")
            obj = self._objects.get((kind, namespace, name))
            if obj is None:
                raise NotFound(f"{kind} {namespace}/{name} not found")
            return copy.deepcopy(obj)

    # ---- the gateway -----------------------------------------------------------------

    def list_pods(self, node: str | None) -> tuple[list[Obj], str]:
        """Pods bound to ``node`` (every pod when None) and the list's resourceVersion."""
        with self._lock:
            self._check("list pods")
            pods = [
                copy.deepcopy(o)
                for (kind, _, _), o in sorted(self._objects.items())
                if kind == "Pod" and node in (None, o.get("spec", {}).get("nodeName"))
            ]
            return pods, str(self._version)

    def watch_pods(
        self, node: str | None, resource_version: str, timeout: float
    ) -> Iterator[WatchEvent]:
        feed: queue.Queue[WatchEvent] = queue.Queue()
        with self._lock:
            self._check("watch pods")
            since = int(resource_version or 0)
            for version, kind, change in self._history:
                if version > since and kind == "Pod":
                    feed.put(change)
            self._watchers.append(feed)
        deadline = time.monotonic() + timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                if not self.reachable:
                    raise KubeError("watch pods: the API server is unreachable")
                try:
                    change = feed.get(timeout=min(left, 0.1))
                except queue.Empty:
                    continue
                if node in (None, change.object.get("spec", {}).get("nodeName")):
                    yield change
        finally:
            with self._lock:
                self._watchers.remove(feed)

    def list_configmaps(self, namespace: str) -> list[Obj]:
        return self._list("ConfigMap", namespace)

    def list_nodes(self) -> list[Obj]:
        return self._list("Node", "")

    def _list(self, kind: str, namespace: str) -> list[Obj]:
        with self._lock:
            self._check(f"list {kind}")
            return [
                copy.deepcopy(o)
                for (k, ns, _), o in sorted(self._objects.items())
                if k == kind and ns == namespace
            ]

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

    def get_pod(self, namespace: str, name: str) -> Obj:
        return self.get("Pod", namespace, name)

    def delete_pod(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> None:
        # No kubelet here to run a grace period: every deletion is immediate.
        with self._lock:
            self._write("Pod", self._pod_with_uid("delete pod", namespace, name, uid), "DELETED")

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
        self, namespace: str, name: str, annotations: Mapping[str, str], resource_version: str
    ) -> Obj:
        return self.patch_metadata(
            "Pod", namespace, name, {"annotations": annotations}, resource_version
        )

    def get_configmap(self, namespace: str, name: str) -> Obj:
        return self.get("ConfigMap", namespace, name)

    def create_configmap(self, body: Obj) -> Obj:
        return self._create("ConfigMap", body)

    def update_configmap(self, body: Obj) -> Obj:
        return self._update("ConfigMap", body)

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
            if (kind, meta["namespace"], meta["name"]) in self._objects:
                raise Conflict(f"{kind.lower()} {meta['namespace']}/{meta['name']} already exists")
            return self._write(kind, copy.deepcopy(body), "ADDED")

    def _update(self, kind: str, body: Obj) -> Obj:
        """Replace an object; a resourceVersion in the body is a precondition."""
        with self._lock:
            self._check(f"update {kind.lower()}")
            meta = body["metadata"]
            current = self._objects.get((kind, meta["namespace"], meta["name"]))
            if current is None:
                raise NotFound(f"{kind.lower()} {meta['namespace']}/{meta['name']} not found")
            wanted = meta.get("resourceVersion", "")
            if wanted and wanted != current["metadata"]["resourceVersion"]:
                raise Conflict(
                    f"{kind.lower()} {meta['namespace']}/{meta['name']}: stale resourceVersion"
                )
            return self._write(kind, copy.deepcopy(body), "MODIFIED")

    def get_node(self, name: str) -> Obj:
        return self.get("Node", "", name)

    def patch_node_labels(self, name: str, labels: Mapping[str, str]) -> Obj:
        return self.patch_metadata("Node", "", name, {"labels": labels})

    def create_event(self, namespace: str, body: Obj) -> Obj:
        with self._lock:
            self._check("create event")
            self.events.append(copy.deepcopy(body))
            return copy.deepcopy(body)


def pod_object(
    namespace: str,
    name: str,
    node: str | None,
    npu: int,
    *,
    annotations: Mapping[str, str] | None = None,
    phase: str = "Pending",
) -> dict[str, Any]:
    """A minimal pod as the API server returns it (for tests and the demo)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"uid-{namespace}-{name}",
            "annotations": dict(annotations or {}),
        },
        "spec": {
            **({"nodeName": node} if node else {}),
            "containers": [
                {"name": "main", "resources": {"limits": {"huawei.com/Ascend910": str(npu)}}}
            ],
        },
        "status": {"phase": phase},
    }
