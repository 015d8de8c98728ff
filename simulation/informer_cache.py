"""kube-scheduler's view of the cluster when its API server runs elsewhere: informers."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

from contract.objects import Obj
from infra.kube.client import KubernetesGateway
from infra.kube.port import Selection
from infra.kube.reflector import Reflector, stop_all


class InformerCache:
    """kube-scheduler's informers: every pod and node listed, then watched, over HTTP; its
    Bindings posted to the API server. ``changed`` is set by every pod event."""

    def __init__(self, api_url: str) -> None:
        self._gateway = KubernetesGateway.for_url(api_url)
        self.changed = threading.Event()
        self._pods: Reflector[Obj] = Reflector(
            self._gateway,
            Selection("Pod"),
            lambda obj: obj,
            on_change=lambda _: self.changed.set(),
            name="scheduler pods",
        )
        self._nodes: Reflector[Obj] = Reflector(
            self._gateway, Selection("Node"), lambda obj: obj, name="scheduler nodes"
        )
        for reflector in (self._pods, self._nodes):
            reflector.start()

    @property
    def synced(self) -> bool:
        return self._pods.synced and self._nodes.synced

    def list_pods(self, node: str | None) -> tuple[list[Obj], str]:
        pods = self._pods.values()
        if node is not None:
            pods = [p for p in pods if (p.get("spec") or {}).get("nodeName") == node]
        return pods, self._pods.version

    def list_nodes(self) -> list[Obj]:
        return self._nodes.values()

    def bind_pod(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        self._gateway.bind_pod(namespace, name, uid, node, annotations)

    def stop(self) -> None:
        stop_all((self._pods, self._nodes))


@dataclass(frozen=True)
class RemoteCluster:
    """A cluster whose API server and extender run elsewhere, read through informers."""

    url: str
    store: InformerCache
