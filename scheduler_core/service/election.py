"""The election of the service's leader: the Lease its replicas elect on, and the label
the leader's pod carries so the Service sends the verbs to it alone (docs/ha.md). Apart from
the wiring so that where a replica learns who it is (the downward API) and what the label is
are read in one place."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from infra.kube.port import KubeGateway
from infra.leader import LeaderElector, PodLabel, Timing

log = logging.getLogger(__name__)

# The leader's pod carries it; the Service selects it (daemonset/base/scheduler-deployment.yaml).
LEADER_LABEL = ("ascend-npu.io/scheduler-role", "leader")


@dataclass(frozen=True, slots=True)
class PodRef:
    """This replica's own pod."""

    namespace: str
    name: str

    @staticmethod
    def from_environment(environ: Mapping[str, str] = os.environ) -> PodRef | None:
        """The pod named by the downward API's ``POD_NAME`` and ``POD_NAMESPACE`` (the
        Deployment sets both), None outside a pod; ValueError when only one is set."""
        name, namespace = environ.get("POD_NAME", ""), environ.get("POD_NAMESPACE", "")
        if bool(name) != bool(namespace):
            missing = "POD_NAMESPACE" if name else "POD_NAME"
            raise ValueError(f"{missing} is not set: set POD_NAME and POD_NAMESPACE together")
        return PodRef(namespace, name) if name else None


@dataclass(frozen=True, slots=True)
class Election:
    """The Lease the replicas of the service elect their leader on, and the pod the leader
    labels (None: none, outside a pod)."""

    namespace: str = "kube-system"
    name: str = "ascend-npu-scheduler"
    timing: Timing = field(default_factory=Timing)
    holder: str | None = None  # default: <hostname>_<uuid>
    pod: PodRef | None = None


def elector(
    gateway: KubeGateway, election: Election, on_started: Callable[[], None]
) -> LeaderElector:
    """The elector of ``election``, which calls ``on_started`` when this replica leads."""
    label = None
    if election.pod is None:
        log.warning(
            "POD_NAME and POD_NAMESPACE are not set (not in a pod): the leader labels no "
            "pod, so a Service selecting %s=%s finds none; find the leader by GET /leader",
            *LEADER_LABEL,
        )
    else:
        label = PodLabel(election.pod.namespace, election.pod.name, *LEADER_LABEL)
    return LeaderElector(
        gateway,
        election.namespace,
        election.name,
        on_started=on_started,
        timing=election.timing,
        holder=election.holder,
        label=label,
    )
