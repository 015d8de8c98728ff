"""The one port to Kubernetes shared by the agent and the scheduler service: only the calls
they make, on plain JSON objects.

Adapters: the official ``kubernetes`` client (``infra.kube.client``), and as harnesses
``simulation.memory.MemoryCluster`` (tests, demo) and the loopback fake API server it backs.
Objects travel as the API server's JSON (dicts). Collections are read as a controller reads
them: a paginated list, then a watch from the list's resourceVersion (``infra.kube.reflector``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

# An object as the API server's JSON. Named here, not taken from ``contract.objects`` (the
# same type): infra knows no domain.
Obj = dict[str, Any]


class KubeError(RuntimeError):
    """The API server refused or could not be reached; the message says which call."""


class Conflict(KubeError):
    """A resourceVersion precondition failed (HTTP 409): re-read and decide again."""


class NotFound(KubeError):
    """HTTP 404."""


class Forbidden(KubeError):
    """HTTP 403: the caller's identity may not (RBAC, or an admission policy)."""


class Gone(KubeError):
    """HTTP 410: a resourceVersion or a continue token older than the API server keeps;
    list again from the start."""


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK (only metadata.resourceVersion is set)
    object: Obj


@dataclass(frozen=True, slots=True)
class Selection:
    """One collection to list and watch: a kind (``Pod``, ``Node``, ``ConfigMap``, or a custom
    resource as ``plural.group/version``), every namespace or one, and label / field
    selectors in the API server's syntax."""

    kind: str
    namespace: str = ""  # "" = every namespace (nodes have none)
    labels: str = ""
    fields: str = ""

    def __str__(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        chosen = ",".join(s for s in (self.labels, self.fields) if s)
        return f"{self.kind}s{where}" + (f" ({chosen})" if chosen else "")


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Obj]
    resource_version: str  # of the whole list: every page is read at that version
    next: str = ""  # the continue token; "" on the last page


class KubeGateway(Protocol):
    def served(self, group: str, version: str) -> bool:
        """Whether the API server serves the API ``group/version`` (its discovery lists it: a
        custom resource's CRD is installed). KubeError when discovery fails."""
        ...

    def list_page(self, what: Selection, limit: int, token: str = "") -> Page:
        """One page of at most ``limit`` objects (0: all), continuing from ``token`` (Gone
        when it expired)."""
        ...

    def watch(self, what: Selection, resource_version: str, timeout: float) -> Iterator[WatchEvent]:
        """Changes after ``resource_version``, with bookmarks, until ``timeout`` seconds have
        passed (Gone when the version is older than the API server keeps; KubeError when the
        stream breaks). An object that stops matching the selectors comes as DELETED, one
        that starts matching as ADDED."""
        ...

    def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        """Create the pod's Binding; its annotations reach the pod atomically with the node
        (Conflict when the pod is already bound or its UID differs)."""
        ...

    def get_pod(self, namespace: str, name: str) -> Obj: ...

    def delete_pod(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> None:
        """Delete the pod if it still has ``uid`` (Conflict otherwise); ``grace_seconds``
        None keeps the pod's own grace period, 0 deletes at once."""
        ...

    def patch_pod_annotations(
        self,
        namespace: str,
        name: str,
        annotations: Mapping[str, str | None],
        resource_version: str,
        *,
        uid: str = "",
    ) -> Obj:
        """Merge-patch annotations (None removes one), only if the pod still has
        ``resource_version`` when one is given (Conflict), and still is the pod ``uid``
        when one is given (KubeError: another pod of that name)."""
        ...

    def patch_pod_labels(self, namespace: str, name: str, labels: Mapping[str, str | None]) -> Obj:
        """Merge-patch labels (None removes one), whatever the pod's version."""
        ...

    def get_configmap(self, namespace: str, name: str) -> Obj: ...

    def create_configmap(self, body: Obj) -> Obj: ...

    def update_configmap(self, body: Obj) -> Obj: ...

    def read_configmap_by_patch(self, namespace: str, name: str) -> Obj:
        """The ConfigMap, read through an empty patch: for an identity that RBAC lets get no
        ConfigMap it cannot name, whose writes an admission policy pins to its own (the API
        server runs validating admission on a patch that changes nothing, then stores
        nothing: k8s.io/apiserver pkg/registry/generic/registry/store.go ``Update``)."""
        ...

    def get_node(self, name: str) -> Obj: ...

    def patch_node_labels(self, name: str, labels: Mapping[str, str]) -> Obj: ...

    def patch_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> Obj:
        """Merge-patch annotations (None removes one), whatever the node's version."""
        ...

    def create_event(self, namespace: str, body: Obj) -> Obj: ...

    def get_object(self, kind: str, namespace: str, name: str) -> Obj:
        """An object of another API group (``kind``: ``plural.group/version``, as in a
        Selection; ``namespace`` "" for a cluster-scoped one), NotFound when absent."""
        ...

    def create_object(self, kind: str, body: Obj) -> Obj:
        """Conflict when it exists already."""
        ...

    def replace_object(self, kind: str, body: Obj) -> Obj:
        """Its resourceVersion, when set, is a precondition (Conflict)."""
        ...

    def delete_object(self, kind: str, namespace: str, name: str) -> None: ...

    def get_lease(self, namespace: str, name: str) -> Obj:
        """A coordination.k8s.io/v1 Lease (NotFound when absent)."""
        ...

    def create_lease(self, body: Obj) -> Obj:
        """Conflict when it exists already."""
        ...

    def update_lease(self, body: Obj) -> Obj:
        """Replace a Lease; its resourceVersion is a precondition (Conflict)."""
        ...


def list_all(gateway: KubeGateway, what: Selection, page_size: int = 500) -> tuple[list[Obj], str]:
    """Every object of a collection, page by page, and the list's resourceVersion: for a
    command that reads once (a loop lists once and then watches, through a reflector)."""
    items: list[Obj] = []
    page = gateway.list_page(what, page_size)
    items += page.items
    while page.next:
        page = gateway.list_page(what, page_size, page.next)
        items += page.items
    return items, page.resource_version
