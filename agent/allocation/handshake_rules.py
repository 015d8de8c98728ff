"""The Allocate handshake's decisions, pure, on pods whose annotations were parsed on arrival
(``PodView``): which pending pod an Allocate belongs to, and whether the chips the scheduler
annotated may be handed out (Huawei's device plugin,
``pkg/server/plugin.go Allocate/doWithVolcanoSchedule``).

The kubelet tells the plugin only device IDs. The pod is the one on this node, not
finished, not being deleted, requesting the resource, carrying the scheduler's chip
annotation with as many chips of this node as the kubelet asked for, not yet consumed, and
with the smallest ``predicate-time`` (an unparseable one sorts last).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from chip_drivers.chips import Chip, NodeChips
from contract.annotations import (
    CONSUMED,
    KUBELET_ANNOTATION,
    PREDICATE_TIME,
    REAL_ANNOTATION,
)
from contract.chip_names import chip_name, format_chip_list
from contract.pods import PodView
from contract.rank_table import RankDevice, ServerPlace, rank_table, rank_table_annotation

NOT_FOUND = "not get valid pod"


class ChipsRefused(ValueError):
    """The annotated chips cannot be handed out; the message says which and why, and
    ``holder`` names the pod that holds a chip when that is the reason."""

    def __init__(self, message: str, holder: str | None = None) -> None:
        super().__init__(message)
        self.holder = holder


def pending(pod: PodView, resource: str) -> bool:
    """The pod waits for an Allocate of ``resource``: live, not being deleted, not refused
    by the kubelet, requesting it, given its devices by the scheduler, not yet consumed."""
    return (
        pod.live
        and not pod.deleting
        and pod.reason != "UnexpectedAdmissionError"
        and pod.npu_limit > 0
        and pod.resource == resource
        and resource in pod.annotations
        and not pod.consumed
    )


def unchosen(pods: Iterable[PodView], resource: str) -> list[PodView]:
    """The pods of this node that wait for an Allocate of ``resource`` (asked by any of their
    containers, init containers included) but carry no choice of the scheduler (its
    ``resource`` annotation and ``predicate-time``): put on the node by
    someone else (``spec.nodeName`` set at creation, another scheduler). The kubelet does not
    say which pod an Allocate is for, so while one waits no Allocate of ``resource`` can be
    told apart from its own: handing out another pod's chips would give them to it.

    Our schedulers write the choice before or with the binding (the extender's Binding
    carries the annotations, which the API server copies onto the pod with ``nodeName`` —
    kubernetes/kubernetes pkg/registry/core/pod/storage/storage.go ``setPodNodeAndMetadata``;
    on the Volcano path they are patched before Volcano binds), so a pod of ours is never
    seen on its node without them."""
    return [
        p
        for p in pods
        if p.live
        and not p.deleting
        and p.reason != "UnexpectedAdmissionError"
        and resource in p.asks
        and not p.consumed
        and (resource not in p.annotations or PREDICATE_TIME not in p.annotations)
    ]


def pick_pending(
    pods: Iterable[PodView], resource: str, count: int, size: Callable[[PodView], int | None]
) -> PodView | None:
    """The pending pod of ``resource`` whose claim accounts for ``count`` kubelet devices
    (``size``: None when its claim is not one this node can serve), with the smallest
    predicate-time (an unreadable one sorts last); ties keep list order."""
    found = [p for p in pods if pending(p, resource) and size(p) == count]
    return min(found, key=lambda p: p.predicate_time) if found else None


def misfit(pod: PodView, count: int, node: NodeChips) -> str | None:
    """Why a waiting pod's chips cannot be an Allocate of ``count`` chips here (None: they
    can, or they are for an Allocate of another size). A pod whose annotation is malformed
    or names chips this node lacks is nobody's Allocate: it harms only itself."""
    kind = node.kind
    bad = pod.malformed.get(kind.resource)
    if bad is not None:
        return f"{pod.key} {kind.resource}: {bad}"
    if len(pod.given) != count:
        return None
    ids = {c.id for c in node.chips}
    lacking = [c for c in pod.given if c not in ids]
    if lacking:
        return f"{pod.key}: {chip_name(lacking[0], kind)} does not exist on this node"
    return None


def chip_claim(node: NodeChips) -> Callable[[PodView], int | None]:
    """How many chips a pod's claim is, when this node can serve it."""

    def size(pod: PodView) -> int | None:
        return None if misfit(pod, len(pod.given), node) is not None else len(pod.given)

    return size


def misfits(pods: Iterable[PodView], count: int, node: NodeChips) -> list[tuple[PodView, str]]:
    """The waiting pods passed over for an Allocate of ``count`` chips, and why."""
    found = []
    for pod in pods:
        if pending(pod, node.kind.resource) and (why := misfit(pod, count, node)) is not None:
            found.append((pod, why))
    return found


def held_chips(pods: Iterable[PodView], other_than: str = "") -> dict[int, str]:
    """Chips live pods hold (``PodView.holding``): handing one out twice is the failure that
    kills jobs."""
    held: dict[int, str] = {}
    for pod in pods:
        if pod.key != other_than:
            for chip in pod.holding:
                held.setdefault(chip, pod.key)
    return held


def reserved_chips(pods: Iterable[PodView]) -> set[int]:
    """Chips the scheduler gave to pods not yet admitted: not free, though not held yet."""
    return {chip for pod in pods for chip in pod.assigned}


def check_chips(pod: PodView, node: NodeChips, held: Mapping[int, str]) -> list[Chip]:
    """The annotated chips, if every one exists here, is healthy and is not held."""
    kind = node.kind
    key = kind.resource
    bad = pod.malformed.get(key)
    if bad is not None:
        raise ChipsRefused(f"{pod.key} {key}: {bad}")
    by_id = {c.id: c for c in node.chips}
    chips = []
    for chip_id in pod.given:
        chip = by_id.get(chip_id)
        name = chip_name(chip_id, kind)
        if chip is None:
            raise ChipsRefused(f"{pod.key}: {name} does not exist on this node")
        if not chip.healthy:
            raise ChipsRefused(f"{pod.key}: {name} is unhealthy")
        if chip_id in held:
            raise ChipsRefused(
                f"{pod.key}: {name} is held by {held[chip_id]}", holder=held[chip_id]
            )
        chips.append(chip)
    return chips


def consumed_record(real: str, kubelet_ids: Sequence[str]) -> dict[str, str]:
    """What every Allocate writes on the pod it serves: consumed, what the container really
    got (``AscendReal``) and the kubelet's IDs (``kltDev``)."""
    return {
        PREDICATE_TIME: CONSUMED,
        REAL_ANNOTATION: real,
        KUBELET_ANNOTATION: ",".join(kubelet_ids),
    }


def consumed_annotations(
    pod: PodView,
    chips: Sequence[Chip],
    kubelet_ids: Sequence[str],
    host_ip: str,
    node: NodeChips,
) -> dict[str, str]:
    """What a chip Allocate writes on the pod: its record, and the rank table for the
    training chips (910, and the 950 family in its own annotation)."""
    written = consumed_record(format_chip_list((c.id for c in chips), node.kind), kubelet_ids)
    return written | pod_rank_table(pod, chips, host_ip, node)


def pod_rank_table(
    pod: PodView, chips: Iterable[Chip], host_ip: str, node: NodeChips
) -> dict[str, str]:
    """The rank table annotation of a pod given ``chips`` of ``node`` (none for the
    inference chips): ``host_ip`` the node's IP, the SuperPoD place and each chip's super
    device id as the driver reports them."""
    annotation = rank_table_annotation(node.kind)
    if annotation is None:
        return {}
    place = ServerPlace(host_ip, node.super_pod_id, node.server_index, node.rack_id)
    devices = (RankDevice(c.id, c.ip, c.super_device_id) for c in chips)
    return {annotation: rank_table(pod.name, pod.uid, place, devices)}
