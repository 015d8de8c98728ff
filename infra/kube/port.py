"""The one port to Kubernetes shared by the agent and the scheduler service: only the calls
they make, on plain JSON objects.

Adapters: ``MemoryCluster`` (tests, demo), the official ``kubernetes`` client
(``scheduler_core.kube.client``), and for testing that client, the loopback fake API server.
Objects travel as the API server's JSON (dicts).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from contract.objects import Obj


class KubeError(RuntimeError):
    """The API server refused or could not be reached; the message says which call."""


class Conflict(KubeError):
    """A resourceVersion precondition failed (HTTP 409): re-read and decide again."""


class NotFound(KubeError):
    """HTTP 404."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED
    object: Obj


class KubeGateway(Protocol):
    def list_pods(self, node: str | None) -> tuple[list[Obj], str]:
        """Pods bound to ``node`` (every pod when None) and the list's resourceVersion."""
        ...

    def list_configmaps(self, namespace: str) -> list[Obj]: ...

    def list_nodes(self) -> list[Obj]: ...

    def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        """Create the pod's Binding; its annotations reach the pod atomically with the node
        (Conflict when the pod is already bound or its UID differs)."""
        ...

    def watch_pods(self, node: str, resource_version: str, timeout: float) -> Iterator[WatchEvent]:
        """Changes after ``resource_version``; ends on timeout (KubeError when it expired)."""
        ...

    def get_pod(self, namespace: str, name: str) -> Obj: ...

    def delete_pod(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> None:
        """Delete the pod if it still has ``uid`` (Conflict otherwise); ``grace_seconds``
        None keeps the pod's own grace period, 0 deletes at once."""
        ...

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str], resource_version: str
    ) -> Obj:
        """Merge-patch annotations, only if the pod still has ``resource_version`` (Conflict)."""
        ...

    def get_configmap(self, namespace: str, name: str) -> Obj: ...

    def create_configmap(self, body: Obj) -> Obj: ...

    def update_configmap(self, body: Obj) -> Obj: ...

    def get_node(self, name: str) -> Obj: ...

    def patch_node_labels(self, name: str, labels: Mapping[str, str]) -> Obj: ...

    def create_event(self, namespace: str, body: Obj) -> Obj: ...

    def get_lease(self, namespace: str, name: str) -> Obj:
        """A coordination.k8s.io/v1 Lease (NotFound when absent)."""
        ...

    def create_lease(self, body: Obj) -> Obj:
        """Conflict when it exists already."""
        ...

    def update_lease(self, body: Obj) -> Obj:
        """Replace a Lease; its resourceVersion is a precondition (Conflict)."""
        ...
