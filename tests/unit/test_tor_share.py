"""Switch (ToR) affinity 2.0 on small hand-computed clusters (ToRs of 4 servers)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_core.engine.tor import LARGE_MODEL, NORMAL, Topology, parse_topology
from scheduler_core.engine.tor_share import (
    EXCLUSIVE,
    IDLE,
    SHARED,
    TorState,
    apply,
    encode,
    pod_annotations,
    select,
    states_from_pods,
)
from tests.unit.helpers import server_ip, tor_info

TOPOLOGY = parse_topology(tor_info(8))
SHARED_OK = TorState(SHARED, True, frozenset({"ns/other"}))
SHARED_BAD = TorState(SHARED, False, frozenset({"ns/other"}))
TAKEN = TorState(EXCLUSIVE, True, frozenset({"ns/other"}))


def free(**counts: int) -> list[str]:
    """Candidate server IPs: the first ``k`` servers of ToR ``t`` for ``t<k>=k``."""
    return [server_ip(int(t[1:]), s) for t, k in counts.items() for s in range(k)]


def test_a_padding_job_prefers_an_exclusive_tor_then_unhealthy_shared_then_shared_then_idle() -> (
    None
):
    states = {1: TAKEN, 2: SHARED_OK, 3: SHARED_BAD}
    candidates = free(t0=4, t1=3, t2=2, t3=2)
    first = select(TOPOLOGY, candidates, 2, NORMAL, states=states, shared_tor_num=1)
    assert first is not None and {s.tor for s in first.servers} == {1}
    assert (first.exclusive, first.shared, first.how) == ((), (), "padding")
    # ToR 1 has 1 free < 2: the unhealthy shared ToR 3 is next, then the shared ToR 2.
    second = select(
        TOPOLOGY, free(t0=4, t1=1, t2=2, t3=2), 2, NORMAL, states=states, shared_tor_num=1
    )
    assert second is not None and {s.tor for s in second.servers} == {3}
    third = select(TOPOLOGY, free(t0=4, t1=1, t2=2), 2, NORMAL, states=states, shared_tor_num=1)
    assert third is not None and {s.tor for s in third.servers} == {2}


def test_a_padding_job_on_idle_tors_takes_the_one_closest_to_its_size() -> None:
    # 2 pods; idle ToRs with 4 and 3 free: 3 − 2 = 1 < 4 − 2 = 2 → ToR 1.
    chosen = select(TOPOLOGY, free(t0=4, t1=3), 2, LARGE_MODEL, states={}, shared_tor_num=1)
    assert chosen is not None and {s.tor for s in chosen.servers} == {1}


def test_a_large_model_padding_job_never_lands_on_an_unhealthy_shared_tor() -> None:
    states = {0: SHARED_BAD}
    assert select(TOPOLOGY, free(t0=4), 2, LARGE_MODEL, states=states, shared_tor_num=1) is None
    normal = select(TOPOLOGY, free(t0=4), 2, NORMAL, states=states, shared_tor_num=1)
    assert normal is not None and {s.tor for s in normal.servers} == {0}


def test_8_pods_on_idle_tors_take_two_whole_tors_exclusively() -> None:
    chosen = select(TOPOLOGY, free(t0=4, t1=4, t2=4), 8, LARGE_MODEL, states={}, shared_tor_num=1)
    assert chosen is not None
    assert (chosen.exclusive, chosen.shared, chosen.how) == ((0, 1), (), "exclusive")
    assert [s.ip for s in chosen.servers] == free(t0=4, t1=4)


def test_9_pods_take_two_idle_tors_whole_and_the_last_pod_from_the_closest_shared_tor() -> None:
    # Idle 4 + 4 = 8 ≤ 9, the third idle ToR (4) > remainder 1 → stop; shared ToRs free 3, 1:
    # 1 is closest to 1.
    states = {3: SHARED_OK, 4: SHARED_OK}
    candidates = free(t0=4, t1=4, t2=4, t3=3, t4=1)
    chosen = select(TOPOLOGY, candidates, 9, LARGE_MODEL, states=states, shared_tor_num=1)
    assert chosen is not None
    assert (chosen.exclusive, chosen.shared) == ((0, 1), (4,))
    assert [s.ip for s in chosen.servers] == free(t0=4, t1=4, t4=1)


def test_with_two_shared_tors_allowed_a_pair_wins_a_tie_with_a_single_tor() -> None:
    # Remainder 3 (4 + 3): shared free 3 (ToR 3), 1 (ToR 4), 2 (ToR 5). Singles 3, 1, 2;
    # pairs 4, 5, 3. Closest ≥ 3: ToR 3 alone (3) and ToRs 4 + 5 (3) tie → the pair.
    states = {3: SHARED_OK, 4: SHARED_OK, 5: SHARED_OK}
    candidates = free(t0=4, t3=3, t4=1, t5=2)
    two = select(TOPOLOGY, candidates, 7, LARGE_MODEL, states=states, shared_tor_num=2)
    assert two is not None and (two.exclusive, two.shared) == ((0,), (4, 5))
    one = select(TOPOLOGY, candidates, 7, LARGE_MODEL, states=states, shared_tor_num=1)
    assert one is not None and (one.exclusive, one.shared) == ((0,), (3,))


def test_without_a_fitting_shared_tor_the_closest_idle_tor_becomes_shared() -> None:
    # 6 pods: idle 4 (ToR 0) taken whole, remainder 2; no shared ToR; idle ToR 1 (4) and
    # ToR 2 (3): 3 is closest to 2 → ToR 2 turns shared.
    chosen = select(TOPOLOGY, free(t0=4, t1=4, t2=3), 6, LARGE_MODEL, states={}, shared_tor_num=1)
    assert chosen is not None and (chosen.exclusive, chosen.shared) == ((0,), (2,))
    chosen = select(TOPOLOGY, free(t0=4, t1=3, t2=3), 6, LARGE_MODEL, states={}, shared_tor_num=1)
    # Idle 4 taken (remainder 2), next idle 3 > 2 stops; closest idle for 2 is ToR 1 (3).
    assert chosen is not None and (chosen.exclusive, chosen.shared) == ((0,), (1,))
    after = apply({}, chosen, "ns/job", LARGE_MODEL, 1)
    assert after[0] == TorState(EXCLUSIVE, True, frozenset({"ns/job"}), True)
    assert after[1] == TorState(SHARED, True, frozenset({"ns/job"}), True)


def test_with_two_shared_tors_allowed_an_exclusive_tor_may_turn_shared() -> None:
    # Remainder 2 after ToR 0; no shared or idle ToR left, ToR 1 exclusive with 2 free.
    states = {1: TAKEN}
    candidates = free(t0=4, t1=2)
    assert select(TOPOLOGY, candidates, 6, LARGE_MODEL, states=states, shared_tor_num=1) is None
    two = select(TOPOLOGY, candidates, 6, LARGE_MODEL, states=states, shared_tor_num=2)
    assert two is not None and (two.exclusive, two.shared) == ((0,), (1,))


def test_a_normal_job_falls_back_to_unhealthy_then_normal_only_shared_tors() -> None:
    # 9 pods: idle ToR 0 (4) whole, remainder 5: shared ToRs are unhealthy (ToR 1, 3 free)
    # or hold a large-model job (ToR 2) → large-model waits; normal takes ToR 0, then ToR 1
    # (3, remainder 2), then the normal-only shared ToR 3 (2).
    states = {
        1: SHARED_BAD,
        2: TorState(SHARED, True, frozenset({"ns/big"}), True),
        3: SHARED_OK,
    }
    candidates = free(t0=4, t1=3, t2=4, t3=2)
    assert select(TOPOLOGY, candidates, 9, LARGE_MODEL, states=states, shared_tor_num=1) is None
    chosen = select(TOPOLOGY, candidates, 9, NORMAL, states=states, shared_tor_num=1)
    assert chosen is not None and chosen.how == "normal-fallback"
    assert (chosen.exclusive, chosen.shared) == ((0,), (1, 3))
    after = apply(states, chosen, "ns/job", NORMAL, 1)
    assert not after[3].healthy and after[3].jobs == {"ns/other", "ns/job"}  # 2 > 1 allowed


def test_states_round_trip_through_the_pods_annotations() -> None:
    chosen = select(TOPOLOGY, free(t0=4, t1=3, t2=3), 6, LARGE_MODEL, states={}, shared_tor_num=1)
    assert chosen is not None
    notes = {s.ip: pod_annotations(TOPOLOGY, chosen, s.ip, 1) for s in chosen.servers}
    assert notes["10.0.0.0"] == {"isSharedTor": "2", "isHealthy": "0", "sharedTorIp": "1.0.0.1"}
    assert notes["10.1.0.0"]["isSharedTor"] == "1"
    rebuilt = states_from_pods(TOPOLOGY, [("ns/job", ip, n, True) for ip, n in notes.items()])
    assert rebuilt == apply({}, chosen, "ns/job", LARGE_MODEL, 1)


def test_tor_share_configmap_lists_each_tor_state_and_the_jobs_on_its_nodes() -> None:
    small = Topology(4, TOPOLOGY.tors[:2])
    states = {0: TorState(EXCLUSIVE, True, frozenset({"ns/a"}))}
    data = encode(small, states, {"10.0.0.1": ["ns/a"]}, {"10.0.0.1": "node-1"})
    assert data == {
        "global-tor-info": '{"1.0.0.0":{"IsHealthy":0,"IsSharedTor":2,"nodes":[{"NodeIp":'
        '"10.0.0.1","NodeName":"node-1","JobName":["ns/a"]}]},'
        '"1.0.0.1":{"IsHealthy":0,"IsSharedTor":0,"nodes":[]}}'
    }


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
def test_a_large_model_job_never_exceeds_the_shared_limit_nor_touches_an_unhealthy_shared_tor(
    *,
    frees: list[int],
    kinds_: list[int],
    healthy: list[bool],
    n: int,
    limit: int,
    schema: str,
) -> None:
    states = {
        t: TorState(k, h or k != SHARED, frozenset({"ns/x"}) if k != IDLE else frozenset())
        for t, (k, h) in enumerate(zip(kinds_, healthy, strict=True))
    }
    candidates = free(**{f"t{t}": k for t, k in enumerate(frees)})
    chosen = select(TOPOLOGY, candidates, n, schema, states=states, shared_tor_num=limit)
    if chosen is None:
        return
    ips = [s.ip for s in chosen.servers]
    assert len(ips) == n and len(set(ips)) == n and set(ips) <= set(candidates)
    used = {s.tor for s in chosen.servers}
    assert used <= set(chosen.exclusive) | set(chosen.shared) or chosen.how == "padding"
    assert all(states[t].kind == IDLE for t in chosen.exclusive)
    if schema == LARGE_MODEL:
        assert len(chosen.shared) <= limit
        assert not any(states[t].kind == SHARED and not states[t].healthy for t in used)
