"""The HTTP server both components run: a few routes, answered by plain functions.

The scheduler answers its extender verbs, ``/healthz``, ``/readyz`` and ``/metrics`` here;
the agent its ``/metrics``, ``/healthz`` and ``/readyz``. Handlers take the path (and a POST's
body) and return a ``Response``; the server does the HTTP.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

PROMETHEUS_TEXT = "text/plain; version=0.0.4"


@dataclass(frozen=True, slots=True)
class Response:
    code: int
    body: bytes
    content_type: str = "application/json"

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


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # The stdlib default backlog of 5 resets connections when callers arrive together.
    request_queue_size = 128


class HttpServer:
    def __init__(self, get: Get, post: Post = _no_posts) -> None:
        self._get = get
        self._post = post
        self._server: _Server | None = None

    def start(self, host: str, port: int) -> str:
        """Serve on a thread of its own; the URL (with the port chosen when ``port`` is 0)."""
        get, post = self._get, self._post

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # a kept-alive caller would wait for delayed ACKs

            def log_message(self, format: str, *args: Any) -> None:
                log.debug(format, *args)

            def _send(self, response: Response) -> None:
                self.send_response(response.code)
                self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(response.body)))
                self.end_headers()
                self.wfile.write(response.body)

            def do_GET(self) -> None:
                self._send(get(self.path))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._send(post(self.path, self.rfile.read(length)))

        server = _Server((host, port), Handler)
        self._server = server
        threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
        return f"http://{host}:{server.server_address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
