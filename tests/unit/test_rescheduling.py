"""Fault rescheduling: which jobs are fault jobs, how they are restarted, what is recorded."""

from __future__ import annotations

import hashlib
import json

import pytest

from contract.chip_names import InvalidInput
from contract.go_json import go_json
from contract.pods import pod_view
from scheduler_core.engine.rescheduling import (
    FORCE,
    GRACE,
    Deletion,
    JobPod,
    deletions,
    fault_config,
    find_faults,
    record,
    restore,
    restore_retries,
    retry_limit,
    verify,
)
from scheduler_core.service.gangs import job_pod
from simulation.memory import pod_object


def node(
    name: str, unhealthy: frozenset[int] = frozenset(), net: frozenset[int] = frozenset()
) -> frozenset[int]:
    """What a node's DeviceInfo reports failed: unhealthy and network-unhealthy chips."""
    return unhealthy | net


def pods(*nodes: str) -> list[JobPod]:
    return [
        JobPod("ns", f"job-{r}", f"uid-{r}", n, r, tuple(range(8))) for r, n in enumerate(nodes)
    ]


def test_a_pod_on_a_failed_chip_makes_its_job_a_fault_job_with_rank_ids_chip_plus_8_rank() -> None:
    # Chip 3 fails on the node of rank 1: fault rank id 3 + 8 × 1 = 11.
    nodes = {"a": node("a"), "b": node("b", frozenset({3}))}
    (fault,) = find_faults({"ns/job": (FORCE, pods("a", "b"))}, nodes, ())
    assert (fault.job, fault.nodes, fault.rank_ids) == ("ns/job", ("b",), (11,))
    assert fault.previous == {0: "a", 1: "b"}


def test_network_faults_and_vanished_nodes_count_and_jobs_without_the_label_are_left_alone() -> (
    None
):
    nodes = {"a": node("a", net=frozenset({0})), "b": node("b")}
    (fault,) = find_faults({"ns/job": (GRACE, pods("a", "b", "gone"))}, nodes, {"gone"})
    assert fault.nodes == ("a", "gone")
    assert fault.rank_ids == (0, *range(16, 24))  # chip 0 of rank 0; all of rank 2
    assert find_faults({"ns/job": ("off", pods("gone"))}, nodes, {"gone"}) == []
    assert find_faults({"ns/job": (FORCE, pods("a")[1:])}, nodes, ()) == []
    # A node neither listed healthy nor down (its state not yet stable) is judged later.
    assert find_faults({"ns/job": (FORCE, pods("b", "settling"))}, nodes, ()) == []


def test_force_deletes_every_pod_at_once_and_grace_waits_for_the_grace_over_time() -> None:
    (fault,) = find_faults({"ns/job": (FORCE, pods("a", "gone"))}, {"a": node("a")}, {"gone"})
    assert deletions(fault, seen=100, now=100, grace_over=900) == [
        Deletion("ns", "job-0", "uid-0", 0),
        Deletion("ns", "job-1", "uid-1", 0),
    ]
    graceful = find_faults({"ns/job": (GRACE, pods("a", "gone"))}, {"a": node("a")}, {"gone"})[0]
    assert {d.grace_seconds for d in deletions(graceful, 100, 999, 900)} == {None}
    assert {d.grace_seconds for d in deletions(graceful, 100, 1000, 900)} == {0}


def test_the_record_carries_a_check_code_over_the_go_json_of_the_rest() -> None:
    (fault,) = find_faults(
        {"ns/job": (FORCE, pods("a", "b"))}, {"a": node("a", frozenset({7}))}, {"b"}
    )
    data = record([(fault, 1700000000.5)])
    assert json.loads(data["fault-node"]) == ["a", "b"]
    assert json.loads(data["fault-job-910x8"]) == [
        {
            "FaultNodes": ["a", "b"],
            "FaultRankIds": ["7", *[str(8 + c) for c in range(8)]],
            "FaultStrategy": "force",
            "JobName": "ns/job",
            "RankNodes": {"0": "a", "1": "b"},
            "UpdateTime": 1700000000,
        }
    ]
    body = '{"fault-job-910x8":' + json.dumps(data["fault-job-910x8"]) + ',"fault-node":'
    body += json.dumps(data["fault-node"]) + "}"
    assert data["checkCode"] == hashlib.sha256(body.replace(" ", "").encode()).hexdigest()
    assert verify(data)
    assert not verify({**data, "fault-node": "[]"})


def test_fault_config_lists_the_fault_rank_ids_in_upstreams_field_order() -> None:
    (fault,) = find_faults(
        {"ns/job": (FORCE, pods("a", "b"))}, {"a": node("a"), "b": node("b", frozenset({3}))}, ()
    )
    data = fault_config(fault, 1700000000)
    assert data["fault-npus"] == '{"FaultRankIds":["11"],"CreatTime":1700000000}'
    assert data["checkCode"] == hashlib.sha256(data["fault-npus"].encode()).hexdigest()


def test_a_pods_chips_come_only_from_ascend_real() -> None:
    bound = pod_object(
        "ns",
        "p",
        "a",
        8,
        annotations={"huawei.com/AscendReal": "Ascend910-0,Ascend910-1", "hccl/rankIndex": "3"},
    )
    assert job_pod(pod_view(bound), fallback_rank=0) == JobPod(
        "ns", "p", "uid-ns-p", "a", 3, (0, 1)
    )
    chosen_only = pod_object("ns", "p", "a", 8, annotations={"huawei.com/Ascend910": "Ascend910-0"})
    assert job_pod(pod_view(chosen_only), 0) is None
    garbled = pod_object("ns", "p", "a", 8, annotations={"huawei.com/AscendReal": "chip-zero"})
    assert job_pod(pod_view(garbled), 0) is None
    unranked = pod_object("ns", "p", "a", 8, annotations={"huawei.com/AscendReal": "Ascend910-5"})
    assert job_pod(pod_view(unranked), 4) == JobPod("ns", "p", "uid-ns-p", "a", 4, (5,))


def test_grace_does_not_delete_a_terminating_pod_again_until_the_grace_is_over() -> None:
    members = [
        JobPod("ns", "p0", "u0", "a", 0, (0,), terminating=True),
        JobPod("ns", "p1", "u1", "gone", 1, (0,)),
    ]
    (fault,) = find_faults({"ns/job": (GRACE, members)}, {"a": node("a")}, {"gone"})
    assert deletions(fault, seen=0, now=10, grace_over=900) == [Deletion("ns", "p1", "u1", None)]
    assert [d.name for d in deletions(fault, 0, 900, 900)] == ["p0", "p1"]


def test_a_restarted_scheduler_reads_its_fault_jobs_back_from_the_record() -> None:
    (fault,) = find_faults(
        {"ns/job": (FORCE, pods("a", "b"))}, {"a": node("a"), "b": node("b", frozenset({3}))}, ()
    )
    (back, seen) = restore(record([(fault, 1700000000)]))[0]
    assert seen == 1700000000
    assert (back.job, back.mode, back.nodes, back.rank_ids) == ("ns/job", FORCE, ("b",), (11,))
    assert back.previous == {0: "a", 1: "b"}
    assert restore(record([])) == []
    tampered = {**record([(fault, 1)]), "fault-node": "[]"}
    with pytest.raises(InvalidInput, match="checkCode does not match"):
        restore(tampered)
    broken = {"fault-node": "[]", "fault-job-910x8": '[{"JobName": "x"}]'}
    broken["checkCode"] = hashlib.sha256(go_json(broken).encode()).hexdigest()
    with pytest.raises(InvalidInput, match="fault-job-910x8 is malformed"):
        restore(broken)


def test_restarts_left_are_recorded_under_the_check_code_and_read_back() -> None:
    data = record([], {"ns/job": 2})
    assert json.loads(data["remain-retry-times"]) == {"ns/job": {"Times": 2}}
    assert verify(data)
    assert restore_retries(data) == {"ns/job": 2}
    assert restore_retries(record([])) == {}
    with pytest.raises(InvalidInput, match="remain-retry-times is malformed"):
        restore_retries({"remain-retry-times": '{"ns/job": 3}'})
    assert retry_limit({}) is None
    assert retry_limit({"fault-retry-times": "3"}) == 3
    with pytest.raises(InvalidInput, match="fault-retry-times '-1' is not a number"):
        retry_limit({"fault-retry-times": "-1"})


def test_fault_rank_ids_count_the_pods_own_chips_so_16_chip_a3_ranks_do_not_overlap() -> None:
    # A 2 × 16 A3 gang: chip 3 fails under rank 1 → 3 + 16 × 1 = 19 (8 × rank gave 11, a
    # rank of pod 0). A pod of chips 8..15 counts its chips from its first: chip 11 → 3.
    whole = [JobPod("ns", f"a3-{r}", f"u{r}", n, r, tuple(range(16))) for r, n in enumerate("ab")]
    (fault,) = find_faults(
        {"ns/a3": (FORCE, whole)}, {"a": node("a"), "b": node("b", frozenset({3}))}, ()
    )
    assert fault.rank_ids == (19,)
    half = [JobPod("ns", f"h-{r}", f"v{r}", n, r, tuple(range(8, 16))) for r, n in enumerate("ab")]
    (fault,) = find_faults(
        {"ns/h": (GRACE, half)}, {"a": node("a", frozenset({11})), "b": node("b")}, ()
    )
    assert fault.rank_ids == (3,)
