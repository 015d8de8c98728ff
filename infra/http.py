"""The HTTP server both components run: a few routes, answered by plain functions.

The scheduler answers its extender verbs, ``/healthz``, ``/readyz`` and ``/metrics`` here;
the agent its ``/metrics``, ``/healthz`` and ``/readyz``. Handlers take the path (and a POST's
body) and return a ``Response``; the server does the HTTP, within limits no caller can
stretch: a body larger than ``max_body`` is refused with 413 before it is read, a connection
idle or slow for ``timeout`` seconds is closed, at most ``max_connections`` connections are
served at once, each by a thread of a bounded pool (more are closed at once), and a handler
that fails answers 500 with a one-line JSON error instead of dropping the connection.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from infra.cli import ListenError

log = logging.getLogger(__name__)

PROMETHEUS_TEXT = "text/plain; version=0.0.4"


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


DRAIN_CHUNK = 1024 * 1024
Get = Callable[[str], Response]  # path → answer
Post = Callable[[str, bytes], Response]  # path, body → answer


def _no_posts(path: str, body: bytes) -> Response:
    return Response.text(405, "only GET here\n")


@dataclass(frozen=True, slots=True)
class Limits:
    max_body: int = 8 * 1024 * 1024
    timeout: float = 30.0  # seconds a connection may stay idle or slow
    max_connections: int = 128  # and as many threads: one serves a kept-alive connection
    # Paths whose body is read and dropped as it arrives, never kept (their caller posts
    # large bodies nobody reads: Volcano's whole session at onSessionOpen), up to this size.
    drained: frozenset[str] = frozenset()
    max_drained: int = 4 * 1024 * 1024 * 1024


class _Server(ThreadingHTTPServer):
    # The stdlib default backlog of 5 resets connections when callers arrive together.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type, limits: Limits, name: str) -> None:
        # Before the bind in super().__init__: a bind that fails calls server_close, which
        # shuts the pool down.
        self._pool = ThreadPoolExecutor(limits.max_connections, thread_name_prefix=name)
        self._max_connections = limits.max_connections
        self._open: set[Any] = set()
        self._lock = threading.Lock()
        self._dual_stack = address[0] == "" and socket.has_dualstack_ipv6()
        if self._dual_stack:
            # No host: every address of the machine, IPv6 and IPv4, as Go's net.Listen(":port")
            # (the healthz server's address is a bare port upstream).
            address = ("::", address[1])
        if ":" in address[0]:  # an IPv6 host ([::]:8888 on the command line)
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def server_bind(self) -> None:
        if self._dual_stack:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            full = len(self._open) >= self._max_connections
            if not full:
                self._open.add(request)
        if full:
            log.warning(
                "closing a connection from %s: %d are open", client_address, len(self._open)
            )
            self.shutdown_request(request)
            return
        self._pool.submit(self._serve, request, client_address)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._open.discard(request)

    def close_connections(self) -> None:
        """End every open connection: a caller that keeps its connections alive between
        calls (kube-scheduler's Go transport does) would otherwise hold a thread reading
        its next request, and the process could not exit until it hung up."""
        with self._lock:
            connections = list(self._open)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A TLS handshake that failed, a reset connection: the caller's problem, not ours.
        log.debug("connection from %s ended with an error", client_address, exc_info=True)

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


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
        limits: Limits = Limits(),
        *,
        tls: ssl.SSLContext | None = None,
        guard: Guard = _open,
        guarded_get: Callable[[str], bool] = _no_gets_guarded,
    ) -> None:
        """``guard`` decides every POST, and the GETs of the paths ``guarded_get`` names."""
        self.name = name  # of its threads
        self._get = get
        self._post = post
        self._limits = limits
        self._tls = tls
        self._guard = guard
        self._guarded_get = guarded_get
        self._server: _Server | None = None

    def start(self, host: str, port: int) -> str:
        """Serve on a thread of its own; the URL (with the port chosen when ``port`` is 0).
        ListenError when ``host:port`` cannot be bound (in use, not this machine's, ...)."""
        get, post, limits, guard = self._get, self._post, self._limits, self._guard
        guarded_get = self._guarded_get

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # a kept-alive caller would wait for delayed ACKs
            timeout = limits.timeout

            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format, *args)

            def _send(self, response: Response) -> None:
                if response.close:
                    self.close_connection = True
                self.send_response(response.code)
                self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(response.body)))
                for name, value in response.headers:
                    self.send_header(name, value)
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(response.body)

            def _answer(self, route: Callable[[], Response]) -> None:
                try:
                    response = route()
                except Exception:
                    log.exception("%s %s failed", self.command, self.path)
                    response = error(500, "internal error; the server's log has the details")
                self._send(response)

            def _certificate(self) -> Mapping[str, Any] | None:
                if not isinstance(self.connection, ssl.SSLSocket):
                    return None
                return self.connection.getpeercert() or None

            def _refused(self) -> bool:
                """The guard refused the caller: answered, and the connection closes."""
                headers = {k.lower(): v for k, v in self.headers.items()}
                refused = guard(Caller(headers, self._certificate(), self.path))
                if refused is not None:
                    self.close_connection = True
                    self._send(refused)
                return refused is not None

            def do_GET(self) -> None:
                if guarded_get(self.path) and self._refused():
                    return
                seen = self.headers.get("If-None-Match", "")
                self._answer(lambda: _not_modified(get(self.path), seen))

            def do_POST(self) -> None:
                if self._refused():
                    return
                text = self.headers.get("Content-Length") or "0"
                if not text.isascii() or not text.isdigit() or len(text) > 12:
                    self.close_connection = True
                    self._send(error(400, f"Content-Length {text[:20]!r} is not a number"))
                    return
                length = int(text)
                if self.path in limits.drained and length <= limits.max_drained:
                    while length > 0:  # times out on a body shorter than announced
                        chunk = self.rfile.read(min(length, DRAIN_CHUNK))
                        if not chunk:  # the caller hung up before the body ended
                            self.close_connection = True
                            return
                        length -= len(chunk)
                    self._answer(lambda: post(self.path, b""))
                    return
                if length > limits.max_body:
                    self.close_connection = True  # the body stays unread
                    self._send(
                        error(413, f"the body is {length} bytes (at most {limits.max_body})")
                    )
                    return
                body = self.rfile.read(length)  # times out on a body shorter than announced
                self._answer(lambda: post(self.path, body))

        try:
            server = _Server((host, port), Handler, limits, self.name)
        except OSError as failed:  # socket.gaierror too: a host name that does not resolve
            raise ListenError((host, port), failed) from failed
        if self._tls is not None:
            # The handshake happens on a worker's first read, never on the accepting thread.
            server.socket = self._tls.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._server = server
        accept = threading.Thread(target=server.serve_forever, name=f"{self.name}-accept")
        accept.daemon = True
        accept.start()
        scheme = "https" if self._tls is not None else "http"
        shown = f"[{host}]" if ":" in host else host
        return f"{scheme}://{shown}:{server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.close_connections()
            self._server.server_close()


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
