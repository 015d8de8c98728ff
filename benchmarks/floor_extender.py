"""An extender that decides nothing: the floor under the scheduler service in
``benchmarks/real_scheduler.py`` (its run (c)).

Run: ``.venv/bin/python -m benchmarks.floor_extender --kubeconfig K --port P``. The same HTTP
server as the service (``infra.http``) and the same gateway for the one write a bind makes
(``KubernetesGateway.bind_pod``, the official client), but no watch and no decision:
``/filter`` passes every node it is sent, ``/bind`` posts the pod's Binding with a fixed chips
annotation and ``predicate-time``, as many bytes as the service's. What (c) costs beyond (b) is
what any extender of this process model costs kube-scheduler, the API server and itself; what
(a) costs beyond (c) is the service's deciding and watching.
"""

from __future__ import annotations

import argparse
import ssl
import threading
import time
from pathlib import Path

import msgspec

from contract.annotations import CHIPS_ANNOTATION, PREDICATE_TIME
from infra.http import HttpServer, Response, tls_context
from infra.kube.client import KubernetesGateway, api_client

CHIPS = "Ascend910-0,Ascend910-1"  # the annotation's value: a 2-chip pod's, the sizes' mean


class _Binding(msgspec.Struct):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class _Filter(msgspec.Struct):
    NodeNames: list[str]


_filter = msgspec.json.Decoder(_Filter)
_binding = msgspec.json.Decoder(_Binding)


def serve(
    kubeconfig: Path, port: int, tls: ssl.SSLContext | None = None, probe_port: int | None = None
) -> None:
    """The verbs on ``127.0.0.1:port`` (over ``tls`` when given, the caller's client
    certificate checked by the handshake as the service's is); ``/readyz`` there, or on
    ``probe_port`` over plain HTTP."""
    gateway = KubernetesGateway(api_client(kubeconfig))

    def get(path: str) -> Response:
        return Response.text(200, "ok\n")

    def post(path: str, body: bytes) -> Response:
        if path.rstrip("/").endswith("/filter"):
            names = _filter.decode(body).NodeNames
            return Response(200, msgspec.json.encode({"NodeNames": names, "Error": ""}))
        binding = _binding.decode(body)
        annotations = {CHIPS_ANNOTATION: CHIPS, PREDICATE_TIME: str(time.time_ns())}
        gateway.bind_pod(
            binding.PodNamespace, binding.PodName, binding.PodUID, binding.Node, annotations
        )
        return Response(200, b'{"Error":""}')

    HttpServer("floor", get, post, tls=tls).start("127.0.0.1", port)
    if probe_port is not None:
        HttpServer("floor-probe", get).start("127.0.0.1", probe_port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--probe-port", type=int, help="/readyz over plain HTTP (with TLS)")
    parser.add_argument("--tls-cert-file", type=Path)
    parser.add_argument("--tls-private-key-file", type=Path)
    parser.add_argument("--client-ca-file", type=Path)
    args = parser.parse_args()
    tls = None
    if args.tls_cert_file is not None:
        tls = tls_context(args.tls_cert_file, args.tls_private_key_file, args.client_ca_file)
    serve(args.kubeconfig, args.port, tls, args.probe_port)
    threading.Event().wait()  # serves until the process is ended


if __name__ == "__main__":
    main()
