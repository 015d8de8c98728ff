"""The live pods of gangs, as the watches report them, kept gang by gang: those pending,
those bound (their nodes, ranks and annotations, what the ToR states and fault jobs read),
every live member. What the gangs (``gangs``) reserve from, the network (``tor_state``) is
built from and fault jobs (``fault_watch``) are found in; it decides nothing.

A gang is its group's NPU pods: a pod asking no NPU (MindSpore's Scheduler, a verl master)
is placed by the caller without this scheduler, and only counts among the group's pods a
restart deletes. Its members take the ranks their controller gave them (``hccl/rankIndex``):
a Volcano Job whose master asks no NPU numbers its workers from ``replicas(master)`` on
(volcano-sh/volcano ``pkg/controllers/job/plugins/distributed-framework/hcclrank``), the
Ascend Operator gives MindSpore's Scheduler-0 and Worker-0 both 0 (Ascend/mind-cluster
``component/ascend-operator/pkg/controllers/v1/annotation.go`` ``setHcclRankIndex``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from contract.annotations import FAULT_SCHEDULING_LABEL, TOR_AFFINITY_LABEL
from contract.groups import KUBEFLOW_REPLICA_TYPE, KUBEFLOW_WORKER
from contract.pods import PodView
from scheduler_core.engine import tor
from scheduler_core.engine.rescheduling import NEED_VOLCANO_OPE_ANNOTATION, OPE_DELETE, JobPod


@dataclass(frozen=True, slots=True)
class BoundMember:
    """A bound pod of a gang, as the ToR states read it."""

    node: str
    annotations: Mapping[str, str]
    large_model: bool


@dataclass
class GangPods:
    """The live pods of gangs, kept gang by gang."""

    pending: dict[str, list[str]] = field(default_factory=dict)  # gang → unbound pod names
    # gang → (fault-scheduling mode, bound pods whose AscendReal names their chips)
    running: dict[str, tuple[str, list[JobPod]]] = field(default_factory=dict)
    ranks: dict[str, dict[int, str]] = field(default_factory=dict)  # gang → bound rank → node
    bound: dict[str, list[BoundMember]] = field(default_factory=dict)  # gang → bound pods
    members: dict[str, list[PodView]] = field(default_factory=dict)  # gang → live pods
    # gang → the ranks its live NPU pods carry, when each carries one of its own
    given: dict[str, list[int]] = field(default_factory=dict)

    def set_gang(
        self,
        key: str,
        pods: Iterable[PodView],
        labels_of: Callable[[PodView], Mapping[str, str]] = lambda pod: pod.labels,
        *,
        many: bool = True,
    ) -> None:
        """A group's live pods now (in a stable order: a pod without a rank takes its place
        in it as its rank); ``labels_of``: a pod's labels with its job's settings; ``many``:
        the group is a job of several pods (a gang), not one pod's."""
        for table in (
            self.pending,
            self.running,
            self.ranks,
            self.bound,
            self.members,
            self.given,
        ):
            table.pop(key, None)
        given: list[int | None] = []
        for pod in pods:
            if not pod.live:
                continue
            self.members.setdefault(key, []).append(pod)
            if not many or not pod.npu_limit:
                continue
            given.append(pod.rank)
            if not pod.node:
                self.pending.setdefault(key, []).append(pod.name)
                continue
            if (rank := pod.rank) is not None:
                self.ranks.setdefault(key, {})[rank] = pod.node
            labels = labels_of(pod)
            mode = labels.get(FAULT_SCHEDULING_LABEL, "off")
            members = self.running.setdefault(key, (mode, []))[1]
            if (member := job_pod(pod, len(members))) is not None:
                members.append(member)
            large = labels.get(TOR_AFFINITY_LABEL) == tor.LARGE_MODEL
            self.bound.setdefault(key, []).append(BoundMember(pod.node, pod.annotations, large))
        if given and None not in given and len(set(given)) == len(given):
            self.given[key] = sorted(r for r in given if r is not None)

    def slots(self, gang: str, size: int) -> list[int]:
        """The ranks of a gang of ``size`` NPU pods: those its pods carry, when each of as many
        carries its own; else 0 … size − 1 (a pod without one takes any free)."""
        given = self.given.get(gang, [])
        return given if len(given) == size else list(range(size))


def job_pod(pod: PodView, fallback_rank: int) -> JobPod | None:
    """A bound pod of a multi-node job, or None when its AscendReal names no chips."""
    if not pod.recorded or not pod.node:
        return None
    rank = pod.rank
    return JobPod(
        pod.namespace,
        pod.name,
        pod.uid,
        pod.node,
        fallback_rank if rank is None else rank,
        pod.recorded,
        pod.deleting,
        pod.annotations.get(NEED_VOLCANO_OPE_ANNOTATION) == OPE_DELETE,
        pod.labels.get(KUBEFLOW_REPLICA_TYPE) == KUBEFLOW_WORKER,
    )
