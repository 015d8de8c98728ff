"""The extenders ``benchmarks/real_scheduler.py`` puts under kube-scheduler, each as a process of
its own: the scheduler service as the chart runs it, the two that decide nothing
(``benchmarks/floor_extender.py`` and ``benchmarks/floor_extender_go``), and a proxy that counts
the node names each ``/filter`` carries."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from simulation.processes import free_port, service_command_with, serving
from testbed.cluster import ExtenderTls
from testbed.control_plane import ControlPlane


class CountingProxy:
    """Forwards the extender's verbs to the service, noting how many node names each
    ``/filter`` carries (``NodeNames`` when nodeCacheCapable, else ``Nodes.items``)."""

    def __init__(self, target: str, tls: ExtenderTls | None = None) -> None:
        """kube-scheduler calls the proxy over plain HTTP; the proxy calls ``target`` over
        HTTPS with kube-scheduler's client certificate when ``tls`` is given."""
        self.names_per_filter: list[int] = []
        parsed = urllib.parse.urlsplit(target)
        host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
        counts = self.names_per_filter
        context = None
        if tls is not None:
            context = ssl.create_default_context(cafile=tls.ca)
            context.load_cert_chain(tls.client.cert, tls.client.key)

        def connect() -> http.client.HTTPConnection:
            if context is None:
                return http.client.HTTPConnection(host, port, timeout=30)
            return http.client.HTTPSConnection(host, port, timeout=30, context=context)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path.rstrip("/").endswith("/filter"):
                    args = json.loads(body)
                    names = args.get("NodeNames")
                    if names is None:
                        names = (args.get("Nodes") or {}).get("items") or []
                    counts.append(len(names))
                upstream = connect()
                try:
                    upstream.request("POST", self.path, body, {"Content-Type": "application/json"})
                    answer = upstream.getresponse()
                    data = answer.read()
                finally:
                    upstream.close()
                self.send_response(answer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass(frozen=True)
class Extender:
    pid: int
    url: str  # the verbs, as kube-scheduler calls them
    probes: str  # /readyz and /metrics (the service's), over plain HTTP


@contextmanager
def extender_process(
    command: Callable[[int, int], list[str]], tls: ExtenderTls | None, log: Path
) -> Iterator[Extender]:
    """An extender as its own process, ``command(port, probe_port)``: over HTTPS with
    ``tls`` (its probes then on the second port), else plain HTTP on the first."""
    port, probe_port = free_port(), free_port()
    probed = probe_port if tls is not None else port
    with (
        log.open("a") as output,
        serving(command(port, probe_port), probed, output) as (
            process,
            probes,
        ),
    ):
        verbs = f"https://127.0.0.1:{port}" if tls is not None else probes
        yield Extender(process.pid, verbs, probes)


def service_command(admin: Path, tls: ExtenderTls | None) -> Callable[[int, int], list[str]]:
    """The scheduler service with the admin's kubeconfig: as the chart runs it over HTTPS
    (kube-scheduler's client certificate required, probes and ``/metrics`` apart), or
    ``--insecure`` over plain HTTP."""

    def command(port: int, probe_port: int) -> list[str]:
        if tls is None:
            return service_command_with(admin, port)
        listen = f"--metrics-listen=127.0.0.1:{probe_port}"
        return service_command_with(admin, port, listen, *tls.service_flags(), insecure=False)

    return command


def floor_command(admin: Path, tls: ExtenderTls | None) -> Callable[[int, int], list[str]]:
    """``benchmarks.floor_extender`` with the admin's kubeconfig, over HTTPS as the service
    (the same certificates) or plain HTTP."""

    def command(port: int, probe_port: int) -> list[str]:
        served = [sys.executable, "-m", "benchmarks.floor_extender", "--kubeconfig", str(admin)]
        served += ["--port", str(port)]
        if tls is None:
            return served
        return [
            *served,
            *("--probe-port", str(probe_port), "--tls-cert-file", str(tls.server.cert)),
            *("--tls-private-key-file", str(tls.server.key), "--client-ca-file", str(tls.ca)),
        ]

    return command


GO_FLOOR = Path(__file__).parent / "floor_extender_go"


def go_floor_command(
    plane: ControlPlane, tls: ExtenderTls | None, binary: Path
) -> Callable[[int, int], list[str]]:
    """``benchmarks/floor_extender_go`` built to ``binary``, binding as the admin, over HTTPS
    as the service (the same certificates) or plain HTTP."""
    kubeconfig = yaml.safe_load(plane.admin.read_text())
    user, cluster = kubeconfig["users"][0]["user"], kubeconfig["clusters"][0]["cluster"]
    subprocess.run(
        ["go", "build", "-o", str(binary), "."],
        cwd=GO_FLOOR,
        env={**os.environ, "GOFLAGS": "-buildvcs=false"},
        check=True,
    )

    def command(port: int, probe_port: int) -> list[str]:
        served = [str(binary), f"--listen=127.0.0.1:{port}", f"--api={cluster['server']}"]
        served += [f"--api-ca-file={cluster['certificate-authority']}"]
        served += [f"--api-cert-file={user['client-certificate']}"]
        served += [f"--api-key-file={user['client-key']}"]
        if tls is None:
            return served
        return [
            *served,
            *(f"--probe-listen=127.0.0.1:{probe_port}", f"--tls-cert-file={tls.server.cert}"),
            *(f"--tls-private-key-file={tls.server.key}", f"--client-ca-file={tls.ca}"),
        ]

    return command
