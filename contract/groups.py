"""Which job a pod belongs to, and its rank in it, as the ecosystem's controllers write them.

A pod names its group (gang) in one of four ways, read in this order:

1. Volcano: annotation ``scheduling.k8s.io/group-name`` → a ``scheduling.volcano.sh/v1beta1``
   PodGroup in the pod's namespace (Volcano's job controller names it ``<job>-<uid>`` and
   copies the job's labels and annotations onto it: ``pkg/controllers/job``); MindCluster's
   AscendJob and Kubeflow jobs under Volcano land here too.
2. scheduler-plugins coscheduling: label ``scheduling.x-k8s.io/pod-group`` → a
   ``scheduling.x-k8s.io/v1alpha1`` PodGroup (Kubeflow, JobSet, LeaderWorkerSet under
   kube-scheduler).
3. Kueue's plain pod groups: label ``kueue.x-k8s.io/pod-group-name``, its size in the
   annotation ``kueue.x-k8s.io/pod-group-total-count``.
4. This project's own label ``ascend.npu/gang`` and annotation ``ascend.npu/gang-size``.

A pod's rank, where nothing wrote ``hccl/rankIndex`` (MindCluster's operator does, master
first; ascend-for-volcano ``plugin/job.go`` falls back to the container's ``VC_TASK_INDEX``):
a StatefulSet pod's ordinal, Volcano's ``volcano.sh/task-index``, a Kubeflow training pod's
``RANK`` (the operator's: master 0, workers after it) or its replica index, an indexed Job's
``batch.kubernetes.io/job-completion-index``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from contract.annotations import GANG_LABEL, GANG_SIZE_ANNOTATION

VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"

VOLCANO, COSCHEDULING, KUEUE, OWN = "volcano", "coscheduling", "kueue", "ascend"

# The PodGroup APIs, by source: (API group, version); their collections are ``podgroups``.
PODGROUP_APIS = {
    VOLCANO: ("scheduling.volcano.sh", "v1beta1"),
    COSCHEDULING: ("scheduling.x-k8s.io", "v1alpha1"),
}


def podgroups(source: str) -> str:
    """The collection of a source's PodGroups as a ``Selection`` kind: ``plural.group/version``."""
    group, version = PODGROUP_APIS[source]
    return f"podgroups.{group}/{version}"


STATEFULSET_POD_LABEL = "statefulset.kubernetes.io/pod-name"
VOLCANO_TASK_INDEX = "volcano.sh/task-index"
KUBEFLOW_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KUBEFLOW_WORKER = "worker"  # the replica type training-operator gives its workers
KUBEFLOW_REPLICA_INDEX = "training.kubeflow.org/replica-index"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True, slots=True)
class GroupRef:
    """The group a pod names: where it is described (``source``), its namespace and name;
    ``size`` when the pod itself says it (Kueue's total count, this project's gang size)."""

    source: str
    namespace: str
    name: str
    size_text: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def described_by_object(self) -> bool:
        """Its size and settings are in a PodGroup object."""
        return self.source in (VOLCANO, COSCHEDULING)

    def describe(self) -> str:
        kinds = {
            VOLCANO: "Volcano PodGroup",
            COSCHEDULING: "coscheduling PodGroup",
            KUEUE: "Kueue pod group",
            OWN: f"gang ({GANG_LABEL})",
        }
        return f"{kinds[self.source]} {self.key}"


def group_of(
    namespace: str, labels: Mapping[str, str], annotations: Mapping[str, str]
) -> GroupRef | None:
    """The group the pod names, by the first of the four ways it uses."""
    if name := annotations.get(VOLCANO_GROUP_ANNOTATION):
        return GroupRef(VOLCANO, namespace, name)
    if name := labels.get(COSCHEDULING_GROUP_LABEL):
        return GroupRef(COSCHEDULING, namespace, name)
    if name := labels.get(KUEUE_GROUP_LABEL):
        return GroupRef(KUEUE, namespace, name, annotations.get(KUEUE_TOTAL_ANNOTATION))
    if name := labels.get(GANG_LABEL):
        return GroupRef(OWN, namespace, name, annotations.get(GANG_SIZE_ANNOTATION, "1"))
    return None


MASTER_TYPES = frozenset({"master", "chief", "launcher"})


def rank_hint(
    labels: Mapping[str, str], annotations: Mapping[str, str], env_rank: str | None
) -> int | None:
    """The rank the pod's controller gave it, where it wrote no ``hccl/rankIndex``; None
    when none did (or the value is not a number)."""
    if ordinal_of := labels.get(STATEFULSET_POD_LABEL):
        return _index(ordinal_of.rpartition("-")[2])
    if (index := labels.get(VOLCANO_TASK_INDEX) or annotations.get(VOLCANO_TASK_INDEX)) is not None:
        return _index(index)
    if KUBEFLOW_REPLICA_TYPE in labels:
        if env_rank is not None:
            return _index(env_rank)
        replica = _index(labels.get(KUBEFLOW_REPLICA_INDEX, ""))
        if labels[KUBEFLOW_REPLICA_TYPE].lower() in MASTER_TYPES or replica is None:
            return replica
        return replica + 1  # workers after the one master (training-operator's RANK)
    index = labels.get(JOB_COMPLETION_INDEX) or annotations.get(JOB_COMPLETION_INDEX)
    return None if index is None else _index(index)


def _index(text: str) -> int | None:
    return int(text) if text.isdigit() and len(text) <= 6 else None
