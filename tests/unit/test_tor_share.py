"""Switch (ToR) affinity 2.0 on upstream's vectors (``internal/nslb/nslbv2_test.go`` on
``testdata/tor/tor-node.json``: N1, N3) and vectors traced through upstream's code (Nd)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.tor_topology import parse_topology
from scheduler_core.engine.tor import LARGE_MODEL, NORMAL
from scheduler_core.engine.tor_share import (
    EXCLUSIVE,
    IDLE,
    SHARED,
    SharedSelection,
    TorShareFailed,
    TorState,
    apply,
    encode,
    pod_annotations,
    reschedule,
    select,
    states_from_pods,
)
from tests.unit.helpers import server_ip, tor_info


def ip(k: int) -> str:
    return f"1.1.0.{k}"


def upstream_fixture() -> str:
    """``tor-node.json``: 4 servers a ToR; t0 shared, t1 free, t2 shared, t3 shared and
    unhealthy with two servers that are no node of the cluster."""
    flags = [(1, 0), (0, 0), (1, 0), (1, 1)]
    servers = [[ip(k) for k in range(4 * t, 4 * t + 4)] for t in range(3)]
    servers.append([ip(12), ip(13), "9.9.9.1", "9.9.9.2"])
    return json.dumps(
        {
            "version": "2.0",
            "tor_count": 4,
            "server_list": [
                {
                    "tor_id": t,
                    "tor_ip": f"1.0.0.{t}",
                    "IsSharedTor": flags[t][0],
                    "IsHealthy": flags[t][1],
                    "server": [
                        {"server_ip": a, "npu_count": 8, "slice_id": s}
                        for s, a in enumerate(servers[t])
                    ],
                }
                for t in range(4)
            ],
        }
    )


FIXTURE = parse_topology(upstream_fixture())
NODES = [ip(k) for k in range(16)]
START = states_from_pods(FIXTURE, [])


def tors_of(chosen: SharedSelection) -> list[tuple[int, int]]:
    """(ToR, servers given) of each entry, in order."""
    return [(e.tor, len(e.servers)) for e in chosen.entries]


def test_the_configmap_flags_start_the_states() -> None:
    assert {t: (s.kind, s.healthy) for t, s in START.items()} == {
        0: (SHARED, True),
        1: (IDLE, True),
        2: (SHARED, True),
        3: (SHARED, False),
    }


def test_n1_twelve_pods_take_the_free_tor_whole_and_the_two_shared_tors() -> None:
    chosen = select(FIXTURE, NODES, 12, NORMAL, states=START, shared_tor_num=2)
    assert tors_of(chosen) == [(1, 4), (0, 4), (2, 4)]
    assert chosen.marks == {1: (EXCLUSIVE, True)}
    assert chosen.scores(0) == {ip(4): 200}
    assert chosen.scores(5) == {
        ip(4): 100,
        ip(5): 100,
        ip(6): 100,
        ip(7): 100,
        ip(0): 99,
        ip(1): 200,
    }


def test_n1_pods_record_their_tors_state_and_the_shared_tors_ip() -> None:
    chosen = select(FIXTURE, NODES, 12, NORMAL, states=START, shared_tor_num=2)
    after = apply(START, chosen, "ns/job", NORMAL)
    assert pod_annotations(FIXTURE, chosen, ip(4), after) == {
        "isSharedTor": "2",
        "isHealthy": "0",
    }
    assert pod_annotations(FIXTURE, chosen, ip(0), after) == {
        "isSharedTor": "1",
        "isHealthy": "0",
        "sharedTorIp": "1.0.0.0",
    }


def test_n3_fifteen_pods_exceed_what_a_normal_job_may_take() -> None:
    with pytest.raises(TorShareFailed, match="not enough node for normal job to schedule"):
        select(FIXTURE, NODES, 15, NORMAL, states=START, shared_tor_num=2)


def test_nd1_with_one_shared_tor_allowed_a_normal_job_makes_its_shared_tors_unhealthy() -> None:
    chosen = select(FIXTURE, NODES, 12, NORMAL, states=START, shared_tor_num=1)
    assert tors_of(chosen) == [(1, 4), (3, 2), (0, 4), (2, 2)]
    after = apply(START, chosen, "ns/job", NORMAL)
    assert {t: (after[t].kind, after[t].healthy) for t in (0, 2, 3)} == dict.fromkeys(
        (0, 2, 3), (SHARED, False)
    )
    assert after[1].kind == EXCLUSIVE


def test_nd2_a_small_large_model_job_fills_the_first_shared_tor_in_configmap_order() -> None:
    chosen = select(FIXTURE, NODES, 3, LARGE_MODEL, states=START, shared_tor_num=2)
    assert tors_of(chosen) == [(0, 3)]
    assert pod_annotations(FIXTURE, chosen, ip(0), START) == {
        "isSharedTor": "0",
        "isHealthy": "0",
    }


def test_a_large_model_job_fails_with_upstreams_messages() -> None:
    busy = [ip(k) for k in (0, 1, 4, 5, 8, 9, 12)]
    with pytest.raises(TorShareFailed, match="tor check failed not enough resource for fill job"):
        select(FIXTURE, busy, 3, LARGE_MODEL, states=START, shared_tor_num=2)
    with pytest.raises(TorShareFailed, match="set tor failed by not enough nodes"):
        select(FIXTURE, NODES, 13, LARGE_MODEL, states=START, shared_tor_num=2)


FOUR = parse_topology(tor_info(4))  # ToR t: servers 10.t.0.0 … 10.t.0.3, all free


def servers(**counts: int) -> list[str]:
    return [server_ip(int(t[1:]), s) for t, k in counts.items() for s in range(k)]


def test_the_rest_beyond_whole_free_tors_comes_from_the_partial_tor_made_shared() -> None:
    # 6 pods: t0 (4) whole and exclusive; no shared ToR: the 2 left from t1, made shared.
    chosen = select(FOUR, servers(t0=4, t1=4), 6, LARGE_MODEL, states={}, shared_tor_num=2)
    assert tors_of(chosen) == [(0, 4), (1, 2)]
    assert chosen.marks == {0: (EXCLUSIVE, True), 1: (SHARED, True)}
    assert chosen.scores(5)[server_ip(1, 1)] == 200
    assert chosen.scores(5)[server_ip(1, 0)] == 99


def test_with_two_shared_tors_allowed_the_first_adjacent_pair_that_holds_the_rest_gives_it() -> (
    None
):
    states = {t: TorState(SHARED) for t in (1, 2, 3)}
    chosen = select(
        FOUR, servers(t0=4, t1=1, t2=2, t3=3), 7, NORMAL, states=states, shared_tor_num=2
    )
    # F: t0 whole (4); 3 left; S↑ = t1 (1), t2 (2), t3 (3): pair (t1, t2) holds 3.
    assert tors_of(chosen) == [(0, 4), (1, 1), (2, 2)]


def test_a_rescheduled_job_reuses_its_own_tors_first() -> None:
    # Ranks on t0 (exclusive) and t1 (shared) still run; one pod is missing; t0 has room.
    live = {server_ip(0, 0): {"isSharedTor": "2"}, server_ip(1, 0): {"isSharedTor": "1"}}
    states = {0: TorState(EXCLUSIVE), 1: TorState(SHARED)}
    chosen = reschedule(
        FOUR, servers(t0=4, t2=4), 1, live=live, states=states, shared_tor_num=2, job_size=6
    )
    assert tors_of(chosen) == [(0, 1)]


def test_a_rescheduled_job_short_on_its_own_tors_takes_free_tors_ascending() -> None:
    live = {server_ip(0, 0): {"isSharedTor": "2"}}
    states = {0: TorState(EXCLUSIVE), 3: TorState(EXCLUSIVE)}
    chosen = reschedule(
        FOUR,
        servers(t0=1, t1=4, t2=3, t3=4),
        4,
        live=live,
        states=states,
        shared_tor_num=2,
        job_size=5,
    )
    # Own t0 gives 1; then free ToRs ascending: t2 (3) whole; exclusive t3 is not for it.
    assert tors_of(chosen) == [(0, 1), (2, 3)]
    assert chosen.marks[2] == (EXCLUSIVE, True)


def test_every_idle_tor_a_rescheduled_job_uses_is_marked_as_upstreams_set_used_tor_attr() -> None:
    """Traced from upstream (internal/nslb/util.go setUsedTorAttr, called by nslbv2.go
    setServerListForPartialPods): a job of 8 with pods bound without ``isSharedTor`` on t0
    (1 pod, 3 servers free) and t1 (2 pods, 2 free) misses 1 pod. t0 gives it and, with 3
    free > 1 + 1, becomes shared; t1 gives nothing, but its 2 free do not exceed its 2 pods
    by more than one: it becomes exclusive (it stayed idle)."""
    live: dict[str, dict[str, str]] = {
        server_ip(0, 0): {}, server_ip(1, 0): {}, server_ip(1, 1): {},
    }  # fmt: skip
    candidates = [server_ip(0, s) for s in (1, 2, 3)] + [server_ip(1, s) for s in (2, 3)]
    chosen = reschedule(FOUR, candidates, 1, live=live, states={}, shared_tor_num=2, job_size=8)
    assert tors_of(chosen) == [(0, 1)]
    assert chosen.marks == {0: (SHARED, True), 1: (EXCLUSIVE, True)}
    after = apply({}, chosen, "ns/job", NORMAL)
    assert (after[0].kind, after[1].kind) == (SHARED, EXCLUSIVE)
    # One shared ToR left to add (shared-tor-num 1): t0 takes it, t1 is exclusive again;
    # a job short on its own ToRs marks every used idle ToR exclusive (noneSharedTor).
    one = reschedule(FOUR, candidates, 1, live=live, states={}, shared_tor_num=1, job_size=8)
    assert one.marks == {0: (SHARED, True), 1: (EXCLUSIVE, True)}
    short = reschedule(
        FOUR, [*candidates, *servers(t2=4)], 6, live=live, states={}, shared_tor_num=2,
        job_size=9,
    )  # fmt: skip
    assert short.marks[0] == short.marks[1] == (EXCLUSIVE, True)


def test_a_pod_bound_without_is_shared_tor_does_not_pin_its_job_to_one_tor() -> None:
    # Traced from upstream (nslbv2.go): only an explicit "0" (freeTorAnno) makes a job
    # single-ToR; a pod another scheduler bound carries no annotation.
    live: dict[str, dict[str, str]] = {server_ip(0, 0): {}}
    chosen = reschedule(FOUR, servers(t1=4), 4, live=live, states={}, shared_tor_num=2, job_size=5)
    assert tors_of(chosen) == [(1, 4)]


def test_a_restarted_pod_records_its_tors_state_when_its_job_spans_two_tors() -> None:
    # The job's server list keeps the ToRs its running pods use (setServerListForPartialPods),
    # so the one missing pod, placed back on t0, records t0's state, not "0"/"0".
    live = {server_ip(0, 0): {"isSharedTor": "2"}, server_ip(1, 0): {"isSharedTor": "1"}}
    states = {0: TorState(EXCLUSIVE), 1: TorState(SHARED)}
    chosen = reschedule(
        FOUR, servers(t0=4), 1, live=live, states=states, shared_tor_num=2, job_size=6
    )
    assert tors_of(chosen) == [(0, 1)] and chosen.tors == {0, 1}
    after = apply(states, chosen, "ns/job", LARGE_MODEL)
    notes = pod_annotations(FOUR, chosen, chosen.servers[0].ip, after)
    assert notes == {"isSharedTor": "2", "isHealthy": "0"}
    assert all("ns/job" in after[t].jobs for t in (0, 1)), "every ToR it uses records it"


def test_rescheduling_fails_with_upstreams_messages() -> None:
    live = {server_ip(0, 0): {"isSharedTor": "0"}}
    with pytest.raises(TorShareFailed, match="not enough tor for fill job restart"):
        reschedule(FOUR, servers(t1=4), 2, live=live, states={}, shared_tor_num=2, job_size=3)
    # A job that ran on one ToR may not spread to others.
    with pytest.raises(TorShareFailed, match="not enough tor for job restart"):
        reschedule(FOUR, servers(t1=4), 4, live=live, states={}, shared_tor_num=2, job_size=5)


def test_states_round_trip_through_the_pods_annotations() -> None:
    chosen = select(FOUR, servers(t0=4, t1=3), 6, LARGE_MODEL, states={}, shared_tor_num=1)
    after = apply({}, chosen, "ns/job", LARGE_MODEL)
    notes = {s.ip: pod_annotations(FOUR, chosen, s.ip, after) for s in chosen.servers}
    rebuilt = states_from_pods(FOUR, [("ns/job", a, n, True) for a, n in notes.items()])
    assert rebuilt == after


def test_tor_share_configmap_lists_each_tor_state_and_the_jobs_on_its_nodes() -> None:
    small = parse_topology(tor_info(2))
    states = {0: TorState(EXCLUSIVE, True, frozenset({"ns/a"}))}
    data = encode(small, states, {"10.0.0.1": ["ns/a"]}, {"10.0.0.1": "node-1"})
    assert data == {
        "global-tor-info": '{"1.0.0.0":{"IsHealthy":0,"IsSharedTor":2,"nodes":[{"NodeIp":'
        '"10.0.0.1","NodeName":"node-1","JobName":["ns/a"]}]},'
        '"1.0.0.1":{"IsHealthy":0,"IsSharedTor":0,"nodes":[]}}'
    }


EIGHT = parse_topology(tor_info(8))
kinds = st.sampled_from([IDLE, SHARED, EXCLUSIVE])


@settings(max_examples=300, deadline=None)
@given(
    frees=st.lists(st.integers(0, 4), min_size=8, max_size=8),
    kinds_=st.lists(kinds, min_size=8, max_size=8),
    healthy=st.lists(st.booleans(), min_size=8, max_size=8),
    n=st.integers(1, 24),
    limit=st.sampled_from([1, 2]),
    schema=st.sampled_from([LARGE_MODEL, NORMAL]),
)
def test_a_placed_job_gets_n_distinct_candidates_and_a_large_one_respects_the_shared_limit(
    *,
    frees: list[int],
    kinds_: list[int],
    healthy: list[bool],
    n: int,
    limit: int,
    schema: str,
) -> None:
    states = {t: TorState(k, h) for t, (k, h) in enumerate(zip(kinds_, healthy, strict=True))}
    candidates = servers(**{f"t{t}": k for t, k in enumerate(frees)})
    try:
        chosen = select(EIGHT, candidates, n, schema, states=states, shared_tor_num=limit)
    except TorShareFailed:
        return
    ips = [s.ip for s in chosen.servers]
    assert len(ips) == n and len(set(ips)) == n and set(ips) <= set(candidates)
    assert all(states[t].kind == IDLE for t, m in chosen.marks.items() if m == (EXCLUSIVE, True))
    if schema == LARGE_MODEL and len(chosen.entries) > 1:
        shared = [e for e in chosen.entries if e.shared]
        assert len(shared) <= limit
        assert not any(states[e.tor].kind == SHARED and not states[e.tor].healthy for e in shared)
