"""kube-proxy's part for one port of one Service, on this machine: a TCP forwarder in front of
the Service's endpoints, for a client that runs outside the pods (kube-scheduler here).

It follows the Service's EndpointSlices (``discovery.k8s.io/v1``, label
``kubernetes.io/service-name``), which kube-controller-manager's EndpointSlice controller
writes from the pods the Service selects. Each connection goes to an endpoint chosen at random
among the usable ones, as kube-proxy chooses (``pkg/proxy/topology.go``
``CategorizeEndpoints``): the ready ones, or, when none is, the serving and terminating ones;
with none at all it is refused, as kube-proxy rejects it. A connection stays with its endpoint
until either side closes it, as connection tracking keeps it: an endpoint leaving the slice
ends no connection already made. The pods' IPs are the pod runner's
(``testbed/pod_runner.py``), reached on this machine by ``reach``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import threading
from collections import Counter
from dataclasses import dataclass

from infra.kube.client import KubernetesGateway
from infra.kube.port import Selection
from infra.kube.reflector import Reflector
from testbed.pod_runner import WATCH_WINDOW, reach
from testbed.rest import Obj

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 2.0
CHUNK = 65536


@dataclass(frozen=True, slots=True)
class Endpoint:
    address: str  # the pod's IP
    port: int
    ready: bool
    serving: bool
    terminating: bool


def endpoints(slices: list[Obj], port_name: str) -> list[Endpoint]:
    """The endpoints of the slices for the port ``port_name``, one per address (kube-proxy's
    reading of the conditions: ``ready`` and ``serving`` unset mean true,
    ``pkg/proxy/endpointslicecache.go``)."""
    found: dict[str, Endpoint] = {}
    for piece in slices:
        ports = [p["port"] for p in piece.get("ports") or [] if p.get("name", "") == port_name]
        if not ports:
            continue
        for endpoint in piece.get("endpoints") or []:
            conditions = endpoint.get("conditions") or {}
            ready = conditions.get("ready") is not False
            found.setdefault(
                endpoint["addresses"][0],
                Endpoint(
                    endpoint["addresses"][0],
                    int(ports[0]),
                    ready,
                    conditions.get("serving", ready) is not False,
                    conditions.get("terminating") is True,
                ),
            )
    return list(found.values())


def usable(candidates: list[Endpoint]) -> list[Endpoint]:
    """The ready endpoints, else the serving and terminating ones."""
    ready = [e for e in candidates if e.ready]
    return ready or [e for e in candidates if e.serving and e.terminating]


class ServiceProxy:
    """Forwards ``127.0.0.1:<port>`` to the Service ``namespace/name``'s port ``port_name``;
    ``connections`` counts the connections forwarded to each pod IP."""

    def __init__(
        self, gateway: KubernetesGateway, namespace: str, name: str, port_name: str
    ) -> None:
        self._port_name = port_name
        self._slices = Reflector(
            gateway,
            Selection(
                "endpointslices.discovery.k8s.io/v1",
                namespace,
                labels=f"kubernetes.io/service-name={name}",
            ),
            lambda piece: piece,
            name=f"endpoints of {namespace}/{name}",
            window=WATCH_WINDOW,
        )
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.connections: Counter[str] = Counter()
        self.refused = 0
        self._rng = random.Random()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="service proxy", daemon=True)

    def start(self) -> str:
        self._slices.start()
        self._thread.start()
        return self.url

    def endpoints(self) -> list[Endpoint]:
        return endpoints(self._slices.values(), self._port_name)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed: stopped
            threading.Thread(target=self._forward, args=(client,), daemon=True).start()

    def _forward(self, client: socket.socket) -> None:
        choices = usable(self.endpoints())
        if not choices:
            self.refused += 1
            client.close()
            return
        chosen = self._rng.choice(choices)
        try:
            backend = socket.create_connection(
                (reach(chosen.address), chosen.port), timeout=CONNECT_TIMEOUT
            )
        except OSError as failed:
            log.info("endpoint %s:%s unreachable: %s", chosen.address, chosen.port, failed)
            client.close()
            return
        backend.settimeout(None)
        self.connections[chosen.address] += 1
        other = threading.Thread(target=_pipe, args=(backend, client), daemon=True)
        other.start()
        _pipe(client, backend)
        other.join()
        client.close()
        backend.close()

    def stop(self) -> None:
        self._stopped.set()
        self._listener.close()
        self._slices.stop()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until ``source`` ends, then end ``sink``'s writing side (a half close)."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass  # reset: the other side's copy ends too
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
