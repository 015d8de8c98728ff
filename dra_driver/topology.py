"""The leaf switch (ToR) this node hangs under, for its chips' ``torIP`` attribute: from the
ToR topology an admin imports (``kube-system/basic-tor-node-cm``), watched by name (one
object: the API server's watch cache serves every node's watch of it), this node found by
its InternalIP. A malformed topology is logged once and gives no ``torIP``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from contract.annotations import TOPOLOGY_CONFIGMAP
from contract.objects import Obj
from contract.tor_topology import TopologyReader
from infra.kube.port import KubeGateway, Selection
from infra.kube.reflector import Change, Reflector


def _data(configmap: Obj) -> Mapping[str, str]:
    return {k: v for k, v in (configmap.get("data") or {}).items() if isinstance(v, str)}


class TorAddress:
    def __init__(
        self, gateway: KubeGateway, node_ip: Callable[[], str], on_change: Callable[[], None]
    ) -> None:
        self._node_ip = node_ip
        self._on_change = on_change
        self._topology = TopologyReader()
        namespace, name = TOPOLOGY_CONFIGMAP
        self.reflector: Reflector[Mapping[str, str]] = Reflector(
            gateway,
            Selection("ConfigMap", namespace, fields=f"metadata.name={name}"),
            _data,
            self._changed,
            name="tor-topology",
        )

    def _changed(self, changes: list[Change[Mapping[str, str]]]) -> None:
        self._on_change()

    def start(self) -> None:
        self.reflector.start()

    def stop(self) -> None:
        self.reflector.stop(wait=0)  # a stopping driver does not wait for a quiet watch

    def tor_ip(self) -> str | None:
        """This node's ToR IP; None when no topology names it."""
        data = self.reflector.get("/".join(TOPOLOGY_CONFIGMAP))
        ip = self._node_ip()
        if data is None or not ip:
            return None
        topology = self._topology.read(data)
        server = topology.server(ip) if topology is not None else None
        if server is None or not server.tor_ip:
            return None
        return server.tor_ip
