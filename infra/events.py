"""Warning Events on pods: where a user looks first (``kubectl describe pod``)."""

from __future__ import annotations

import logging

from contract.pods import PodView
from infra.kube.port import KubeError, KubeGateway

log = logging.getLogger(__name__)


def warn(gateway: KubeGateway, pod: PodView, reason: str, message: str, component: str) -> None:
    """Record a Warning Event on the pod; a failure to record it is only logged."""
    event = {
        "metadata": {"generateName": f"{pod.name}.", "namespace": pod.namespace},
        "involvedObject": {
            "kind": "Pod",
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": component},
    }
    try:
        gateway.create_event(pod.namespace, event)
    except KubeError as failed:
        log.warning("could not record an event on %s: %s", pod.key, failed)
