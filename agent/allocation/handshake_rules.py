"""The Allocate handshake's decisions, pure: which pending pod an Allocate belongs to, and
whether the chips the scheduler annotated may be handed out (Huawei's device plugin,
``pkg/server/plugin.go Allocate/doWithVolcanoSchedule``).

The kubelet tells the plugin only device IDs. The pod is the one on this node, not
finished, not being deleted, requesting the resource, carrying the scheduler's chip
annotation with as many chips as the kubelet asked for, not yet consumed, and with the
smallest ``predicate-time`` (an unparseable one sorts last).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agent.chips import Chip, NodeChips
from contract.annotations import (
    CHIPS_ANNOTATION,
    CONSUMED,
    KUBELET_ANNOTATION,
    PREDICATE_TIME,
    RANK_TABLE_ANNOTATION,
    REAL_ANNOTATION,
)
from contract.chip_names import InvalidInput, chip_name, parse_chip_name
from contract.objects import FINISHED_PHASES
from contract.rank_table import rank_table

NOT_FOUND = "not get valid pod"


@dataclass(frozen=True, slots=True)
class PodInfo:
    """The parts of a pod the handshake reads."""

    namespace: str
    name: str
    uid: str = ""
    phase: str = "Pending"
    deleting: bool = False
    reason: str = ""
    npu_limit: int = 0
    resource_version: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def live(self) -> bool:
        return self.phase not in FINISHED_PHASES and not self.deleting

    @property
    def consumed(self) -> bool:
        return self.annotations.get(PREDICATE_TIME) == CONSUMED


class ChipsRefused(ValueError):
    """The annotated chips cannot be handed out; the message says which and why, and
    ``holder`` names the pod that holds a chip when that is the reason."""

    def __init__(self, message: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


def predicate_time(pod: PodInfo) -> int:
    text = pod.annotations.get(PREDICATE_TIME, "")
    return int(text) if text.isdigit() and int(text) < 2**64 else 2**64 - 1


def annotated_count(pod: PodInfo) -> int:
    text = pod.annotations.get(CHIPS_ANNOTATION, "")
    return len(text.split(",")) if text else 0


def is_candidate(pod: PodInfo, count: int) -> bool:
    return (
        pod.live
        and pod.reason != "UnexpectedAdmissionError"
        and pod.npu_limit > 0
        and CHIPS_ANNOTATION in pod.annotations
        and not pod.consumed
        and annotated_count(pod) == count
    )


def pick_pod(pods: Sequence[PodInfo], count: int) -> PodInfo | None:
    """The pending pod with the smallest predicate-time; ties keep list order."""
    candidates = [p for p in pods if is_candidate(p, count)]
    return min(candidates, key=predicate_time) if candidates else None


def parse_chips(text: str, what: str) -> list[int]:
    try:
        chips = [parse_chip_name(name.strip()) for name in text.split(",") if name.strip()]
    except InvalidInput as bad:
        raise ChipsRefused(f"{what}: {bad}") from None
    if len(set(chips)) != len(chips):
        raise ChipsRefused(f"{what}: names a chip twice ({text})")
    return chips


def held_chips(pods: Iterable[PodInfo], other_than: str = "") -> dict[int, str]:
    """Chips live pods hold: their ``AscendReal``; for a consumed pod whose AscendReal is
    missing (consumed by another device plugin) or unreadable, the scheduler's chips. When
    in doubt a chip counts as held: handing it out twice is the failure that kills jobs."""
    held: dict[int, str] = {}
    for pod in pods:
        if not pod.live or pod.key == other_than:
            continue
        records = [pod.annotations.get(REAL_ANNOTATION, "")]
        if pod.consumed:
            records.append(pod.annotations.get(CHIPS_ANNOTATION, ""))
        for text in records:
            try:
                chips = parse_chips(text, pod.key)
            except ChipsRefused:
                continue
            if chips:
                for chip in chips:
                    held.setdefault(chip, pod.key)
                break
    return held


def reserved_chips(pods: Iterable[PodInfo]) -> set[int]:
    """Chips the scheduler gave to pods not yet admitted: not free, though not held yet."""
    reserved: set[int] = set()
    for pod in pods:
        if pod.live and not pod.consumed and CHIPS_ANNOTATION in pod.annotations:
            try:
                reserved.update(parse_chips(pod.annotations[CHIPS_ANNOTATION], pod.key))
            except ChipsRefused:
                continue
    return reserved


def check_chips(pod: PodInfo, node: NodeChips, held: Mapping[int, str]) -> list[Chip]:
    """The annotated chips, if every one exists here, is healthy and is not held."""
    wanted = parse_chips(pod.annotations.get(CHIPS_ANNOTATION, ""), f"{pod.key} {CHIPS_ANNOTATION}")
    by_id = {c.id: c for c in node.chips}
    chips = []
    for chip_id in wanted:
        chip = by_id.get(chip_id)
        if chip is None:
            raise ChipsRefused(f"{pod.key}: {chip_name(chip_id)} does not exist on this node")
        if not chip.healthy:
            raise ChipsRefused(f"{pod.key}: {chip_name(chip_id)} is unhealthy")
        if chip_id in held:
            raise ChipsRefused(
                f"{pod.key}: {chip_name(chip_id)} is held by {held[chip_id]}", holder=held[chip_id]
            )
        chips.append(chip)
    return chips


def consumed_annotations(
    pod: PodInfo, chips: Sequence[Chip], kubelet_ids: Sequence[str], server_id: str
) -> dict[str, str]:
    """What Allocate writes on the pod: consumed, and the record of the chips."""
    return {
        PREDICATE_TIME: CONSUMED,
        REAL_ANNOTATION: ",".join(chip_name(c.id) for c in chips),
        KUBELET_ANNOTATION: ",".join(kubelet_ids),
        RANK_TABLE_ANNOTATION: rank_table(pod.name, server_id, ((c.id, c.ip) for c in chips)),
    }
