"""Events on objects (pods, mostly: where a user looks first, ``kubectl describe pod``).

Each Event carries its first and last time, a count and the reporting controller and
instance. Repeats of one (pod, reason, message) are aggregated: within ``window`` seconds
they are only counted, and the next Event written carries the count, so a loop that keeps
meeting the same condition cannot flood the API server. Events are written by a thread of
their own from a bounded queue: a caller (a filter under the extender's lock, an Allocate)
never waits for the API server, and when the queue is full an Event is dropped and counted.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from infra.kube.port import KubeError, KubeGateway, Obj

log = logging.getLogger(__name__)

WINDOW = 600.0  # seconds during which repeats are counted, not written
MAX_MESSAGE = 1024  # characters: the API server refuses longer Event messages
QUEUE = 1000
MAX_SERIES = 10_000  # (pod, reason, message) remembered at most


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about (its ``involvedObject``)."""

    kind: str
    namespace: str
    name: str
    uid: str = ""


def pod_ref(namespace: str, name: str, uid: str = "") -> ObjectRef:
    return ObjectRef("Pod", namespace, name, uid)


@dataclass
class _Series:
    first: float
    written: float  # when an Event of it was last written
    count: int  # occurrences so far


def _time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(
        self,
        gateway: KubeGateway,
        component: str,
        instance: str,
        clock: Callable[[], float] = time.time,
        window: float = WINDOW,
    ) -> None:
        self._gateway = gateway
        self._component = component
        self._instance = instance
        self._clock = clock
        self._window = window
        self._series: dict[tuple[str, str, str], _Series] = {}
        self._lock = threading.Lock()
        self._queue: queue.Queue[Obj] = queue.Queue(QUEUE)
        self._writer: threading.Thread | None = None
        self.dropped = 0

    def warn(self, about: ObjectRef, reason: str, message: str) -> None:
        self.record(about, "Warning", reason, message)

    def normal(self, about: ObjectRef, reason: str, message: str) -> None:
        self.record(about, "Normal", reason, message)

    def record(
        self, about: ObjectRef, kind: str, reason: str, message: str, action: str = ""
    ) -> None:
        now = self._clock()
        message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"
        key = (about.uid or f"{about.kind}/{about.namespace}/{about.name}", reason, message)
        with self._lock:
            series = self._series.get(key)
            if series is not None and now - series.written < self._window:
                series.count += 1
                return
            if series is None:
                if len(self._series) >= MAX_SERIES:
                    self._forget(now)
                series = self._series[key] = _Series(now, now, 0)
            series.count += 1
            series.written = now
            body = self._body(about, series, now, kind=kind, reason=reason, message=message)
            if action:  # what was done or is due (the device plugin's fault Events: the level)
                body["action"] = action
            if self._writer is None:
                self._writer = threading.Thread(target=self._write, name="events", daemon=True)
                self._writer.start()
        try:
            self._queue.put_nowait(body)
        except queue.Full:  # the API server is slower than the Events: say so, now and then
            self.dropped += 1
            if self.dropped % 1000 == 1:
                log.warning("%d Events dropped: the API server does not keep up", self.dropped)

    def _forget(self, now: float) -> None:
        """Drop the series no Event was written for within the window (oldest first)."""
        for key, series in sorted(self._series.items(), key=lambda item: item[1].written):
            if now - series.written < self._window and len(self._series) < MAX_SERIES:
                break
            del self._series[key]

    def _body(
        self, about: ObjectRef, series: _Series, now: float, *, kind: str, reason: str, message: str
    ) -> Obj:
        return {
            # An Event about a cluster-scoped object (a Node) lives in "default", as the
            # kubelet's (k8s pkg/apis/core/validation/events.go legacyValidateEvent).
            "metadata": {
                "generateName": f"{about.name}.",
                "namespace": about.namespace or "default",
            },
            "involvedObject": {
                "kind": about.kind,
                "namespace": about.namespace,
                "name": about.name,
                "uid": about.uid,
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "count": series.count,
            "firstTimestamp": _time(series.first),
            "lastTimestamp": _time(now),
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "reportingInstance": self._instance,
        }

    def _write(self) -> None:
        while True:
            body = self._queue.get()
            try:
                self._gateway.create_event(body["metadata"]["namespace"], body)
            except KubeError as failed:
                log.warning("could not record an event: %s", failed)
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Wait until every Event recorded so far is written (or failed)."""
        self._queue.join()
