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

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from contract.annotations import (
    CONSUMED,
    KEPT_ANNOTATIONS,
    PREDICATE_TIME,
    RANK_INDEX_ANNOTATION,
    REAL_ANNOTATION,
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
from contract.objects import Obj, npu_request
from contract.vnpu import NPU_CORE_RESOURCE, parse_core_choice

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class PodView:
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
    def rank(self) -> int | None:
        """Its ``hccl/rankIndex`` (None when it has none, or an unreadable one)."""
        text = self.annotations.get(RANK_INDEX_ANNOTATION)
        if text is None:
            return None
        try:
            return parse_rank(text)
        except InvalidInput:
            return None

    @property
    def recorded(self) -> tuple[int, ...]:
        """The chips of its ``huawei.com/AscendReal`` record."""
        if not self.live or self.npu_limit <= 0 or self.kind is None:
            return ()
        return _chips(self.annotations.get(REAL_ANNOTATION, ""), self.kind)

    @property
    def holding(self) -> tuple[int, ...]:
        if not self.live or self.npu_limit <= 0:
            return ()
        real = self.recorded
        if real:
            return real
        return self._given() if self.consumed else ()

    @property
    def assigned(self) -> tuple[int, ...]:
        if not self.live or self.npu_limit <= 0 or self.consumed:
            return ()
        return self._given()

    def _given(self) -> tuple[int, ...]:
        """The whole chips the scheduler gave it."""
        if self.resource == NPU_CORE_RESOURCE:
            try:
                choice = parse_core_choice(self.annotations.get(NPU_CORE_RESOURCE, ""))
            except InvalidInput:
                return ()
            return choice.chips if choice.template is None else ()
        kind = self.kind
        return () if kind is None else _chips(self.annotations.get(self.resource, ""), kind)

    @property
    def chips(self) -> tuple[int, ...]:
        return self.holding or self.assigned

    def errors(self) -> list[str]:
        """What is malformed in the pod's chip annotations (nothing, usually)."""
        found: list[str] = []
        kind = self.kind
        if kind is None or self.resource == NPU_CORE_RESOURCE:
            return found
        for key in (REAL_ANNOTATION, self.resource):
            try:
                parse_chip_list(self.annotations.get(key, ""), kind=kind)
            except InvalidInput as bad:
                found.append(f"{self.key} {key}: {bad}")
        return found


def _chips(text: str, kind: ChipKind) -> tuple[int, ...]:
    try:
        return parse_chip_list(text, kind=kind)
    except InvalidInput:
        return ()


def _strings(value: object) -> dict[str, str]:
    """A map of strings from the object (annotations, labels); anything else is dropped."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def pod_view(pod: Obj) -> PodView:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    resource, count = npu_request(pod)
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
        annotations=_strings(meta.get("annotations")),
        labels=_strings(meta.get("labels")),
    )


def cached_pod_view(pod: Obj) -> PodView:
    """The pod's view as a cache keeps it: only the annotations read back (a pod carries
    kilobytes of others: last-applied configuration, rank tables, a user's own)."""
    view = pod_view(pod)
    kept = {k: v for k, v in view.annotations.items() if k in KEPT_ANNOTATIONS}
    return dataclasses.replace(view, annotations=kept)


def holders_by_node(pods: Iterable[PodView]) -> dict[str, dict[int, str]]:
    """node → chip → the pod that holds it or has been given it."""
    held: dict[str, dict[int, str]] = {}
    for pod in pods:
        if pod.node:
            for chip in pod.chips:
                held.setdefault(pod.node, {})[chip] = pod.key
    return held
