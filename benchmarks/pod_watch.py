"""A raw watch on pods over the admin's client certificate, for the benchmarks: each event read
as the API server sends it and timed when read (the official client's watch adds its own
queueing), handed to handlers under one lock that ``wait_for`` shares."""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import yaml

from testbed.control_plane import ControlPlane

Obj = dict[str, Any]
Handler = Callable[[str, Obj, float], None]


class PodWatch:
    """One watch on the pods of ``path`` (every pod of the cluster by default), from now: each
    event handed to every handler
    (type, pod, ``time.monotonic()`` when read) under one lock, which ``wait_for`` shares.
    Watched again from the last version seen when the API server ends it; a failure ends
    ``wait_for`` at once."""

    def __init__(
        self, plane: ControlPlane, handlers: list[Handler], path: str = "/api/v1/pods"
    ) -> None:
        user = yaml.safe_load(plane.admin.read_text())["users"][0]["user"]
        self._context = ssl.create_default_context(cafile=str(plane.ca.cert))
        self._context.load_cert_chain(user["client-certificate"], user["client-key"])
        parsed = urllib.parse.urlsplit(plane.url)
        self._address = (parsed.hostname or "127.0.0.1", parsed.port or 443)
        self._handlers = handlers
        self.failure = ""
        self.changed = threading.Condition()
        self._stopped = threading.Event()
        self._connection: http.client.HTTPSConnection | None = None
        self._path = path
        listed = plane.rest().get(path, limit="1")
        self._version = str(listed["metadata"]["resourceVersion"])
        self._thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopped.is_set():
                self._watch()
        except Exception as failed:  # reported to wait_for()
            if not self._stopped.is_set():
                with self.changed:
                    self.failure = repr(failed)
                    self.changed.notify_all()

    def _watch(self) -> None:
        connection = http.client.HTTPSConnection(*self._address, context=self._context)
        self._connection = connection
        try:
            query = f"watch=1&allowWatchBookmarks=true&resourceVersion={self._version}"
            connection.request("GET", f"{self._path}?{query}")
            response = connection.getresponse()
            if response.status != 200:
                raise RuntimeError(f"watch: HTTP {response.status}: {response.read()[:300]!r}")
            for line in response:
                if line.strip():
                    self._event(json.loads(line), time.monotonic())
        finally:
            connection.close()

    def _event(self, event: Obj, at: float) -> None:
        pod = event["object"]
        if event["type"] == "ERROR":
            raise RuntimeError(f"watch: {pod.get('message')}")
        self._version = pod["metadata"]["resourceVersion"]
        if event["type"] == "BOOKMARK":
            return
        with self.changed:
            for handle in self._handlers:
                handle(event["type"], pod, at)
            self.changed.notify_all()

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        with self.changed:
            self.changed.wait_for(lambda: condition() or bool(self.failure), timeout)
            if self.failure:
                raise RuntimeError(self.failure)
            if not condition():
                raise TimeoutError(f"{what}: not within {timeout:.0f} s")

    def stop(self) -> None:
        self._stopped.set()
        connection = self._connection
        if connection is not None and connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=10)
