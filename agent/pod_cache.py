"""This node's pods, kept current by a reflector, so Allocate needs no API round trip.

The pods bound to the node (field selector ``spec.nodeName``), listed once and then watched
(``infra.kube.reflector``: bookmarks, windows of 5–10 minutes, jittered backoff, a new list
only on 410 Gone). Our own writes are applied to the cache at once, so a pod consumed by
one Allocate is never offered to the next.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from contract.objects import Obj
from contract.pods import PodView, cached_pod_view
from infra.kube.port import KubeGateway, Selection
from infra.kube.reflector import WINDOW, Change, Reflector


class PodCache:
    def __init__(
        self,
        gateway: KubeGateway,
        node: str,
        window: tuple[float, float] = WINDOW,
        *,
        on_change: Sequence[Callable[[], None]] = (),
        on_api_error: Callable[[], None] = lambda: None,
        on_loop_error: Callable[[str], None] = lambda loop: None,
    ) -> None:
        self._changed = threading.Condition()
        self._listeners = tuple(on_change)  # called after every change to the cache
        self.reflector = Reflector(
            gateway,
            Selection("Pod", fields=f"spec.nodeName={node}"),
            cached_pod_view,
            on_change=self._notify,
            on_api_error=on_api_error,
            on_loop_error=lambda name: on_loop_error("pod-cache"),
            name="pod-cache",
            window=window,
        )

    def _notify(self, changes: list[Change[PodView]]) -> None:
        with self._changed:
            self._changed.notify_all()
        for listener in self._listeners:
            listener()

    @property
    def synced(self) -> bool:
        return self.reflector.synced

    def pods(self) -> list[PodView]:
        return self.reflector.values()

    def apply(self, obj: Obj, deleted: bool = False) -> None:
        """Record a pod as the API server returned it (a newer resourceVersion wins)."""
        self.reflector.apply(obj, deleted)

    def wait_change(self, timeout: float) -> None:
        with self._changed:
            self._changed.wait(timeout)

    def resync(self) -> None:
        """Replace the cache with a fresh list."""
        self.reflector.relist()

    def start(self) -> None:
        self.reflector.start()

    def stop(self) -> None:
        self.reflector.stop()
