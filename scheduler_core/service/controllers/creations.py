"""The failed-creation controller: a pod the kubelet failed because its vNPU could not be
made is deleted at once, so that its controller makes it again (upstream's ``chipDyCutErr``
recovery). Which pods failed is the state's (``ExtenderState.failed_creations``); the last
error deleting each is this controller's, to log a failure once."""

from __future__ import annotations

import logging
from collections.abc import Callable

from infra.events import pod_ref
from infra.kube.port import KubeError, KubeGateway, NotFound
from scheduler_core.service.controllers.deletions import delete_marked
from scheduler_core.service.state.extender_state import ExtenderState

log = logging.getLogger(__name__)

CHIP_CUT_ERROR = "chipDyCutErr"  # upstream's reason for deleting a pod whose vNPU failed


class FailedCreations:
    def __init__(
        self, gateway: KubeGateway, state: ExtenderState, on_deleted: Callable[[], None]
    ) -> None:
        self._gateway = gateway
        self._state = state
        self._on_deleted = on_deleted  # counted as a vNPU restart
        self._errors: dict[str, str] = {}  # pod → the last error deleting it

    def run(self) -> None:
        for pod in self._state.failed_creations():
            try:
                delete_marked(
                    self._gateway,
                    pod.namespace,
                    pod.name,
                    pod.uid,
                    grace_seconds=0,
                    reason=CHIP_CUT_ERROR,
                )
            except NotFound:
                self._errors.pop(pod.key, None)
                continue  # already gone (or replaced: the UID precondition keeps the new one)
            except KubeError as failed:
                if self._errors.get(pod.key) != str(failed):
                    log.warning("pod %s (vNPU not made) not deleted: %s", pod.key, failed)
                self._errors[pod.key] = str(failed)
                continue
            self._errors.pop(pod.key, None)
            self._on_deleted()
            log.warning("deleted %s: its vNPU could not be made", pod.key, extra={"pod": pod.key})
            message = f"deleted: the kubelet failed it ({pod.reason}), its vNPU could not be made"
            self._state.events.warn(
                pod_ref(pod.namespace, pod.name, pod.uid), CHIP_CUT_ERROR, message
            )
