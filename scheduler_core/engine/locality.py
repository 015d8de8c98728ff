"""Where a multi-node job's pods go on the network: the nodes, in rank order. Pure.

One entry point for the extender's gangs: a job annotated ``sp-block`` gets logical
SuperPoDs (``superpod``; under ``huawei.com/schedule_policy: chip8-node8-sp`` the Atlas 850's
checks, with or without ``sp-block``), a ``chip8-node8-ra64-sp`` job racks of an Atlas 950
SuperPoD (``racks``), a job labelled ``tor-affinity`` gets ToRs (``tor`` for NSLB 1.0,
``tor_share`` for 2.0), any other job the candidates in the order given (best score first). A
job restarting after a fault keeps its healthy ranks on their nodes and moves the others:
first to its own ToRs, then to shared ToRs, then anywhere (MindCluster ``internal/nslb``); a
job with ranks still running (its reservation expired half bound) gets the missing ranks in
the same order. A product family with network rules of its own names them
(``Rules.network``); ``NETWORKS`` maps the name to them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from chip_topology.routing import policy_network
from contract.annotations import (
    MINDIE_LABELS,
    SCHEDULE_POLICY_ANNOTATION,
    SP_BLOCK_ANNOTATION,
    SP_FIT_ANNOTATION,
)
from contract.tor_topology import Topology
from scheduler_core.engine import racks, superpod, tor, tor_share
from scheduler_core.engine.tor import DISABLED
from scheduler_core.engine.tor_share import SharedSelection, TorState

NSLB_VERSIONS = ("1.0", "2.0")


@dataclass(frozen=True, slots=True)
class Settings:
    nslb_version: str = "1.0"
    shared_tor_num: int = 2
    reserve_nodes: int = 2
    super_pod_size: int = 48
    # Volcano's ``prefer-previous-node`` (false when unset upstream): a pod-level fault job's
    # ranks whose node did not fail go back to it first (ascend-for-volcano plugin/factory.go
    # addPreferPreviousNodeScore).
    prefer_previous_node: bool = False


@dataclass(frozen=True, slots=True)
class Network:
    """What the cluster says about its network at one refresh."""

    topology: Topology | None = None
    addresses: Mapping[str, str] = field(default_factory=dict)  # node → InternalIP
    super_pods: Mapping[str, int] = field(default_factory=dict)  # node → SuperPodID
    tor_states: Mapping[int, TorState] = field(default_factory=dict)
    multi_job_tors: frozenset[int] = frozenset()  # ToRs under a job that spans several
    sub_healthy: frozenset[str] = frozenset()  # nodes whose chip or switch is sub-healthy
    racks: Mapping[str, int] = field(default_factory=dict)  # node → RackID (Atlas 950)
    # node → (SuperPodID, RackID) as last offered, kept while a node is left out: the rack a
    # failed node's ranks go back to (upstream keeps it with the fault job's nodes).
    last_places: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    def tors_of(self, nodes: Iterable[str]) -> set[int]:
        return {t for n in nodes if (t := self.tor_of(n)) is not None}

    def tor_of(self, node: str) -> int | None:
        if self.topology is None:
            return None
        server = self.topology.server(self.addresses.get(node, ""))
        return server.tor if server else None


@dataclass(frozen=True, slots=True)
class Ask:
    job: str  # namespace/name
    size: int  # pods = nodes
    chips_per_node: int
    npu: int  # NPUs each pod requests
    labels: Mapping[str, str]
    annotations: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Choice:
    nodes: tuple[str, ...]  # node of rank 0, 1, …
    notes: tuple[Mapping[str, str], ...]  # extra pod annotations of each rank
    shared: SharedSelection | None = None  # NSLB 2.0: what the ToR states become
    how: str = "best-score"


@dataclass(frozen=True, slots=True)
class Refill:
    """The ranks of an Atlas 950 pod-level fault job placed again: the stage
    (``racks.SAME_RACK`` or ``racks.WHOLE_RACK``), the ranks and the node each ran on."""

    stage: str
    ranks: tuple[int, ...]
    previous: tuple[str, ...]


class Unplaceable(ValueError):
    """The job cannot be placed now; the message says why (upstream's wording if any)."""


def choose(
    ask: Ask,
    candidates: Sequence[str],
    network: Network,
    settings: Settings,
    *,
    previous: Mapping[int, str] | None = None,
    fault_nodes: frozenset[str] = frozenset(),
    running: Mapping[str, Mapping[str, str]] | None = None,
    idle: Mapping[str, int] | None = None,
    refill: Refill | None = None,
) -> Choice:
    """The job's nodes among ``candidates`` (best first), or Unplaceable; invalid labels
    raise ``tor.TorInvalid`` or ``superpod.SuperPodInvalid``. ``previous``: rank → node of a
    fault job's last run; ``running``: nodes of the job's pods still running (``ask.size``
    then counts only the missing ranks); ``idle``: each candidate's idle NPUs; ``refill``:
    the missing ranks of an Atlas 950 pod-level fault job."""
    own = network_rules(ask.annotations)
    if own.whole is not None and not running:
        return own.whole(ask, candidates, network, settings, idle or {})
    if own.refill is not None and refill is not None:
        return own.refill(ask, candidates, network, refill)
    sp_block = ask.annotations.get(SP_BLOCK_ANNOTATION)
    if own.job_sp_block and sp_block is None:
        sp_block = str(ask.size * ask.npu)  # ``plugin/job.go`` setSpBlock: the job's NPUs
    if previous:
        if sp_block is not None:
            return _super_pods_after_fault(
                ask,
                candidates,
                network,
                settings,
                sp_block=sp_block,
                previous=previous,
                fault_nodes=fault_nodes,
            )
        return _after_fault(ask, candidates, network, previous, fault_nodes)
    if running:
        return _join(ask, candidates, network, settings, running)
    if sp_block is not None:
        return _super_pods(ask, candidates, network, settings, sp_block=sp_block, idle=idle or {})
    schema = tor.affinity_of(ask.labels, network.topology)
    if schema != DISABLED and network.topology is not None:
        return _tors(ask, candidates, network, settings, schema=schema, topology=network.topology)
    if len(candidates) < ask.size:
        raise Unplaceable(f"{len(candidates)} of {ask.size} nodes are free")
    nodes = tuple(candidates[: ask.size])
    return Choice(nodes, tuple({} for _ in nodes))


def _handler(ask: Ask) -> superpod.Handler:
    return network_rules(ask.annotations).super_pod


def _super_pod_block(ask: Ask, settings: Settings, sp_block: str) -> tuple[int, int, int]:
    """(nodes per block, super-pod-size, reserve) of a SuperPoD job."""
    size, reserve = superpod.effective_settings(settings.super_pod_size, settings.reserve_nodes)
    spec = ask.job.rsplit("/", 1)[-1]
    block = _handler(ask).block(
        sp_block,
        tasks=ask.size,
        npu=ask.npu,
        chips_per_node=ask.chips_per_node,
        size=size,
        spec=spec,
    )
    return block, size, reserve


def _by_super_pod(nodes: Iterable[str], network: Network) -> dict[int, list[str]]:
    free: dict[int, list[str]] = {}
    for node in sorted(nodes):
        if node in network.super_pods:
            free.setdefault(network.super_pods[node], []).append(node)
    return free


def _super_pods(
    ask: Ask,
    candidates: Sequence[str],
    network: Network,
    settings: Settings,
    *,
    sp_block: str,
    idle: Mapping[str, int],
) -> Choice:
    block, size, reserve = _super_pod_block(ask, settings, sp_block)
    affinity = superpod.affinity_of(ask.labels)
    outside = [n for n in candidates if n not in network.super_pods]
    nodes = [n for n in candidates if n in network.super_pods]
    if not nodes and outside:
        raise Unplaceable(f"node {outside[0]} is not super-pod node or superPodID is not set")
    if ask.size == 1 and nodes:  # a one-task job: the least idle nodes, healthy if any
        fewest = min(idle.get(n, 0) for n in nodes)
        nodes = [n for n in nodes if idle.get(n, 0) == fewest]
        nodes = [n for n in nodes if n not in network.sub_healthy] or nodes
    if ask.size > len(nodes):
        raise Unplaceable(f"not enough node, npuTaskNum: {ask.size}, nodes: {len(nodes)}")
    free = _by_super_pod(nodes, network)
    try:
        if _handler(ask).mindie and all(ask.labels.get(k) for k in MINDIE_LABELS):
            chosen = superpod.select_mindie(
                free,
                ask.size // block,
                block,
                reserve=reserve,
                idlest=ask.annotations.get(SP_FIT_ANNOTATION) == superpod.IDLEST,
                sub_healthy=network.sub_healthy,
            )
        else:
            chosen = superpod.select(
                free,
                ask.size,
                block,
                reserve=reserve,
                size=size,
                affinity=affinity,
                sub_healthy=network.sub_healthy,
                handler=_handler(ask),
            )
    except superpod.SuperPodUnplaceable as failed:
        raise Unplaceable(str(failed)) from None
    return _from_super_pods(chosen, ask.size, f"super-pod-{affinity}")


def check_lone_pod(annotations: Mapping[str, str], npu: int, settings: Settings) -> None:
    """A job of one pod (no gang) under a policy with network rules of its own (the Atlas 850
    or 950 SuperPoD's): its checks as upstream's ValidNPUJob runs them for a one-task job;
    SuperPodInvalid says what fails."""
    network_rules(annotations).lone_pod(annotations, npu, settings)


def own_network(annotations: Mapping[str, str]) -> bool:
    """Whether a job's policy has network rules of its own (so ``off_network`` may refuse)."""
    return network_rules(annotations) is not NETWORKS[""]


def off_network(
    annotations: Mapping[str, str], nodes: Iterable[str], network: Network
) -> dict[str, str]:
    """The nodes a pod under a policy with network rules of its own may not have (node →
    upstream's refusal)."""
    refuse = network_rules(annotations).refuse
    return {node: why for node in nodes if (why := refuse(node, network)) is not None}


def _racks(
    ask: Ask,
    candidates: Sequence[str],
    network: Network,
    settings: Settings,
    idle: Mapping[str, int],
) -> Choice:
    """An Atlas 950 SuperPoD job (``racks``): its checks, the candidates' SuperPoDs and
    racks (a candidate without either is refused as upstream's predicate refuses it), for a
    job of one pod only the least idle of them (``chip8node8ra64sp/score.go``
    selectNodeForStandaloneJob, ``idle``: each candidate's idle NPUs), the strategy chain.
    A fault job restarting whole is placed afresh the same way, as upstream places a job-level
    restart (``chip8node8ra64sp/reschedule.go`` selectNodesForFaultJob acts only under
    pod-level rescheduling: ``_racks_refill``). Rank ``r`` gets block ``r // block``'s node
    ``r % block``; no annotations beyond the chips (the handler keeps the base handler's
    UseAnnotation)."""
    job = racks.rack_job(ask.annotations, [ask.npu] * ask.size, settings.super_pod_size)
    size, _ = superpod.effective_settings(settings.super_pod_size, settings.reserve_nodes)
    where: dict[str, racks.Where] = {}
    refused: list[str] = []
    for node in candidates:
        place = _where(node, network)
        if place is None:
            refused.append(racks.unplaced(node, network.super_pods.get(node)))
        else:
            where[node] = place
    if ask.size == 1 and where:
        fewest = min(idle.get(n, 0) for n in where)
        where = {n: p for n, p in where.items() if idle.get(n, 0) == fewest}
    if len(where) < ask.size:
        why = refused[0] if refused else f"{len(where)} of {ask.size} nodes are free"
        raise Unplaceable(why)
    try:
        chosen = racks.select(
            job, where, super_pod_size=size, soft=superpod.affinity_of(ask.labels) == superpod.SOFT
        )
    except superpod.SuperPodUnplaceable as failed:
        raise Unplaceable(str(failed)) from None
    ranks = range(ask.size)
    nodes = tuple(chosen.node_of_rank(r) for r in ranks)
    return Choice(nodes, tuple({} for _ in ranks), how="racks")


def _racks_refill(ask: Ask, candidates: Sequence[str], network: Network, refill: Refill) -> Choice:
    """An Atlas 950 pod-level fault job's missing ranks, back in their racks
    (``racks.refill``). A rank's old node may be left out now (its chip failed, its node
    down): its rack is the one it was last offered in, as upstream reads it from the fault
    job's own record of its nodes (``chip8node8ra64sp/reschedule.go`` getSameRackNodes)."""
    previous = [
        _where(n, network)
        or (racks.Where(*network.last_places[n]) if n in network.last_places else None)
        for n in refill.previous
    ]
    free = {n: w for n in candidates if (w := _where(n, network)) is not None}
    places = [w for w in previous if w is not None]
    if len(places) < len(previous):
        raise Unplaceable(f"{ask.job}: the rack of a rank it places again is unknown")
    try:
        nodes = racks.refill(
            refill.stage, refill.ranks, places, racks.ra_block_nodes(ask.annotations), free
        )
    except superpod.SuperPodUnplaceable as failed:
        raise Unplaceable(str(failed)) from None
    return Choice(nodes, tuple({} for _ in nodes), how=refill.stage)


def _where(node: str, network: Network) -> racks.Where | None:
    super_pod, rack = network.super_pods.get(node), network.racks.get(node)
    return None if super_pod is None or rack is None else racks.Where(super_pod, rack)


def _from_super_pods(chosen: superpod.SuperPodChoice, size: int, how: str) -> Choice:
    ranks = range(size)
    return Choice(
        tuple(chosen.node_of_rank(r) for r in ranks),
        tuple(chosen.annotations(r) for r in ranks),
        how=how,
    )


def _super_pods_after_fault(
    ask: Ask,
    candidates: Sequence[str],
    network: Network,
    settings: Settings,
    *,
    sp_block: str,
    previous: Mapping[int, str],
    fault_nodes: frozenset[str],
) -> Choice:
    """A SuperPoD job restarting after a fault (upstream's ``selectNodeFromOriginVSuperPod``):
    a virtual SuperPoD whose nodes are all free and healthy stays; one with a faulty node is
    refilled inside its physical SuperPoD when that still has a block's worth of free nodes
    (its healthy nodes in place, the faulty ones replaced by unused nodes, then by faulty
    nodes that are free again); the others are selected afresh."""
    block, size, reserve = _super_pod_block(ask, settings, sp_block)
    free = set(candidates)
    old = {r: n for r, n in previous.items() if r < ask.size}
    waiting = sorted(n for n in old.values() if n not in fault_nodes and n not in free)
    if waiting:
        raise Unplaceable(
            f"selectNode failed, wait for normal node resource release ({waiting[0]})"
        )
    used = set(old.values())
    taken: set[str] = set()
    blocks: list[superpod.Block] = []
    unready: list[int] = []
    for vid in range(ask.size // block):
        nodes = [old.get(vid * block + i) for i in range(block)]
        if all(n is not None and n in free and n not in fault_nodes for n in nodes):
            kept = tuple(n for n in nodes if n is not None)
            blocks.append(superpod.Block(vid, network.super_pods.get(kept[0], -1), kept))
            taken.update(kept)
            continue
        home = next(
            (network.super_pods[n] for n in nodes if n is not None and n in network.super_pods),
            None,
        )
        room = [
            n
            for n in sorted(free - taken)
            if home is not None and network.super_pods.get(n) == home
        ]
        if home is None or len(room) < block:
            unready.append(vid)
            continue
        fresh = sorted(
            (n for n in room if n not in used), key=lambda n: (n in network.sub_healthy, n)
        )
        spare = iter(fresh + [n for n in room if n in fault_nodes])
        refilled = []
        for n in nodes:
            if n is not None and n in free and n not in fault_nodes:
                refilled.append(n)
            elif (replacement := next(spare, None)) is not None:
                refilled.append(replacement)
            else:
                raise Unplaceable("selectNodeFromOriginVSuperPod failed, unschedulable")
        blocks.append(superpod.Block(vid, home, tuple(refilled)))
        taken.update(refilled)
    if unready:
        rest = _by_super_pod((n for n in candidates if n not in taken and n not in used), network)
        try:
            fresh_choice = superpod.select(
                rest,
                len(unready) * block,
                block,
                reserve=reserve,
                size=size,
                affinity=superpod.affinity_of(ask.labels),
                sub_healthy=network.sub_healthy,
                unready=unready,
                rescheduling=True,
                handler=_handler(ask),
            )
        except superpod.SuperPodUnplaceable as failed:
            raise Unplaceable(str(failed)) from None
        blocks += fresh_choice.blocks
    chosen = superpod.SuperPodChoice(tuple(sorted(blocks, key=lambda b: b.vid)))
    return _from_super_pods(chosen, ask.size, "super-pod-after-fault")


def _tors(
    ask: Ask,
    candidates: Sequence[str],
    network: Network,
    settings: Settings,
    *,
    schema: str,
    topology: Topology,
) -> Choice:
    node_of_ip = {network.addresses[n]: n for n in candidates if n in network.addresses}
    if settings.nslb_version == "2.0":
        try:
            shared = tor_share.select(
                topology,
                node_of_ip,
                ask.size,
                schema,
                states=network.tor_states,
                shared_tor_num=settings.shared_tor_num,
            )
        except tor_share.TorShareFailed as failed:
            raise Unplaceable(str(failed)) from None
        return _shared_choice(ask, topology, network, shared, node_of_ip=node_of_ip, schema=schema)
    if ask.size >= topology.tor_count and network.multi_job_tors:
        # VOL-v5: a ToR under a multi-ToR job is not shared
        node_of_ip = {
            ip: n for ip, n in node_of_ip.items() if network.tor_of(n) not in network.multi_job_tors
        }
    selection = tor.select(topology, node_of_ip, ask.size, schema)
    if selection is None:
        raise Unplaceable(f"tor affinity {schema}: no ToRs for {ask.size} nodes yet")
    nodes = tuple(node_of_ip[s.ip] for s in selection.servers)
    return Choice(nodes, tuple({} for _ in nodes), how=f"nslb-1.0-{selection.how}")


def _shared_choice(
    ask: Ask,
    topology: Topology,
    network: Network,
    shared: SharedSelection,
    *,
    node_of_ip: Mapping[str, str],
    schema: str,
) -> Choice:
    after = tor_share.apply(network.tor_states, shared, ask.job, schema)
    servers = shared.servers
    return Choice(
        tuple(node_of_ip[s.ip] for s in servers),
        tuple(tor_share.pod_annotations(topology, shared, s.ip, after) for s in servers),
        shared,
        f"nslb-2.0-{shared.how}",
    )


def _after_fault(
    ask: Ask,
    candidates: Sequence[str],
    network: Network,
    previous: Mapping[int, str],
    fault_nodes: frozenset[str],
) -> Choice:
    kept = {r: n for r, n in previous.items() if n not in fault_nodes and r < ask.size}
    free = set(candidates)
    missing = sorted(set(kept.values()) - free)
    if missing:
        raise Unplaceable(f"waiting for {missing[0]} of fault job {ask.job} to be released")
    others = _near(
        [n for n in candidates if n not in kept.values() and n not in fault_nodes],
        network,
        previous.values(),
    )
    # A node that failed under the job and passes the filter again is the last resort.
    others += [n for n in candidates if n in fault_nodes]
    moved = [r for r in range(ask.size) if r not in kept]
    if len(others) < len(moved):
        raise Unplaceable(f"fault job {ask.job}: {len(others)} of {len(moved)} new nodes are free")
    nodes = dict(kept) | dict(zip(moved, others, strict=False))
    ordered = tuple(nodes[r] for r in range(ask.size))
    return Choice(ordered, tuple({} for _ in ordered), how="after-fault")


def _join(
    ask: Ask,
    candidates: Sequence[str],
    network: Network,
    settings: Settings,
    running: Mapping[str, Mapping[str, str]],
) -> Choice:
    """Nodes for the ranks still missing beside the job's running pods (a reservation that
    expired half bound, or a scheduler restarted meanwhile): under switch affinity 2.0 as
    upstream reschedules a job with fewer pods to place than it has; else near them."""
    schema = tor.affinity_of(ask.labels, network.topology)
    topology = network.topology
    if settings.nslb_version == "2.0" and schema != DISABLED and topology is not None:
        node_of_ip = {network.addresses[n]: n for n in candidates if n in network.addresses}
        live = {
            network.addresses[n]: notes for n, notes in running.items() if n in network.addresses
        }
        try:
            shared = tor_share.reschedule(
                topology,
                node_of_ip,
                ask.size,
                live=live,
                states=network.tor_states,
                shared_tor_num=settings.shared_tor_num,
                job_size=ask.size + len(running),
            )
        except tor_share.TorShareFailed as failed:
            raise Unplaceable(str(failed)) from None
        return _shared_choice(ask, topology, network, shared, node_of_ip=node_of_ip, schema=schema)
    near = _near(candidates, network, running)
    domain = rest_domain(ask, network, running)
    if domain is not None:
        near = [n for n in near if n in domain]
    if len(near) < ask.size:
        raise Unplaceable(f"{len(near)} of {ask.size} nodes are free for the rest of {ask.job}")
    nodes = tuple(near[: ask.size])
    return Choice(nodes, tuple({} for _ in nodes), how="beside-running")


def rest_domain(ask: Ask, network: Network, running: Iterable[str]) -> frozenset[str] | None:
    """The nodes the missing ranks of a job with pods on ``running`` may take; None: any.
    A SuperPoD job, or a large-model job under switch affinity, was placed whole in its
    SuperPoDs or under its ToRs: the rest of it goes there or waits (a leader that took
    over lost the reservation its first ranks were bound from, not the rule)."""
    running = list(running)
    if ask.annotations.get(SP_BLOCK_ANNOTATION) is not None and network.super_pods:
        own_pods = {network.super_pods[n] for n in running if n in network.super_pods}
        return frozenset(n for n, p in network.super_pods.items() if p in own_pods)
    if tor.affinity_of(ask.labels, network.topology) == tor.LARGE_MODEL:
        own_tors = network.tors_of(running)
        return frozenset(n for n in network.addresses if network.tor_of(n) in own_tors)
    return None


def _near(candidates: Sequence[str], network: Network, used: Iterable[str]) -> list[str]:
    """Candidates on the job's own ToRs or SuperPoDs first, then on shared ToRs, then the
        rest, each group in the given order (a rescheduled job's order in MindCluster
    ``internal/nslb``)."""
    used = list(used)
    own_tors = network.tors_of(used)
    own_pods = {network.super_pods[n] for n in used if n in network.super_pods}

    def tier(node: str) -> int:
        t = network.tor_of(node)
        if (t is not None and t in own_tors) or network.super_pods.get(node, -1) in own_pods:
            return 0
        state = network.tor_states.get(t, TorState()) if t is not None else TorState()
        return 1 if state.kind == tor_share.SHARED else 2

    return sorted(candidates, key=tier)


def _lone_850(annotations: Mapping[str, str], npu: int, settings: Settings) -> None:
    size, _ = superpod.effective_settings(settings.super_pod_size, settings.reserve_nodes)
    superpod.block_nodes_850(annotations.get(SP_BLOCK_ANNOTATION), npus=[npu], super_pod_size=size)


def _lone_950(annotations: Mapping[str, str], npu: int, settings: Settings) -> None:
    racks.rack_job(annotations, [npu], settings.super_pod_size)


def _off_850(node: str, network: Network) -> str | None:
    """No SuperPoD id: ``chip8node8sp/frame.go`` CheckNodeNPUByTask."""
    if node in network.super_pods:
        return None
    return f"node {node} is not super-pod node or superPodID is not set"


def _off_950(node: str, network: Network) -> str | None:
    """No SuperPoD id or no rack: ``chip8node8ra64sp/node.go`` checkNodeStaticParams."""
    super_pod = network.super_pods.get(node)
    if super_pod is not None and node in network.racks:
        return None
    return racks.unplaced(node, super_pod)


def _no_check(annotations: Mapping[str, str], npu: int, settings: Settings) -> None:
    return None


def _anywhere(node: str, network: Network) -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class NetworkRules:
    """A product family's own network rules, as its ``Rules.network`` names them.

    ``super_pod``: whose SuperPoD selection an ``sp-block`` job gets. ``whole(ask, candidates,
    network, settings)``: the family places a job with no rank running itself; ``refill(ask,
    candidates, network, refill)``: and the missing ranks of a pod-level fault job.
    ``whole(..., idle)`` gets each candidate's idle NPUs for a job of one pod (else empty).
    ``job_sp_block``: a job without ``sp-block`` is one logical SuperPoD of its NPUs.
    ``lone_pod(annotations, npu, settings)``: the checks of a job of one pod.
    ``refuse(node, network)``: why a node is off the family's network, None if it is not.
    ``ra_blocks``: a fault job restarts by ra-blocks (``rescheduling.Recovery.ra_block``).
    """

    super_pod: superpod.Handler = superpod.A3
    whole: Callable[[Ask, Sequence[str], Network, Settings, Mapping[str, int]], Choice] | None = (
        None
    )
    refill: Callable[[Ask, Sequence[str], Network, Refill], Choice] | None = None
    job_sp_block: bool = False
    lone_pod: Callable[[Mapping[str, str], int, Settings], None] = _no_check
    refuse: Callable[[str, Network], str | None] = _anywhere
    ra_blocks: bool = False


# The network rules by the name a family's ``Rules.network`` gives (``chip_topology``, the
# families' layer, may not import the engine's network view: the names meet here, one row
# a family with rules of its own); "": none, the A3 handler's SuperPoD selection for
# ``sp-block`` jobs. Upstream keys these on the ``huawei.com/schedule_policy`` (Ascend/
# mind-cluster ``component/ascend-common/api/consts.go`` Chip8Node8Sp, Chip8Node8Ra64Sp).
NETWORKS: Mapping[str, NetworkRules] = {
    "": NetworkRules(),
    "superpod850": NetworkRules(
        super_pod=superpod.ATLAS_850, job_sp_block=True, lone_pod=_lone_850, refuse=_off_850
    ),
    "racks950": NetworkRules(
        whole=_racks, refill=_racks_refill, lone_pod=_lone_950, refuse=_off_950, ra_blocks=True
    ),
}


def network_rules(annotations: Mapping[str, str]) -> NetworkRules:
    """The network rules of the products a job's ``huawei.com/schedule_policy`` routes to."""
    return NETWORKS[policy_network(annotations.get(SCHEDULE_POLICY_ANNOTATION))]


def picks_lone_node(annotations: Mapping[str, str]) -> bool:
    """Whether the job's handler picks even a one-pod job's node itself, from every node of
    the session: a SuperPoD job (``sp-block``, or the 850 and 950 SuperPoD policies, whose
    ``sp-block`` defaults to the job's NPUs: ``plugin/job.go`` setSpBlock) takes the least idle
    node of the SuperPoD or rack it chooses (``superpod/frame.go``,
    ``chip8node8ra64sp/score.go`` selectNodeForStandaloneJob), not any node of the best
    score."""
    own = network_rules(annotations)
    return SP_BLOCK_ANNOTATION in annotations or own.job_sp_block or own.whole is not None
