"""This node's pods, kept current by a watch, so Allocate needs no API round trip.

List once, then watch from the list's resourceVersion, resuming each watch window from the
last version seen, like an informer; on any error list again (after a short backoff while
the API server is unreachable). Our own writes are applied to
the cache at once, so a pod consumed by one Allocate is never offered to the next.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from contract.objects import Obj
from contract.pods import PodView, pod_view
from infra.kube.port import KubeError, KubeGateway

log = logging.getLogger(__name__)

WATCH_SECONDS = 30.0
RETRY_SECONDS = 0.5
STOP_WAIT = 1.0


class PodCache:
    def __init__(
        self,
        gateway: KubeGateway,
        node: str,
        watch_seconds: float = WATCH_SECONDS,
        *,
        on_change: Sequence[Callable[[], None]] = (),
        on_api_error: Callable[[], None] = lambda: None,
        on_loop_error: Callable[[str], None] = lambda loop: None,
    ) -> None:
        self._gateway = gateway
        self._node = node
        self._watch_seconds = watch_seconds
        self._pods: dict[str, PodView] = {}
        self._synced = False
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listeners = tuple(on_change)  # called after every change to the cache
        self._on_api_error = on_api_error
        self._on_loop_error = on_loop_error  # an unexpected failure, survived and counted

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()

    @property
    def synced(self) -> bool:
        with self._changed:
            return self._synced

    def pods(self) -> list[PodView]:
        with self._changed:
            return list(self._pods.values())

    def apply(self, obj: Obj, deleted: bool = False) -> None:
        """Record a pod as the API server returned it (newer resourceVersions win)."""
        info = pod_view(obj)
        with self._changed:
            old = self._pods.get(info.key)
            if deleted:
                self._pods.pop(info.key, None)
            elif old is None or _newer(info.resource_version, old.resource_version):
                self._pods[info.key] = info
            self._changed.notify_all()
        self._notify()

    def wait_change(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)

    def resync(self) -> str:
        """Replace the cache with a fresh list; return its resourceVersion."""
        objects, version = self._gateway.list_pods(self._node)
        fresh = {info.key: info for info in map(pod_view, objects)}
        with self._changed:
            self._pods = fresh
            self._synced = True
            self._changed.notify_all()
        self._notify()
        return version

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pod-cache", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop following. A watch blocked in the client ends with its window; the thread is
        a daemon, so shutdown does not wait for it longer than a moment."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self.resync()
                while not self._stop.is_set():
                    for change in self._gateway.watch_pods(
                        self._node, version, self._watch_seconds
                    ):
                        self.apply(change.object, deleted=change.type == "DELETED")
                        version = change.object["metadata"].get("resourceVersion", version)
            except KubeError as failed:
                self._on_api_error()
                log.warning("pod watch failed (%s); listing again in %.1f s", failed, RETRY_SECONDS)
            except Exception:
                self._on_loop_error("pod-cache")
                log.exception("pod watch failed; listing again in %.1f s", RETRY_SECONDS)
            with self._changed:
                self._synced = False
            self._stop.wait(RETRY_SECONDS)


def _newer(candidate: str, current: str) -> bool:
    if candidate.isdigit() and current.isdigit():
        return int(candidate) >= int(current)
    return True
