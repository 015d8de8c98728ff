"""Switch (ToR) affinity 1.0 on small hand-computed clusters."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.chip_names import InvalidInput
from contract.tor_topology import parse_topology
from scheduler_core.engine.tor import (
    DISABLED,
    LARGE_MODEL,
    NORMAL,
    TorInvalid,
    affinity_of,
    row_and_column,
    select,
)
from tests.unit.helpers import server_ip, tor_info

ip = server_ip


def test_upstream_example_22_pods_on_tors_of_4_take_5_whole_tors_and_2_servers() -> None:
    # row = 22 // 4 = 5, column = (22 % 4 + 3) % 4 = 1 → 5 × 4 + (1 + 1) = 22
    assert row_and_column(22, 4) == (5, 1)
    topology = parse_topology(tor_info(7))
    everything = [s.ip for t in topology.tors for s in t]
    selection = select(topology, everything, 22, LARGE_MODEL)
    assert selection is not None and selection.how == "whole-tors"
    assert [s.ip for s in selection.servers] == [ip(t, s) for t in range(5) for s in range(4)] + [
        ip(5, 0),
        ip(5, 1),
    ]


def test_8_pods_on_tors_of_4_are_1_whole_tor_and_4_servers_of_the_next() -> None:
    # 8 divides by 4: row = 8 // 4 − 1 = 1, column = (0 + 3) % 4 = 3 → 4 + 4
    assert row_and_column(8, 4) == (1, 3)


def test_a_fill_job_takes_the_tor_with_the_fewest_free_servers_that_fits() -> None:
    topology = parse_topology(tor_info(3))
    # free: ToR 0 all 4, ToR 1 three (slices 0-2), ToR 2 two (slices 0-1); 3 pods → ToR 1
    free = (
        [ip(0, s) for s in range(4)] + [ip(1, s) for s in range(3)] + [ip(2, s) for s in range(2)]
    )
    selection = select(topology, free, 3, LARGE_MODEL)
    assert selection is not None and selection.how == "fill"
    assert {s.tor for s in selection.servers} == {1}


def test_a_large_model_fill_job_that_fits_no_single_tor_waits() -> None:
    topology = parse_topology(tor_info(2))
    free = [ip(0, 0), ip(0, 1), ip(1, 0), ip(1, 1)]  # 2 + 2 free, 3 pods
    assert select(topology, free, 3, LARGE_MODEL) is None
    normal = select(topology, free, 3, NORMAL)
    assert normal is not None and normal.how == "greedy" and len(normal.servers) == 3


def test_without_whole_tors_logical_tors_are_built_across_slices() -> None:
    # Four ToRs, each missing one slice: no whole ToR, but every slice has 3 free servers.
    # 8 pods: row 1, column 3 → logical ToR 0 (one server of each slice) + 4 of logical ToR 1.
    topology = parse_topology(tor_info(4))
    missing = {0: 3, 1: 2, 2: 1, 3: 0}
    free = [ip(t, s) for t in range(4) for s in range(4) if s != missing[t]]
    selection = select(topology, free, 8, LARGE_MODEL)
    assert selection is not None and selection.how == "logical-tors"
    assert len(selection.servers) == 8 and len(set(selection.servers)) == 8
    first, second = selection.servers[:4], selection.servers[4:]
    assert sorted(s.slice_id for s in first) == [0, 1, 2, 3], "one server of every slice"
    assert sorted(s.slice_id for s in second) == [0, 1, 2, 3]


def test_a_slice_too_thin_for_logical_tors_makes_a_large_model_job_wait() -> None:
    # Three ToRs with slices 0-2 free and slice 3 used everywhere; 6 pods need row 1 of
    # logical ToRs, but slice 3 is empty (last slice 0 < row 1).
    topology = parse_topology(tor_info(3))
    free = [ip(t, s) for t in range(3) for s in range(3)]
    assert select(topology, free, 6, LARGE_MODEL) is None
    assert select(topology, free, 6, NORMAL) is not None


@pytest.mark.parametrize(
    ("labels", "error"),
    [
        (
            {"tor-affinity": "spread"},
            "job tor affinity label check failed,tor-affinity label value is spread",
        ),
    ],
)
def test_an_unknown_schema_is_refused_with_upstreams_message(
    labels: dict[str, str], error: str
) -> None:
    with pytest.raises(TorInvalid) as raised:
        affinity_of(labels, parse_topology(tor_info(1)))
    assert str(raised.value) == error


def test_affinity_without_the_topology_configmap_is_refused() -> None:
    with pytest.raises(TorInvalid, match="cluster basic-tor-node-cm is not imported"):
        affinity_of({"tor-affinity": LARGE_MODEL}, None)
    assert affinity_of({}, None) == DISABLED
    assert affinity_of({"tor-affinity": "null"}, None) == DISABLED


def test_a_malformed_topology_names_the_problem() -> None:
    with pytest.raises(InvalidInput, match="tor_info is malformed"):
        parse_topology('{"tor_count": 4}')


@settings(max_examples=200, deadline=None)
@given(
    tors=st.integers(1, 6),
    per_tor=st.integers(1, 5),
    used=st.sets(st.tuples(st.integers(0, 5), st.integers(0, 4)), max_size=12),
    n=st.integers(1, 20),
    schema=st.sampled_from([LARGE_MODEL, NORMAL]),
)
def test_a_selection_is_n_distinct_free_servers_and_a_fill_job_stays_on_one_tor(
    tors: int, per_tor: int, used: set[tuple[int, int]], n: int, schema: str
) -> None:
    topology = parse_topology(tor_info(tors, per_tor))
    free = [s.ip for t in topology.tors for s in t if (s.tor, s.slice_id) not in used]
    selection = select(topology, free, n, schema)
    if selection is None:
        return
    ips = [s.ip for s in selection.servers]
    assert len(ips) == len(set(ips)) == n
    assert set(ips) <= set(free)
    if selection.how == "fill":
        assert len({s.tor for s in selection.servers}) == 1
    if schema == LARGE_MODEL:
        assert selection.how != "greedy"


def test_whole_tors_are_used_only_while_more_remain_than_row_plus_one_like_vol_v5() -> None:
    # 22 pods need row + 1 = 6 ToRs; with exactly 6 whole ToRs VOL-v5 (row + 1 < whole)
    # builds logical ToRs instead (MindCluster's ≤ would take the whole ToRs).
    topology = parse_topology(tor_info(6))
    selection = select(topology, [s.ip for t in topology.tors for s in t], 22, LARGE_MODEL)
    assert selection is not None and selection.how == "logical-tors"
    assert len(selection.servers) == 22


def single_layer(tors: int) -> str:
    raw = json.loads(tor_info(tors))
    return json.dumps({**raw, "tor_level": "single_layer"})


def test_a_single_layer_fabric_builds_no_logical_tors_a_large_job_waits_a_normal_one_spreads() -> (
    None
):
    # The case above on a fabric without a spine: slices across ToRs share no switch.
    topology = parse_topology(single_layer(4))
    assert topology.single_layer
    missing = {0: 3, 1: 2, 2: 1, 3: 0}
    free = [ip(t, s) for t in range(4) for s in range(4) if s != missing[t]]
    assert select(topology, free, 8, LARGE_MODEL) is None
    normal = select(topology, free, 8, NORMAL)
    assert normal is not None and normal.how == "greedy"
    # Whole ToRs and fill jobs are as on two layers.
    assert select(topology, free, 2, LARGE_MODEL) is not None
    whole = select(topology, [ip(t, s) for t in range(4) for s in range(4)], 6, LARGE_MODEL)
    assert whole is not None and whole.how == "whole-tors"


def test_the_tor_level_and_the_tor_flags_are_checked() -> None:
    raw = json.loads(tor_info(1))
    with pytest.raises(InvalidInput, match="tor_level 'three' is not single_layer"):
        parse_topology(json.dumps({**raw, "tor_level": "three"}))
    raw["server_list"][0]["IsSharedTor"] = 5
    with pytest.raises(InvalidInput, match=r"IsSharedTor 5 is not in 0\.\.2"):
        parse_topology(json.dumps(raw))
