"""Switch (ToR) affinity 2.0: shared ToRs (MindCluster ``internal/nslb/nslbv2.go``). Pure.

Every ToR is *idle* (no cross-ToR job, perhaps padding jobs), *exclusive* (one cross-ToR job
took it whole) or *shared* (cross-ToR jobs use some of its servers); a shared ToR is
*unhealthy* once a job on it uses more shared ToRs than ``shared-tor-num`` allows. A job of
``n`` pods (one a server) is placed:

- a *padding* job (``n`` < servers per ToR) on one ToR: exclusive ToRs first, then unhealthy
  shared, then shared, then idle ones; in each class the ToR whose free count is closest to
  ``n`` (a large-model job never on an unhealthy shared ToR). It changes no ToR's state.
- a cross-ToR job takes idle ToRs whole, most free servers first, while the remainder still
  fills the next one; the rest of its pods go to shared ToRs: the one (or, with
  ``shared-tor-num`` 2, the one or two) healthy shared ToRs whose free count is closest to the
  remainder, two preferred over one on a tie; else the idle ToR (with 2: or exclusive ToR)
  closest to it, which becomes shared. A ``large-model-schema`` job waits when that fails; a
  ``normal-schema`` job takes every idle ToR, then unhealthy shared ToRs, then shared ToRs used
  by normal jobs only, and makes the shared ToRs it uses unhealthy if they exceed the limit.

Ranks run along the exclusive ToRs in the order taken, then the shared ones, by slice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

from contract.annotations import (
    TOR_HEALTHY_ANNOTATION,
    TOR_SHARE_KEY,
    TOR_SHARED_ANNOTATION,
    TOR_SHARED_IP_ANNOTATION,
)
from contract.go_json import go_json
from scheduler_core.engine.tor import LARGE_MODEL, NORMAL, Server, Topology

IDLE, SHARED, EXCLUSIVE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class TorState:
    kind: int = IDLE  # IsSharedTor: 0 idle, 1 shared, 2 exclusive
    healthy: bool = True  # IsHealthy 0; an unhealthy shared ToR is 1
    jobs: frozenset[str] = frozenset()  # cross-ToR jobs with pods under it
    large_model: bool = False  # one of them is a large-model job


@dataclass(frozen=True, slots=True)
class SharedSelection:
    servers: tuple[Server, ...]  # rank order
    exclusive: tuple[int, ...]  # ToR ids the job takes whole
    shared: tuple[int, ...]  # ToR ids whose servers it shares
    how: str  # padding, exclusive, shared, normal-fallback

    def rank_of(self, ip: str) -> int | None:
        return next((i for i, s in enumerate(self.servers) if s.ip == ip), None)


def select(
    topology: Topology,
    candidates: Iterable[str],
    n: int,
    schema: str,
    *,
    states: Mapping[int, TorState],
    shared_tor_num: int,
) -> SharedSelection | None:
    """The servers for an ``n``-pod job among the candidate server IPs, or None (wait)."""
    if shared_tor_num not in (1, 2):
        raise ValueError(f"shared-tor-num {shared_tor_num} must be 1 or 2")
    free = set(candidates)
    tors = {tor[0].tor: [s for s in tor if s.ip in free] for tor in topology.tors if tor}
    state = {t: states.get(t, TorState()) for t in tors}
    if n < topology.tor_count:
        padding = _padding(tors, state, n, schema)
        if padding is not None or schema == LARGE_MODEL:
            return padding
    chosen = _cross_tor(tors, state, n, shared_tor_num)
    if chosen is None and schema == NORMAL:
        chosen = _normal_fallback(tors, state, n)
    return chosen


def _padding(
    tors: Mapping[int, list[Server]], state: Mapping[int, TorState], n: int, schema: str
) -> SharedSelection | None:
    def order(t: int) -> tuple[int, int, int]:
        s = state[t]
        klass = {EXCLUSIVE: 0, SHARED: 1 if not s.healthy else 2, IDLE: 3}[s.kind]
        return klass, len(tors[t]), t

    def allowed(t: int) -> bool:
        unhealthy = state[t].kind == SHARED and not state[t].healthy
        return len(tors[t]) >= n and not (unhealthy and schema == LARGE_MODEL)

    fitting = sorted(filter(allowed, tors), key=order)
    if not fitting:
        return None
    return SharedSelection(tuple(tors[fitting[0]][:n]), (), (), "padding")


def _whole_idle(
    tors: Mapping[int, list[Server]], state: Mapping[int, TorState], n: int
) -> tuple[list[int], int]:
    """Idle ToRs taken whole, most free first, while the remainder fills the next one."""
    taken: list[int] = []
    remaining = n
    idle = sorted(
        (t for t in tors if state[t].kind == IDLE and tors[t]), key=lambda t: (-len(tors[t]), t)
    )
    for t in idle:
        if len(tors[t]) > remaining:
            break
        taken.append(t)
        remaining -= len(tors[t])
    return taken, remaining


def _closest(
    options: Iterable[tuple[int, ...]], tors: Mapping[int, list[Server]], need: int
) -> tuple[int, ...] | None:
    """The option whose free count is ≥ ``need`` and closest to it; more ToRs win a tie."""
    fitting = [o for o in options if sum(len(tors[t]) for t in o) >= need]
    if not fitting:
        return None
    return min(fitting, key=lambda o: (sum(len(tors[t]) for t in o), -len(o), o))


def _cross_tor(
    tors: Mapping[int, list[Server]], state: Mapping[int, TorState], n: int, limit: int
) -> SharedSelection | None:
    exclusive, remaining = _whole_idle(tors, state, n)
    if remaining == 0:
        return _selection(tors, exclusive, [], n, "exclusive")
    shared = sorted(t for t in tors if state[t].kind == SHARED and state[t].healthy and tors[t])
    options: list[tuple[int, ...]] = [(t,) for t in shared]
    if limit == 2:
        options += list(combinations(shared, 2))
    best = _closest(options, tors, remaining)
    if best is None:
        convertible = [
            t
            for t in tors
            if t not in exclusive
            and tors[t]
            and (state[t].kind == IDLE or (limit == 2 and state[t].kind == EXCLUSIVE))
        ]
        best = _closest(((t,) for t in convertible), tors, remaining)
    if best is None:
        return None
    return _selection(tors, exclusive, list(best), n, "shared")


def _normal_fallback(
    tors: Mapping[int, list[Server]], state: Mapping[int, TorState], n: int
) -> SharedSelection | None:
    exclusive = sorted(
        (t for t in tors if state[t].kind == IDLE and tors[t]), key=lambda t: (-len(tors[t]), t)
    )
    remaining = n - sum(len(tors[t]) for t in exclusive)
    if remaining <= 0:
        return None  # _cross_tor would have found this
    unhealthy = [t for t in tors if state[t].kind == SHARED and not state[t].healthy]
    normal_only = [
        t for t in tors if state[t].kind == SHARED and state[t].healthy and not state[t].large_model
    ]
    shared: list[int] = []
    for t in sorted(unhealthy, key=lambda t: (-len(tors[t]), t)) + sorted(
        normal_only, key=lambda t: (-len(tors[t]), t)
    ):
        if remaining <= 0:
            break
        if tors[t]:
            shared.append(t)
            remaining -= len(tors[t])
    if remaining > 0:
        return None
    return _selection(tors, exclusive, shared, n, "normal-fallback")


def _selection(
    tors: Mapping[int, list[Server]],
    exclusive: Sequence[int],
    shared: Sequence[int],
    n: int,
    how: str,
) -> SharedSelection:
    servers = [s for t in exclusive for s in tors[t]] + [s for t in shared for s in tors[t]]
    return SharedSelection(tuple(servers[:n]), tuple(exclusive), tuple(shared), how)


def apply(
    states: Mapping[int, TorState],
    selection: SharedSelection,
    job: str,
    schema: str,
    shared_tor_num: int,
) -> dict[int, TorState]:
    """The ToR states once ``job`` runs where ``selection`` put it (padding: unchanged)."""
    result = dict(states)
    large = schema == LARGE_MODEL
    for t in selection.exclusive:
        result[t] = TorState(EXCLUSIVE, True, frozenset({job}), large)
    too_many = len(selection.shared) > shared_tor_num
    for t in selection.shared:
        old = result.get(t, TorState())
        result[t] = TorState(
            SHARED, old.healthy and not too_many, old.jobs | {job}, old.large_model or large
        )
    return result


def states_from_pods(
    topology: Topology, pods: Iterable[tuple[str, str, Mapping[str, str], bool]]
) -> dict[int, TorState]:
    """ToR states rebuilt from live pods as upstream does each session: (job, node IP,
    annotations, large-model) of every pod of a cross-ToR job."""
    tor_of = {s.ip: s.tor for tor in topology.tors for s in tor}
    states: dict[int, TorState] = {}
    for job, ip, notes, large in pods:
        tor = tor_of.get(ip)
        kind = notes.get(TOR_SHARED_ANNOTATION)
        if tor is None or kind not in ("1", "2"):
            continue
        old = states.get(tor, TorState())
        jobs = old.jobs | {job}
        new_kind = EXCLUSIVE if kind == "2" and len(jobs) == 1 else SHARED
        healthy = old.healthy and notes.get(TOR_HEALTHY_ANNOTATION, "0") == "0"
        states[tor] = TorState(new_kind, healthy, jobs, old.large_model or large)
    return states


def pod_annotations(
    topology: Topology, selection: SharedSelection, ip: str, shared_tor_num: int
) -> dict[str, str]:
    """What the pod on server ``ip`` records so the next session can rebuild the states."""
    server = topology.server(ip)
    if server is None or not (selection.exclusive or selection.shared):
        return {}  # a padding job stays inside one ToR: it changes no ToR's state
    kind = EXCLUSIVE if server.tor in selection.exclusive else SHARED
    shared_ips = sorted({s.tor_ip for s in selection.servers if s.tor in selection.shared})
    return {
        TOR_SHARED_ANNOTATION: str(kind),
        TOR_HEALTHY_ANNOTATION: "1" if len(selection.shared) > shared_tor_num else "0",
        TOR_SHARED_IP_ANNOTATION: ",".join(shared_ips),
    }


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
