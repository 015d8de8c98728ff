"""Choosing a multi-node job's nodes: plain, and after a fault (MindCluster ``internal/nslb``'s
order)."""

from __future__ import annotations

import pytest

from contract.tor_topology import parse_topology
from scheduler_core.engine.locality import Ask, Network, Settings, Unplaceable, choose
from scheduler_core.engine.tor_share import SHARED, TorState
from tests.unit.helpers import server_ip, tor_info

# Three ToRs of 2 servers: a0, a1 | b0, b1 | c0, c1.
TOPOLOGY = parse_topology(tor_info(3, per_tor=2))
ADDRESSES = {f"{name}{s}": server_ip(t, s) for t, name in enumerate("abc") for s in range(2)}


def ask(size: int) -> Ask:
    return Ask("ns/job", size, 8, 8, {}, {})


def test_a_job_without_network_wishes_takes_the_best_candidates_in_order() -> None:
    assert choose(ask(2), ["c1", "a0", "b0"], Network(), Settings()).nodes == ("c1", "a0")
    with pytest.raises(Unplaceable, match="1 of 2 nodes are free"):
        choose(ask(2), ["a0"], Network(), Settings())


def test_after_a_fault_moved_ranks_go_to_the_jobs_own_tor_then_shared_then_unused() -> None:
    # The job ran on a0 (rank 0) and b1 (rank 1, faulty). Candidates sorted best first:
    # c0 (ToR c: shared), b0 (ToR b: the job's own) → b0.
    network = Network(TOPOLOGY, ADDRESSES, {}, {2: TorState(SHARED)})
    previous = {0: "a0", 1: "b1"}
    chosen = choose(
        ask(2),
        ["c0", "b0", "a0"],
        network,
        Settings(),
        previous=previous,
        fault_nodes=frozenset({"b1"}),
    )
    assert chosen.nodes == ("a0", "b0")
    # ToR a is the job's own too (rank 0 ran there): a1 before the shared c0.
    chosen = choose(
        ask(2),
        ["c0", "a1", "a0"],
        network,
        Settings(),
        previous=previous,
        fault_nodes=frozenset({"b1"}),
    )
    assert chosen.nodes == ("a0", "a1")
    # Both of the job's ToRs full: shared c0 before unused ones.
    other = Network(TOPOLOGY, ADDRESSES | {"d0": "10.9.9.9"}, {}, {2: TorState(SHARED)})
    chosen = choose(
        ask(2),
        ["d0", "c0", "a0"],
        other,
        Settings(),
        previous=previous,
        fault_nodes=frozenset({"b1"}),
    )
    assert chosen.nodes == ("a0", "c0")


def test_a_fault_job_waits_until_its_healthy_nodes_are_free_again() -> None:
    with pytest.raises(Unplaceable, match="waiting for a0 of fault job ns/job to be released"):
        choose(
            ask(2),
            ["b0", "c0"],
            Network(),
            Settings(),
            previous={0: "a0", 1: "b1"},
            fault_nodes=frozenset({"b1"}),
        )


def test_tor_1_0_a_tor_under_a_multi_tor_job_is_kept_from_jobs_of_a_tor_or_more() -> None:
    # ToRs of 2: a multi-ToR job runs under ToR a (a0 busy, a1 free). A 5-pod normal job
    # could only fit by using a1: it waits. A 1-pod job (smaller than a ToR) may use a1.
    network = Network(TOPOLOGY, ADDRESSES, multi_job_tors=frozenset({0}))
    free = ["a1", "b0", "b1", "c0", "c1"]
    normal = Ask("ns/wide", 5, 8, 8, {"tor-affinity": "normal-schema"}, {})
    with pytest.raises(Unplaceable, match="no ToRs for 5 nodes yet"):
        choose(normal, free, network, Settings())
    assert "a1" in choose(normal, free, Network(TOPOLOGY, ADDRESSES), Settings()).nodes
    fill = Ask("ns/one", 1, 8, 8, {"tor-affinity": "normal-schema"}, {})
    assert choose(fill, free, network, Settings()).nodes == ("a1",)  # best fit: ToR a (1 free)


def test_a_superpod_job_after_a_fault_refills_its_virtual_superpod_in_place() -> None:
    # Two blocks of 2: vid 0 on a0, a1 (SuperPoD 0), vid 1 on b0, b1 (SuperPoD 1); b1 fails.
    super_pods = {"a0": 0, "a1": 0, "a2": 0, "b0": 1, "b1": 1, "b2": 1, "b3": 1}
    network = Network(super_pods=super_pods)
    job = Ask("ns/sp", 4, 8, 8, {}, {"sp-block": "16"})
    previous = {0: "a0", 1: "a1", 2: "b0", 3: "b1"}
    candidates = ["a0", "a1", "a2", "b0", "b2", "b3"]
    choice = choose(
        job, candidates, network, Settings(), previous=previous, fault_nodes=frozenset({"b1"})
    )
    assert choice.nodes == ("a0", "a1", "b0", "b2")  # b0 stays, b2 replaces b1
    assert [n["super-pod-rank"] for n in choice.notes] == ["0", "0", "1", "1"]
    with pytest.raises(Unplaceable, match="wait for normal node resource release"):
        choose(
            job,
            ["a1", "b0", "b2"],
            network,
            Settings(),
            previous=previous,
            fault_nodes=frozenset({"b1"}),
        )
    # SuperPoD 1 without a block's worth of free nodes: vid 1 is selected afresh.
    moved = choose(
        job,
        ["a0", "a1", "a2", "b0", "c0", "c1"],
        Network(super_pods=super_pods | {"c0": 2, "c1": 2}),
        Settings(),
        previous=previous,
        fault_nodes=frozenset({"b1", "b2", "b3"}),
    )
    assert moved.nodes[2:] == ("c0", "c1")


def test_a_one_task_superpod_job_takes_the_least_idle_healthy_node() -> None:
    network = Network(super_pods={"a": 0, "b": 0, "c": 0}, sub_healthy=frozenset({"b"}))
    job = Ask("ns/one", 1, 8, 2, {}, {"sp-block": "2"})
    idle = {"a": 8, "b": 2, "c": 2}
    assert choose(job, ["a", "b", "c"], network, Settings(), idle=idle).nodes == ("c",)


def test_a_mindie_job_goes_through_the_mindie_selection() -> None:
    network = Network(super_pods={f"n{i}": i // 4 for i in range(7)})  # 4 + 3 free
    job = Ask("ns/infer", 2, 8, 8, {"app": "mindie", "jobID": "j1"}, {"sp-block": "16"})
    choice = choose(job, [f"n{i}" for i in range(7)], network, Settings())
    assert set(choice.nodes) <= {"n0", "n1", "n2", "n3"}


def test_the_rest_of_a_superpod_job_waits_for_its_superpod_rather_than_leave_it() -> None:
    network = Network(super_pods={"a": 0, "b": 0, "c": 1})
    superpod_job = Ask("ns/sp", 1, 8, 8, {}, {"sp-block": "16"})
    running: dict[str, dict[str, str]] = {"a": {}}
    with pytest.raises(Unplaceable):
        choose(superpod_job, ["c"], network, Settings(), running=running)
    assert choose(superpod_job, ["c", "b"], network, Settings(), running=running).nodes == ("b",)
    assert choose(ask(1), ["c"], network, Settings(), running=running).nodes == ("c",)


def test_the_rest_of_a_large_model_job_waits_for_its_tor_rather_than_leave_it() -> None:
    network = Network(TOPOLOGY, ADDRESSES)
    large = Ask("ns/big", 1, 8, 8, {"tor-affinity": "large-model-schema"}, {})
    running: dict[str, dict[str, str]] = {"a0": {}}
    with pytest.raises(Unplaceable):
        choose(large, ["b0", "c0"], network, Settings(), running=running)
    assert choose(large, ["b0", "a1"], network, Settings(), running=running).nodes == ("a1",)
