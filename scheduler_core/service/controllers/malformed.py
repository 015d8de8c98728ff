"""The malformed-pod reporter: a pod whose chip annotations are malformed holds no chips by
them; it is said once per version of the pod (a log line, a counter, a Warning Event on the
pod), as the watches report it. The versions already reported are its own."""

from __future__ import annotations

import logging
from collections.abc import Callable

from contract.pods import PodView
from infra.events import EventRecorder, pod_ref

log = logging.getLogger(__name__)

MALFORMED_REASON = "NPUAnnotationMalformed"


class MalformedPods:
    def __init__(self, events: EventRecorder, on_malformed: Callable[[], None]) -> None:
        self._events = events
        self._on_malformed = on_malformed  # counted
        self._reported: dict[str, str] = {}  # pod → the version already reported

    def report(self, pods: list[PodView]) -> None:
        for pod in pods:
            errors = pod.errors()
            if not errors or self._reported.get(pod.key) == pod.resource_version:
                continue
            self._reported[pod.key] = pod.resource_version
            self._on_malformed()
            message = "; ".join(errors)
            log.warning("ignoring chip annotations: %s", message, extra={"pod": pod.key})
            self._events.warn(pod_ref(pod.namespace, pod.name, pod.uid), MALFORMED_REASON, message)
