"""Jobs as the ecosystem's controllers describe them: a pod's group (``contract.groups``), the
group's size, and the job's settings, with no change to the user's YAML.

Settings are read as Huawei's Volcano plugin reads them (ascend-for-volcano ``plugin/job.go``:
``getJobLabelFromVcJob`` starts from the PodGroup's labels and adds every task's; a key whose
values differ is joined as ``a|b``, which no setting accepts, so such a job is refused here,
naming both sources; ``initCommonJob`` takes the job's annotations, ``sp-block`` among them,
from the PodGroup). A Volcano Job's and an AscendJob's labels reach only their PodGroup (their
controllers copy them there), a Deployment's only its pods, a Kubeflow v1 job's PodGroup has
annotations but no labels: each is read where it is. A pod's own annotation is the fallback
for ``sp-block`` and ``huawei.com/schedule_policy``.

A group's pods that ask no NPU (MindSpore's ``Scheduler``, verl/Ray's ``master``) are placed by
the caller alone (kube-scheduler and Volcano never send them to the extender under
``managedResources``): the gang this scheduler reserves is the group's NPU pods, its size the
PodGroup's ``minMember`` (which counts every pod) less the NPU-less pods seen, as upstream
counts ``NPUTaskNum`` (ascend-for-volcano ``plugin/job.go`` ``setNPUTaskNumInJob``) while
Volcano's own gang plugin still waits for all ``minMember`` pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from contract.annotations import (
    FAULT_RETRY_LABEL,
    FAULT_SCHEDULING_LABEL,
    RING_CONTROLLER_LABEL,
    SCHEDULER_TASK_SPEC,
    SETTING_ANNOTATIONS,
    SKIP_ASCEND_PLUGIN_ANNOTATION,
    SKIP_ENABLED,
    SUPER_POD_AFFINITY_LABEL,
    TASK_SPEC_ANNOTATION,
    TOR_AFFINITY_LABEL,
    parse_gang_size,
)
from contract.chip_names import InvalidInput
from contract.groups import COSCHEDULING, KUEUE_TOTAL_ANNOTATION, OWN, VOLCANO, GroupRef
from contract.objects import Obj
from contract.pods import PodView
from scheduler_core.engine import locality
from scheduler_core.engine.rescheduling import POD_RESCHEDULING_LABEL, PROCESS_RECOVER_LABEL

# The labels that are job settings, merged over the PodGroup and every pod of the job.
SETTING_LABELS = (
    TOR_AFFINITY_LABEL,
    FAULT_SCHEDULING_LABEL,
    FAULT_RETRY_LABEL,
    POD_RESCHEDULING_LABEL,
    PROCESS_RECOVER_LABEL,
    SUPER_POD_AFFINITY_LABEL,
    RING_CONTROLLER_LABEL,
)
NONE: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodGroupInfo:
    """The fields read of a PodGroup (either API): ``minMember`` and its labels and
    annotations; ``error`` says what is wrong with a malformed one (it then holds nothing)."""

    min_member: int = 1
    labels: Mapping[str, str] = field(default_factory=lambda: NONE)
    annotations: Mapping[str, str] = field(default_factory=lambda: NONE)
    error: str = ""
    # Its first owner's name: the job, after which Volcano's plugin names the job's
    # reset-config (ascend-for-volcano ``common/util/job.go`` ReferenceNameOfJob).
    owner: str = ""


def podgroup_info(obj: Obj) -> PodGroupInfo:
    """A PodGroup as a watch delivers it; never raises (a malformed one carries its error)."""
    meta = obj.get("metadata")
    spec = obj.get("spec")
    if not isinstance(meta, dict) or not isinstance(spec, dict):
        return PodGroupInfo(error="its metadata or spec is not an object")
    minimum = spec.get("minMember", 1)
    if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
        return PodGroupInfo(error=f"spec.minMember {minimum!r} is not a whole number ≥ 1")
    try:
        size = parse_gang_size(str(minimum))
    except InvalidInput as bad:
        return PodGroupInfo(error=str(bad))
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    if not (_strings(labels) and _strings(annotations)):
        return PodGroupInfo(error="its labels or annotations are not strings")
    owners = meta.get("ownerReferences")
    first = owners[0] if isinstance(owners, list) and owners else {}
    owner = first.get("name") if isinstance(first, dict) else None
    return PodGroupInfo(
        size,
        MappingProxyType({k: labels[k] for k in SETTING_LABELS if k in labels}),
        MappingProxyType({k: annotations[k] for k in SETTING_ANNOTATIONS if k in annotations}),
        owner=owner if isinstance(owner, str) else "",
    )


def _strings(values: object) -> bool:
    return isinstance(values, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in values.items()
    )


@dataclass(frozen=True, slots=True)
class JobSettings:
    """What a pod's job says: its gang (None: a job of one pod) and size, the pod's labels
    and annotations with the job's settings in them; ``refusal`` when the job cannot be
    placed as it is described, ``waiting`` when part of its description has not arrived."""

    gang: str | None = None  # the group's name, in the pod's namespace
    size: int = 1  # its NPU pods: the group's size less the pods seen asking no NPU
    labels: Mapping[str, str] = field(default_factory=lambda: NONE)
    annotations: Mapping[str, str] = field(default_factory=lambda: NONE)
    refusal: str = ""
    waiting: str = ""
    # Its size is stated by a PodGroup object (Volcano's or coscheduling's ``minMember``),
    # which its controller wrote and RBAC and the queue govern, not only claimed by its pods'
    # labels or annotations (``ascend.npu/gang-size``, Kueue's total count): only such a
    # gang may hold chips while it waits (``gangs.plan_holds``).
    size_stated: bool = False
    # Its pods asking no NPU without a mark MindCluster's A3 handlers accept such a role by
    # (``unmarked_roles``): an A3 job with one is refused (``a3_role_refusal``).
    unmarked: tuple[str, ...] = ()

    def pod_labels(self, pod: PodView) -> Mapping[str, str]:
        """The pod's labels with its job's settings (its own, where the job cannot be
        read)."""
        return pod.labels if self.refusal or self.waiting else self.labels

    def labels_of(self, pod: PodView) -> Mapping[str, str]:
        """Another pod of the same job: its labels with this job's settings (its own, where
        the job cannot be read)."""
        if self.refusal or self.waiting:
            return pod.labels
        return {**pod.labels, **{k: self.labels[k] for k in SETTING_LABELS if k in self.labels}}


@dataclass
class JobDirectory:
    """The PodGroups of the APIs the cluster serves (``sources``), and the settings of any
    pod's job from them and the job's other pods."""

    sources: frozenset[str] = frozenset()
    groups: dict[tuple[str, str], PodGroupInfo] = field(default_factory=dict)

    def set_group(self, source: str, key: str, info: PodGroupInfo | None) -> None:
        if info is None:
            self.groups.pop((source, key), None)
        else:
            self.groups[(source, key)] = info

    def settings(self, pod: PodView, members: Iterable[PodView] = ()) -> JobSettings:
        """The job of ``pod``; ``members``: the live pods of its group (itself among them or
        not)."""
        group = pod.group
        if group is None:
            return JobSettings(labels=pod.labels, annotations=pod.annotations)
        described = self._described(group)
        if isinstance(described, JobSettings):
            return described
        size, info = described
        others = [m for m in members if m.key != pod.key]
        refusal = _uneven(group, pod, others)
        idle = [p for p in (pod, *others) if p.npu_limit == 0]
        size = max(1, size - len(idle))
        labels, conflict = _merged_labels(group, info, pod, others)
        annotations = dict(pod.annotations)
        annotations.update({k: v for k, v in info.annotations.items()})
        # A group of several pods is a gang; this project's own label makes one even of one
        # pod (its network settings checked as a gang's, as they always were), and so does a
        # SuperPoD job of one pod: its node is chosen as upstream's SuperPoD handler chooses a
        # one-task job's (``locality.picks_lone_node``; ``gangs.reserve``), not left to the
        # scheduler's draw among equal scores.
        many = size > 1 or group.source == OWN or locality.picks_lone_node(annotations)
        return JobSettings(
            group.name if many else None,
            size,
            labels,
            annotations,
            refusal or conflict,
            size_stated=group.described_by_object and group.source in self.sources,
            unmarked=unmarked_roles(idle),
        )

    def job_name(self, gang_key: str) -> str:
        """The name of a gang's job: its PodGroup's owner, else the gang's own name."""
        for (_, key), info in self.groups.items():
            if key == gang_key and info.owner:
                return info.owner
        return gang_key.split("/", 1)[-1]

    def _described(self, group: GroupRef) -> tuple[int, PodGroupInfo] | JobSettings:
        """The group's size and PodGroup, or the settings of a group that cannot be read."""
        if not group.described_by_object:
            try:
                return parse_gang_size(group.size_text or ""), PodGroupInfo()
            except InvalidInput as bad:
                what = KUEUE_TOTAL_ANNOTATION if group.size_text is not None else "size"
                return JobSettings(refusal=f"{group.describe()}: {what}: {bad}")
        if group.source not in self.sources:
            # That API is not served: the pod's reference leads nowhere, and the pod is a job
            # of its own (its labels still count).
            return 1, PodGroupInfo()
        info = self.groups.get((group.source, group.key))
        if info is None:
            return JobSettings(waiting=f"{group.describe()} has not been seen yet")
        if info.error:
            return JobSettings(refusal=f"{group.describe()} is malformed: {info.error}")
        return info.min_member, info


def unmarked_roles(idle: Iterable[PodView]) -> tuple[str, ...]:
    """The pods asking no NPU that carry neither ``volcano.sh/task-spec: scheduler`` nor
    ``huawei.com/skip-ascend-plugin: enabled``, by name."""
    marks = (
        (TASK_SPEC_ANNOTATION, SCHEDULER_TASK_SPEC),
        (SKIP_ASCEND_PLUGIN_ANNOTATION, SKIP_ENABLED),
    )
    return tuple(
        sorted(p.name for p in idle if not any(p.annotations.get(k) == v for k, v in marks))
    )


def a3_role_refusal(unmarked: tuple[str, ...], expected: str) -> str:
    """MindCluster's A3 handlers (``module910a3x16/frame.go``, ``superpod/frame.go``
    ``CheckTaskNPU``) pass a task of no NPU only with one of those marks; any other fails the
    job in their words (``TaskValidateHelper.TaskValidResult``), ``expected`` the handler's."""
    if not unmarked:
        return ""
    actual = "".join(f"task<{name}> req npu: 0" for name in unmarked)
    return f"expected: {expected}, actual: {actual}, "


def _uneven(group: GroupRef, pod: PodView, others: list[PodView]) -> str:
    """Why a group's NPU pods cannot be one job: they ask different counts (its pods asking
    no NPU are placed without this scheduler, as upstream's ``ValidNPUJob`` skips them)."""
    counts = {p.npu_limit for p in (pod, *others)}
    if len(counts - {0}) > 1:
        asked = " and ".join(str(c) for c in sorted(counts - {0}))
        return f"{group.describe()}: its pods ask for {asked} NPUs; one job, one count"
    return ""


def _merged_labels(
    group: GroupRef, info: PodGroupInfo, pod: PodView, others: list[PodView]
) -> tuple[Mapping[str, str], str]:
    """The pod's labels with the job's settings: the PodGroup's, then every pod's; a setting
    whose values differ (not only by case, as upstream's ``isSelectorContains``) refuses the
    job, naming both sources."""
    kind = "PodGroup" if group.source in (VOLCANO, COSCHEDULING) else "group"
    merged: dict[str, tuple[str, str]] = {
        k: (v, f"{kind} {group.key}") for k, v in info.labels.items()
    }
    for member in (pod, *others):
        for key in SETTING_LABELS:
            value = member.labels.get(key)
            if value is None:
                continue
            seen = merged.setdefault(key, (value, f"pod {member.name}"))
            if seen[0].lower() != value.lower():
                return pod.labels, (
                    f"{group.describe()}: label {key} is {seen[0]!r} on {seen[1]} and "
                    f"{value!r} on pod {member.name}; one job, one setting"
                )
    labels = dict(pod.labels)
    labels.update({k: v for k, (v, _) in merged.items()})
    return labels, ""
