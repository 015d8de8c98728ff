"""The one view of a pod both sides read: who it is, where, whether it is live, and which
chips it holds, with one definition of each.

- live: not finished (``Succeeded`` / ``Failed``). A terminating pod is live: its containers
  still run, so its chips are not free until it is gone.
- holding: the chips its containers run with: its ``huawei.com/AscendReal``, or for a pod
  consumed by an Allocate whose record is missing or unreadable (another device plugin's),
  the scheduler's chips. When in doubt a chip counts as held.
- assigned: the scheduler's chips of a pod not yet consumed (given, not yet running).
- chips: what it holds or has been given (``holding``, else ``assigned``).

Only a live pod that requests NPUs holds or is given chips: annotations on any other pod
are nobody's chips. A malformed annotation holds nothing and is reported by ``errors``.

The chips are those of the pod's resource: ``huawei.com/Ascend910`` names ``Ascend910-<id>``
chips, ``huawei.com/Ascend310P`` ``Ascend310P-<id>``. A dynamic-vNPU pod
(``huawei.com/npu-core``) holds whole chips only when it was given whole chips; a vNPU takes
part of a chip, which the scheduler's vNPU model counts (``scheduler_core.engine.vnpu``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import InitVar, dataclass, field
from types import MappingProxyType
from typing import TypeVar

from contract.annotations import (
    CONSUMED,
    KEPT_ANNOTATIONS,
    KUBELET_ANNOTATION,
    MAX_UINT64,
    PREDICATE_TIME,
    RANK_INDEX_ANNOTATION,
    REAL_ANNOTATION,
    parse_predicate_time,
    parse_rank,
)
from contract.chip_names import (
    ASCEND310P,
    KIND_OF_RESOURCE,
    RESOURCE_NAME,
    ChipKind,
    InvalidInput,
    parse_chip_list,
)
from contract.groups import GroupRef, group_of, rank_hint
from contract.node_affinity import EVERYWHERE, PodConstraints, pod_constraints
from contract.objects import Obj, npu_request, npu_resources_asked
from contract.vnpu import (
    NPU_CORE_RESOURCE,
    CoreChoice,
    VirtualName,
    parse_core_choice,
    parse_virtual_name,
    vnpu_kind_of,
)

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
T = TypeVar("T")


NO_ERRORS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod as both sides read it. Its annotations are parsed once, when the view is made
    (``__post_init__``), into the fields after ``labels``: no reader parses again, and a
    malformed value is decided here, in one way: it holds nothing, and ``malformed`` says
    what was wrong with it."""

    namespace: str
    name: str
    uid: str = ""
    node: str = ""
    phase: str = "Pending"
    deleting: bool = False
    reason: str = ""
    npu_limit: int = 0
    resource_version: str = ""
    resource: str = RESOURCE_NAME  # the NPU resource it asks for
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    controlled: bool = False  # a controller owns it (makes it again if it is deleted)
    # every NPU resource it asks, init containers included (``objects.npu_resources_asked``)
    asks: tuple[str, ...] = ()
    # Its nodeSelector, required node affinity and tolerations (``node_affinity``).
    constraints: PodConstraints = EVERYWHERE
    # Its spec.schedulerName (the API server defaults an unset one to default-scheduler).
    scheduler: str = "default-scheduler"
    # The pod's whole annotations when ``annotations`` keeps only some (a cache's view):
    # parsed, not kept.
    source: InitVar[Mapping[str, str] | None] = None
    env_rank: InitVar[str | None] = None  # its container's RANK (a Kubeflow training pod)
    recorded: tuple[int, ...] = field(init=False)  # the chips of its AscendReal record
    given: tuple[int, ...] = field(init=False)  # the whole chips the scheduler gave it
    core_choice: CoreChoice | None = field(init=False)  # npu-core: the scheduler's choice
    vnpu: VirtualName | None = field(init=False)  # npu-core: the vNPU its AscendReal names
    kubelet_cores: tuple[str, ...] = field(init=False)  # npu-core: the kubelet's IDs (kltDev)
    # hccl/rankIndex, else the rank its controller gave it (``groups.rank_hint``); None: none,
    # or unreadable
    rank: int | None = field(init=False)
    group: GroupRef | None = field(init=False)  # the job (gang) it names
    predicate_time: int = field(init=False)  # when its devices were chosen (unreadable: last)
    malformed: Mapping[str, str] = field(init=False)  # annotation → what is wrong with it

    def __post_init__(self, source: Mapping[str, str] | None, env_rank: str | None) -> None:
        notes = self.annotations if source is None else source
        errors: dict[str, str] = {}
        claims = self.live and self.npu_limit > 0
        kind = self.kind
        recorded: tuple[int, ...] = ()
        given: tuple[int, ...] = ()
        choice = vnpu = None
        cores: tuple[str, ...] = ()
        if self.resource == NPU_CORE_RESOURCE:
            if NPU_CORE_RESOURCE in notes:  # none until the scheduler has chosen
                choice = _parsed(notes, NPU_CORE_RESOURCE, parse_core_choice, errors)
            real = notes.get(REAL_ANNOTATION, "")
            chips = vnpu_kind_of(real)  # 310P's or (910B / A3 vNPU) 910's
            if "-" in real.split(",")[0].removeprefix(f"{chips.name}-"):  # a vNPU's name
                vnpu = _parsed(notes, REAL_ANNOTATION, parse_virtual_name, errors)
            elif claims:
                recorded = _parsed(notes, REAL_ANNOTATION, _chips_of(chips), errors) or ()
            if claims and choice is not None and choice.template is None:
                given = choice.chips
            cores = tuple(i for i in notes.get(KUBELET_ANNOTATION, "").split(",") if i)
        elif kind is not None:
            read = _chips_of(kind)
            real_chips = _parsed(notes, REAL_ANNOTATION, read, errors) or ()
            given_chips = _parsed(notes, self.resource, read, errors) or ()
            if claims:
                recorded, given = real_chips, given_chips
        rank_text = notes.get(RANK_INDEX_ANNOTATION)
        if rank_text is None:
            rank = rank_hint(self.labels, notes, env_rank)
        else:
            rank = _parsed(notes, RANK_INDEX_ANNOTATION, parse_rank, {})
        try:
            when = parse_predicate_time(notes.get(PREDICATE_TIME, ""))
        except InvalidInput:
            when = MAX_UINT64
        for name, value in (
            ("recorded", recorded),
            ("given", given),
            ("core_choice", choice),
            ("vnpu", vnpu),
            ("kubelet_cores", cores),
            ("rank", rank),
            ("group", group_of(self.namespace, self.labels, notes)),
            ("predicate_time", when),
            ("malformed", MappingProxyType(errors) if errors else NO_ERRORS),
        ):
            object.__setattr__(self, name, value)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def live(self) -> bool:
        return self.phase not in FINISHED_PHASES

    @property
    def kind(self) -> ChipKind | None:
        """The kind of chips its annotations name (npu-core pods: 310P's); None for a static
        vNPU pod, which the kubelet alone gives its device."""
        if self.resource == NPU_CORE_RESOURCE:
            return ASCEND310P
        return KIND_OF_RESOURCE.get(self.resource)

    @property
    def consumed(self) -> bool:
        return self.annotations.get(PREDICATE_TIME) == CONSUMED

    @property
    def holding(self) -> tuple[int, ...]:
        if self.recorded:
            return self.recorded
        return self.given if self.consumed else ()

    @property
    def assigned(self) -> tuple[int, ...]:
        return () if self.consumed else self.given

    @property
    def chips(self) -> tuple[int, ...]:
        return self.holding or self.assigned

    def errors(self) -> list[str]:
        """What is malformed in the pod's chip annotations (nothing, usually)."""
        return [f"{self.key} {key}: {why}" for key, why in self.malformed.items()]


def _chips_of(kind: ChipKind) -> Callable[[str], tuple[int, ...]]:
    return lambda text: parse_chip_list(text, kind=kind)


def _parsed(
    notes: Mapping[str, str], key: str, parse: Callable[[str], T], errors: dict[str, str]
) -> T | None:
    """``parse`` of the annotation ``key`` (absent: parsed as empty); None, with the reason
    in ``errors``, when it is malformed."""
    try:
        return parse(notes.get(key, ""))
    except InvalidInput as bad:
        errors[key] = str(bad)
        return None


def _strings(value: object) -> dict[str, str]:
    """A map of strings from the object (annotations, labels); anything else is dropped."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def pod_view(pod: Obj, keep: Collection[str] | None = None) -> PodView:
    """The pod's view, its annotations parsed; ``keep``: the annotations the view keeps (all
    when None)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    resource, count = npu_request(pod)
    notes = _strings(meta.get("annotations"))
    kept = notes if keep is None else {k: v for k, v in notes.items() if k in keep}
    return PodView(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        reason=str(status.get("reason") or ""),
        npu_limit=count,
        resource_version=str(meta.get("resourceVersion") or ""),
        resource=resource,
        annotations=kept,
        labels=_strings(meta.get("labels")),
        controlled=_controlled(meta.get("ownerReferences")),
        asks=npu_resources_asked(pod),
        constraints=pod_constraints(pod),
        scheduler=sys.intern(
            str((pod.get("spec") or {}).get("schedulerName") or "default-scheduler")
        ),
        source=notes,
        env_rank=_env_rank(pod),
    )


def _controlled(owners: object) -> bool:
    """Whether one of the pod's ``ownerReferences`` is its controller."""
    return isinstance(owners, list) and any(
        isinstance(owner, dict) and owner.get("controller") is True for owner in owners
    )


def _env_rank(pod: Obj) -> str | None:
    """The ``RANK`` a training operator set on the pod's first container."""
    containers = (pod.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers or not isinstance(containers[0], dict):
        return None
    for env in containers[0].get("env") or ():
        if (
            isinstance(env, dict)
            and env.get("name") == "RANK"
            and isinstance(env.get("value"), str)
        ):
            return str(env["value"])
    return None


def cached_pod_view(pod: Obj) -> PodView:
    """The pod's view as a cache keeps it: parsed from all its annotations, keeping only
    those read back (a pod carries kilobytes of others: last-applied configuration, rank
    tables, a user's own)."""
    return pod_view(pod, KEPT_ANNOTATIONS)


def holders_by_node(pods: Iterable[PodView]) -> dict[str, dict[int, str]]:
    """node → chip → the pod that holds it or has been given it."""
    held: dict[str, dict[int, str]] = {}
    for pod in pods:
        if pod.node:
            for chip in pod.chips:
                held.setdefault(pod.node, {})[chip] = pod.key
    return held
