"""Switch (ToR) affinity 2.0: shared ToRs, as MindCluster selects
(``internal/nslb/nslbv2.go``, ``plugin/tor.go``). Pure.

Every ToR is *free* (IsSharedTor 0), *shared* (1) or *exclusive* (2), and healthy or not
(IsHealthy 0 or 1); each session rebuilds that from the ConfigMap and the bound pods'
``isSharedTor`` / ``isHealthy`` annotations (the first non-zero value sticks). For one job,
a ToR's *free count* is its servers among the job's candidates, and four lists are sorted
by it (ties: ConfigMap order): F free healthy, E exclusive healthy, S shared healthy, U
shared unhealthy. ``maxShared`` is what S can give: its only ToR's count, or the largest
(``shared-tor-num`` 1) or two largest (2).

A fresh job of ``n`` pods:
1. ``n`` below the servers per ToR: the first ToR with room in E↑, U↑, S↑, F↑ gives its
   first ``n`` candidates (its state unchanged); a large-model job of fewer than 4 pods that
   fits nowhere fails;
2. ``cap`` = free counts of F + maxShared: beyond it a large-model job fails and a normal
   job goes to 4;
3. F↓ gives whole ToRs (made exclusive) while each fits in what is left; the rest comes
   from S (best-shared: the first ToR of S↑ that holds it, or, with 2, the first adjacent
   pair of S↑ that does), or from the first F ToR that did not fit (made shared) when it
   exceeds maxShared;
4. a normal job beyond ``cap``: F↓ whole as in 3, then U↑, S↑ and E↑ (those two without
   ToRs under a cross-ToR large-model job), each whole ToR or the part still needed made
   shared and unhealthy.

A job with some pods still bound (rescheduling) reuses its own ToRs first, then free ToRs,
then the shared ones it may still add (``shared-tor-num`` minus the shared ToRs it uses).
Ranks run along the chosen ToRs in order, by slice inside each.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from contract.annotations import (
    TOR_HEALTHY_ANNOTATION,
    TOR_SHARE_KEY,
    TOR_SHARED_ANNOTATION,
    TOR_SHARED_IP_ANNOTATION,
)
from contract.go_json import go_json
from contract.tor_topology import Server, Topology
from scheduler_core.engine.tor import LARGE_MODEL

IDLE, SHARED, EXCLUSIVE = 0, 1, 2
FILL_JOB_LIMIT = 4  # a large-model job smaller than this must fit in one ToR
SCORE, SHARED_SCORE, RANK_SCORE = 100.0, 99.0, 200.0


class TorShareFailed(ValueError):
    """The job does not fit now; the message is upstream's."""


@dataclass(frozen=True, slots=True)
class TorState:
    kind: int = IDLE  # IsSharedTor: 0 free, 1 shared, 2 exclusive
    healthy: bool = True  # IsHealthy 0 (an unhealthy ToR is 1)
    jobs: frozenset[str] = frozenset()  # cross-ToR jobs with pods under it
    large_model: bool = False  # one of them is a large-model job


@dataclass(frozen=True, slots=True)
class Entry:
    """Servers one ToR gives the job."""

    tor: int
    servers: tuple[Server, ...]
    shared: bool  # assigned as shared (scores 99 instead of 100)


@dataclass(frozen=True, slots=True)
class SharedSelection:
    entries: tuple[Entry, ...]
    marks: Mapping[int, tuple[int, bool]] = field(default_factory=dict)  # ToR → state after
    how: str = ""
    # ToRs the job's running pods already use (a restart): part of the job's server list, as
    # upstream's setServerListForPartialPods keeps them, though they give no server now.
    kept: frozenset[int] = frozenset()

    @property
    def tors(self) -> frozenset[int]:
        """Every ToR the job runs under once placed."""
        return frozenset(e.tor for e in self.entries) | self.kept

    @property
    def cross(self) -> bool:
        """The job spans more than one ToR (upstream: its server list has several)."""
        return len(self.tors) > 1

    @property
    def servers(self) -> tuple[Server, ...]:
        """In rank order: ToR by ToR, by slice inside each."""
        return tuple(s for e in self.entries for s in sorted(e.servers, key=lambda s: s.slice_id))

    def scores(self, rank: int) -> dict[str, float]:
        """Upstream's scores (server IP → score) for the pod of ``rank``: every server 100
        (99 on a ToR given as shared) until the one of that rank, which scores 200; the
        servers after it score nothing."""
        shared = {s.ip for e in self.entries if e.shared for s in e.servers}
        result: dict[str, float] = {}
        for node_rank, server in enumerate(self.servers):
            if node_rank == rank:
                result[server.ip] = RANK_SCORE
                break
            result[server.ip] = SHARED_SCORE if server.ip in shared else SCORE
        return result


@dataclass
class _Tor:
    id: int
    servers: list[Server]  # the job's candidates under it, by slice
    kind: int
    healthy: bool
    large_model: bool

    @property
    def free(self) -> int:
        return len(self.servers)


class _Lists:
    """The job's view of the ToRs: F, E, S, U by free count (ties: ConfigMap order)."""

    def __init__(
        self,
        topology: Topology,
        candidates: Iterable[str],
        states: Mapping[int, TorState],
        blocked: frozenset[int] = frozenset(),
    ) -> None:
        free = set(candidates)
        self.tors: list[_Tor] = []
        for servers in topology.tors:
            if not servers or servers[0].tor in blocked:
                continue
            state = states.get(servers[0].tor, TorState())
            self.tors.append(
                _Tor(
                    servers[0].tor,
                    [s for s in servers if s.ip in free],
                    state.kind,
                    state.healthy,
                    state.large_model,
                )
            )

    def of(self, kind: int, healthy: bool) -> list[_Tor]:
        return sorted(
            (t for t in self.tors if t.kind == kind and t.healthy == healthy), key=lambda t: t.free
        )


def max_shared(shared: Sequence[_Tor], limit: int) -> int:
    if limit <= 0 or not shared:
        return 0
    counts = sorted((t.free for t in shared), reverse=True)
    return counts[0] if len(counts) == 1 or limit == 1 else counts[0] + counts[1]


def _best_shared(shared: Sequence[_Tor], need: int, limit: int) -> list[Entry] | None:
    """The shared ToRs that give ``need`` servers: with one allowed, the first of S↑ that
    holds them; with two, the only one or the first adjacent pair of S↑ that does (upstream
    goes on adding later pairs, past the job's pods: we stop at the first)."""
    if limit == 1 or len(shared) == 1:
        tor = next((t for t in shared if t.free >= need), None)
        return None if tor is None else [Entry(tor.id, tuple(tor.servers[:need]), True)]
    for first, second in pairwise(shared):
        if first.free + second.free >= need:
            head = min(first.free, need)
            entries = [Entry(first.id, tuple(first.servers[:head]), True)]
            if need > head:
                entries.append(Entry(second.id, tuple(second.servers[: need - head]), True))
            return entries
    return None


def select(
    topology: Topology,
    candidates: Iterable[str],
    n: int,
    schema: str,
    *,
    states: Mapping[int, TorState],
    shared_tor_num: int,
) -> SharedSelection:
    """The servers for a fresh ``n``-pod job among the candidate server IPs, or
    TorShareFailed with upstream's message."""
    lists = _Lists(topology, candidates, states)
    large = schema == LARGE_MODEL
    free, exclusive = lists.of(IDLE, True), lists.of(EXCLUSIVE, True)
    shared, unhealthy = lists.of(SHARED, True), lists.of(SHARED, False)
    if n < topology.tor_count:
        for tor in exclusive + unhealthy + shared + free:
            if tor.free >= n:
                return SharedSelection((Entry(tor.id, tuple(tor.servers[:n]), False),), how="fill")
        if large and n < FILL_JOB_LIMIT:
            raise TorShareFailed("tor check failed not enough resource for fill job")
    cap = sum(t.free for t in free) + max_shared(shared, shared_tor_num)
    if n > cap:
        if large:
            raise TorShareFailed("set tor failed by not enough nodes")
        return _normal_beyond_cap(free, unhealthy, shared, exclusive, n)
    entries, marks, left, partial = _whole_free(free, n)
    if left == 0:
        return SharedSelection(tuple(entries), marks, "exclusive")
    if partial is None or left <= max_shared(shared, shared_tor_num):
        best = _best_shared(shared, left, shared_tor_num)
        if best is None:
            raise TorShareFailed("set tor failed by not enough nodes")
        return SharedSelection(tuple(entries + best), marks, "shared")
    marks[partial.id] = (SHARED, True)
    entries.append(Entry(partial.id, tuple(partial.servers[:left]), True))
    return SharedSelection(tuple(entries), marks, "shared")


def _whole_free(
    free: Sequence[_Tor], n: int
) -> tuple[list[Entry], dict[int, tuple[int, bool]], int, _Tor | None]:
    """F↓ taken whole (made exclusive) while each fits in what is left: (entries, marks,
    pods left, the first ToR that did not fit)."""
    entries: list[Entry] = []
    marks: dict[int, tuple[int, bool]] = {}
    left = n
    for tor in sorted(free, key=lambda t: -t.free):
        if left == 0 or tor.free == 0:
            continue
        if tor.free > left:
            return entries, marks, left, tor
        entries.append(Entry(tor.id, tuple(tor.servers), False))
        marks[tor.id] = (EXCLUSIVE, True)
        left -= tor.free
    return entries, marks, left, None


def _normal_beyond_cap(
    free: Sequence[_Tor],
    unhealthy: Sequence[_Tor],
    shared: Sequence[_Tor],
    exclusive: Sequence[_Tor],
    n: int,
) -> SharedSelection:
    entries, marks, left, _ = _whole_free(free, n)
    others = list(unhealthy) + [t for t in list(shared) + list(exclusive) if not t.large_model]
    for tor in others:
        if left == 0:
            break
        if tor.free == 0:
            continue
        given = min(tor.free, left)
        entries.append(Entry(tor.id, tuple(tor.servers[:given]), True))
        marks[tor.id] = (SHARED, False)
        left -= given
    if left:
        raise TorShareFailed("not enough node for normal job to schedule")
    return SharedSelection(tuple(entries), marks, "normal-fallback")


def reschedule(
    topology: Topology,
    candidates: Iterable[str],
    missing: int,
    *,
    live: Mapping[str, Mapping[str, str]],
    states: Mapping[int, TorState],
    shared_tor_num: int,
    job_size: int,
) -> SharedSelection:
    """Servers for the ``missing`` pods of a job whose other pods are bound (``live``:
    server IP → that pod's annotations), or TorShareFailed with upstream's message."""
    tor_of = {s.ip: s.tor for servers in topology.tors for s in servers}
    used = {tor_of[ip] for ip in live if ip in tor_of}
    # Only an explicit "0" says the job ran on one ToR (upstream compares the annotation to
    # freeTorAnno): a pod bound without the annotation says nothing.
    single = any(notes.get(TOR_SHARED_ANNOTATION) == "0" for notes in live.values())
    add = shared_tor_num - sum(1 for t in used if states.get(t, TorState()).kind == SHARED)
    lists = _Lists(topology, candidates, states)
    mine = [t for t in lists.tors if t.id in used]
    pods_on = {t: sum(1 for ip in live if tor_of.get(ip) == t) for t in used}
    entries: list[Entry] = []
    left = missing
    for tor in mine:
        if left == 0:
            break
        if tor.free:
            given = min(tor.free, left)
            entries.append(Entry(tor.id, tuple(tor.servers[:given]), tor.kind == SHARED))
            left -= given
    if sum(t.free for t in mine) >= missing:
        marks = _used_tor_marks(mine, pods_on, add)
        return SharedSelection(tuple(entries), marks, "own-tors", frozenset(used))
    if job_size < topology.tor_count:
        raise TorShareFailed("not enough tor for fill job restart")
    unused = [t for t in lists.tors if t.id not in used] if not single else []
    free = sorted((t for t in unused if t.kind == IDLE and t.healthy), key=lambda t: t.free)
    shared = sorted(
        (t for t in unused if t.kind == SHARED and t.healthy and add > 0), key=lambda t: t.free
    )
    if sum(t.free for t in free) + max_shared(shared, add) < left:
        raise TorShareFailed("not enough tor for job restart")
    marks = _used_tor_marks(mine, pods_on, 0)  # upstream passes noneSharedTor here
    partial = None
    for tor in free:
        if left == 0 or tor.free == 0:
            continue
        if tor.free > left:
            partial = tor
            break
        entries.append(Entry(tor.id, tuple(tor.servers), False))
        marks[tor.id] = (EXCLUSIVE, True)
        left -= tor.free
    if left and (partial is None or left <= max_shared(shared, add)):
        best = _best_shared(shared, left, add)
        if best is None:
            raise TorShareFailed("not enough tor for job restart")
        entries += best
    elif left and partial is not None:
        entries.append(Entry(partial.id, tuple(partial.servers[:left]), add > 0))
        marks[partial.id] = (SHARED, True) if add > 0 else (EXCLUSIVE, True)
    return SharedSelection(tuple(entries), marks, "restart", frozenset(used))


def _used_tor_marks(
    used: Sequence[_Tor], pods_on: Mapping[int, int], add: int
) -> dict[int, tuple[int, bool]]:
    """Upstream's ``setUsedTorAttr`` (Ascend/mind-cluster component/ascend-for-volcano
    internal/nslb/util.go): every free ToR the job's running pods use, whether it gives a
    server now or not, becomes shared while shared ToRs may be added (``add``, one fewer for
    each) and its free servers exceed the job's pods on it by more than one, else exclusive.
    Upstream walks a Go map; here the ConfigMap order decides which ToR is shared first."""
    marks: dict[int, tuple[int, bool]] = {}
    for tor in used:
        if tor.kind != IDLE:
            continue
        if tor.free > pods_on.get(tor.id, 0) + 1 and add != 0:
            marks[tor.id] = (SHARED, True)
            add -= 1
        else:
            marks[tor.id] = (EXCLUSIVE, True)
    return marks


def apply(
    states: Mapping[int, TorState], selection: SharedSelection, job: str, schema: str
) -> dict[int, TorState]:
    """The ToR states once ``job`` runs where ``selection`` put it: every ToR it uses,
    those its running pods keep included (upstream's ``setUsedTorAttr``)."""
    result = dict(states)
    cross = selection.cross
    for tor in selection.tors:
        old = result.get(tor, TorState())
        kind, healthy = selection.marks.get(tor, (old.kind, old.healthy))
        jobs = old.jobs | {job} if cross else old.jobs
        large = old.large_model or (cross and schema == LARGE_MODEL)
        result[tor] = TorState(kind, healthy, jobs, large)
    return result


def states_from_pods(
    topology: Topology, pods: Iterable[tuple[str, str, Mapping[str, str], bool]]
) -> dict[int, TorState]:
    """ToR states rebuilt as upstream does each session: the ConfigMap's flags, then each
    bound pod (job, node IP, annotations, large-model) on its ToR: a free ToR takes the
    pod's ``isSharedTor``, a healthy one its ``isHealthy``; cross-ToR jobs are recorded."""
    tor_of = {s.ip: s.tor for tor in topology.tors for s in tor}
    states = {t: TorState(kind, healthy == 0) for t, (kind, healthy) in topology.flags.items()}
    for job, ip, notes, large in pods:
        tor = tor_of.get(ip)
        if tor is None:
            continue
        old = states.get(tor, TorState())
        kind = _flag(notes.get(TOR_SHARED_ANNOTATION), 2)
        cross = kind in (SHARED, EXCLUSIVE)
        states[tor] = TorState(
            old.kind or kind,
            old.healthy and _flag(notes.get(TOR_HEALTHY_ANNOTATION), 1) == 0,
            old.jobs | {job} if cross else old.jobs,
            old.large_model or (cross and large),
        )
    return states


def _flag(text: str | None, top: int) -> int:
    """An ``isSharedTor`` / ``isHealthy`` value; absent or unreadable counts as 0."""
    return int(text) if text is not None and text in {str(i) for i in range(top + 1)} else 0


def pod_annotations(
    topology: Topology, selection: SharedSelection, ip: str, states: Mapping[int, TorState]
) -> dict[str, str]:
    """What the pod on server ``ip`` records (``states``: after the job is placed): "0"
    and "0" for a job on one ToR, else its ToR's state, and the ToR's IP when shared. A
    restarting job spans the ToRs its running pods keep too."""
    server = topology.server(ip)
    if server is None or not selection.cross:
        return {TOR_SHARED_ANNOTATION: "0", TOR_HEALTHY_ANNOTATION: "0"}
    state = states.get(server.tor, TorState())
    notes = {
        TOR_SHARED_ANNOTATION: str(state.kind),
        TOR_HEALTHY_ANNOTATION: "0" if state.healthy else "1",
    }
    if state.kind == SHARED:
        notes[TOR_SHARED_IP_ANNOTATION] = server.tor_ip
    return notes


def encode(
    topology: Topology,
    states: Mapping[int, TorState],
    jobs_on: Mapping[str, Iterable[str]],
    node_of_ip: Mapping[str, str],
) -> dict[str, str]:
    """``volcano-system/tor-share-cm`` data: ToR IP → state and the jobs on its nodes.
    ``jobs_on`` maps server IP → the cross-ToR jobs with a pod there."""
    body = (
        "{"
        + ",".join(
            go_json(tor[0].tor_ip)
            + ":"
            + _tor_json(states.get(tor[0].tor, TorState()), tor, jobs_on, node_of_ip)
            for tor in sorted((t for t in topology.tors if t), key=lambda t: t[0].tor_ip)
        )
        + "}"
    )
    return {TOR_SHARE_KEY: body}


def _tor_json(
    state: TorState,
    servers: Sequence[Server],
    jobs_on: Mapping[str, Iterable[str]],
    node_of_ip: Mapping[str, str],
) -> str:
    # Struct field order of Volcano's TorShare, not sorted: written by hand.
    nodes = [
        '{"NodeIp":'
        + go_json(s.ip)
        + ',"NodeName":'
        + go_json(node_of_ip.get(s.ip, ""))
        + ',"JobName":'
        + go_json(sorted(jobs_on[s.ip]))
        + "}"
        for s in servers
        if jobs_on.get(s.ip)
    ]
    return (
        '{"IsHealthy":'
        + ("0" if state.healthy else "1")
        + ',"IsSharedTor":'
        + str(state.kind)
        + ',"nodes":['
        + ",".join(nodes)
        + "]}"
    )
