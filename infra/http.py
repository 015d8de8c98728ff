"""The HTTP server both components run: a few routes, answered by plain functions.

The scheduler answers its extender verbs, ``/healthz``, ``/readyz`` and ``/metrics`` here;
the agent its ``/metrics``, ``/healthz`` and ``/readyz``. Handlers take the path (and a POST's
body) and return a ``Response``; the server does the HTTP, within limits no caller can
stretch (``Limits``; the connections themselves are ``infra.http_connections``'): a body
larger than ``max_body`` is refused with 413 before it is read; an idle, handshaking or slow
connection holds no thread, only a socket, and is closed at its deadline; when connections
run out the least useful one is closed (one that never sent a request, before an idle one
that did, before an authenticated one), never a request being answered; handlers run on a
bounded pool of threads; and a handler that fails answers 500 with a one-line JSON error
instead of dropping the connection.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.cli import ListenError
from infra.http_connections import Head, Limits, Serving, encode, listening_socket

__all__ = [
    "PROMETHEUS_TEXT",
    "Caller",
    "HttpServer",
    "Limits",
    "ProbeServer",
    "Response",
    "error",
    "healthz_server",
    "tls_context",
]

log = logging.getLogger(__name__)

PROMETHEUS_TEXT = "text/plain; version=0.0.4"
DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Response:
    code: int
    body: bytes
    content_type: str = "application/json"
    # Ends the caller's kept-alive connection after this answer: its next request opens a
    # new one, which the Service routes afresh (kube-proxy never moves a live connection).
    close: bool = False
    headers: tuple[tuple[str, str], ...] = ()  # more headers (e.g. a 429's Retry-After)

    @staticmethod
    def text(code: int, text: str, content_type: str = "text/plain") -> Response:
        return Response(code, text.encode(), content_type)

    @staticmethod
    def json(code: int, value: Any) -> Response:
        return Response(code, json.dumps(value).encode())


Get = Callable[[str], Response]  # path → answer
Post = Callable[[str, bytes], Response]  # path, body → answer


def _no_posts(path: str, body: bytes) -> Response:
    return Response.text(405, "only GET here\n")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, and to which path: its headers, and its TLS client certificate
    when it showed one that the configured CA signed."""

    headers: Mapping[str, str]  # names in lower case
    certificate: Mapping[str, Any] | None
    path: str = ""  # the request's target, as sent


Guard = Callable[[Caller], Response | None]  # the answer refusing a POST, or None


def _open(caller: Caller) -> Response | None:
    return None


def _no_gets_guarded(path: str) -> bool:
    return False


def tls_context(cert_file: Path, key_file: Path, client_ca_file: Path | None) -> ssl.SSLContext:
    """A server context; with a client CA, a client certificate is asked for and verified when
    shown (the guard decides whether one is required, so ``/metrics`` stays reachable)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        context.load_verify_locations(client_ca_file)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


class HttpServer:
    def __init__(
        self,
        name: str,
        get: Get,
        post: Post = _no_posts,
        limits: Limits = DEFAULT_LIMITS,
        *,
        tls: ssl.SSLContext | None = None,
        guard: Guard = _open,
        guarded_get: Callable[[str], bool] = _no_gets_guarded,
    ) -> None:
        """``guard`` decides every POST, and the GETs of the paths ``guarded_get`` names; it
        runs on the server's event loop before the body is read, so it must not block (it
        reads the headers and the certificate)."""
        self.name = name  # of its threads
        self._get = get
        self._post = post
        self._limits = limits
        self._tls = tls
        self._guard = guard
        self._guarded_get = guarded_get
        self._serving: Serving | None = None

    def start(self, host: str, port: int) -> str:
        """Serve on a thread of its own; the URL (with the port chosen when ``port`` is 0).
        ListenError when ``host:port`` cannot be bound (in use, not this machine's, ...)."""
        try:
            sock = listening_socket(host, port)
        except OSError as failed:  # socket.gaierror too: a host name that does not resolve
            raise ListenError((host, port), failed) from failed
        serving = Serving(self.name, self._limits, self._tls, self._admit, self._answer)
        serving.start(sock)
        self._serving = serving
        scheme = "https" if self._tls is not None else "http"
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{sock.getsockname()[1]}"

    def stop(self) -> None:
        """Stop serving and end every open connection: a caller that keeps its connections
        alive between calls (kube-scheduler's Go transport does) would otherwise keep the
        process from exiting until it hung up."""
        if self._serving is not None:
            self._serving.stop()

    @property
    def open_connections(self) -> int:
        """Connections open now (idle, reading or being answered)."""
        return 0 if self._serving is None else self._serving.open_connections()

    def _admit(self, head: Head) -> tuple[bytes | None, bool]:
        """On the loop, before the body: the guard's refusal, and whether it let the caller
        in (a connection that authenticated is the last one evicted)."""
        if head.method != "POST" and not self._guarded_get(head.target):
            return None, False
        refused = self._guard(Caller(head.headers, head.certificate, head.target))
        if refused is None:
            return None, self._guard is not _open
        return _encoded(refused, close=True), False

    def _answer(self, head: Head, body: bytes) -> tuple[bytes, bool]:
        """On a pool thread: the handler's answer, encoded, and whether to close after it."""
        try:
            if head.method == "GET":
                seen = head.headers.get("if-none-match", "")
                response = _not_modified(self._get(head.target), seen)
            else:
                response = self._post(head.target, body)
        except Exception:
            log.exception("%s %s failed", head.method, head.target)
            response = error(500, "internal error; the server's log has the details")
        close = response.close or not head.keep_alive
        return _encoded(response, close), close


def _encoded(response: Response, close: bool) -> bytes:
    return encode(response.code, response.body, response.content_type, response.headers, close)


def _not_modified(response: Response, seen: str) -> Response:
    """A 304 without a body when the caller's ``If-None-Match`` (``seen``) names the answer's
    ETag (RFC 9110 13.1.2; weak comparison, one tag): a page polling an unchanged state reads
    nothing."""
    tag = next((v for k, v in response.headers if k.lower() == "etag"), None)
    if response.code != 200 or tag is None or seen.removeprefix("W/") != tag:
        return response
    return Response(304, b"", response.content_type, response.close, response.headers)


def error(code: int, message: str) -> Response:
    """A one-line JSON error, as kube-scheduler reads an extender's answer."""
    return Response.json(code, {"Error": message})


def _alive() -> Response:
    """The liveness answer: the process answers."""
    return Response.text(200, "ok\n")


def healthz_server(tls: ssl.SSLContext | None = None) -> HttpServer:
    """A server of the liveness answer alone, at ``/healthz`` and at ``/``, where Huawei's
    device-plugin DaemonSets probe it (Ascend/mind-cluster
    component/ascend-common/common-utils/healthz/healthz.go, healthzPath "/")."""

    def get(path: str) -> Response:
        return _alive() if path in ("/", "/healthz") else Response.text(404, "not found\n")

    return HttpServer("healthz", get, tls=tls)


class ProbeServer:
    """A daemon's ``/metrics``, ``/healthz`` (the process answers) and ``/readyz``:
    ``why_not_ready`` gives None when ready, else the reason the 503 says."""

    def __init__(self, metrics_text: Callable[[], str], why_not_ready: Callable[[], str | None]):
        self._metrics_text = metrics_text
        self._why_not_ready = why_not_ready
        self._server = HttpServer("metrics", self._get)

    def _get(self, path: str) -> Response:
        if path == "/metrics":
            return Response.text(200, self._metrics_text(), PROMETHEUS_TEXT)
        if path == "/healthz":
            return _alive()
        if path == "/readyz":
            why = self._why_not_ready()
            return Response.text(200, "ready\n") if why is None else Response.text(503, why + "\n")
        return Response.text(404, "not found\n")

    def start(self, host: str, port: int) -> str:
        return self._server.start(host, port)

    def stop(self) -> None:
        self._server.stop()
