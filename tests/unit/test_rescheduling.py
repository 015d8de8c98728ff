"""Fault rescheduling: which jobs are fault jobs, how they are restarted, what is recorded."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Collection, Iterable, Mapping

import pytest

from contract.chip_names import InvalidInput
from contract.go_json import go_json
from contract.pods import pod_view
from scheduler_core.engine.racks import SAME_RACK, WHOLE_RACK
from scheduler_core.engine.rescheduling import (
    FORCE,
    GRACE,
    JOB_STAGE,
    RA_BLOCK_STAGE,
    SUPER_POD_STAGE,
    Deletion,
    FaultJob,
    JobPod,
    Recovery,
    deletions,
    fault_config,
    record,
    recovery_of,
    refill_stage,
    reset_config,
    restore,
    restore_retries,
    retry_limit,
    scope,
    verify,
)
from scheduler_core.engine.rescheduling import find_faults as find_faults_for
from scheduler_core.service.state.gang_pods import job_pod
from simulation.memory import pod_object


def find_faults(
    jobs: Mapping[str, tuple[str, Iterable[JobPod]]],
    failed: Mapping[str, frozenset[int]],
    down: Collection[str],
    recoveries: Mapping[str, Recovery] | None = None,
    sub_healthy: Collection[str] = (),
) -> list[FaultJob]:
    """Every job sees the same failed chips."""
    return find_faults_for(jobs, lambda _job: failed, down, recoveries, sub_healthy)


def node(
    name: str, unhealthy: frozenset[int] = frozenset(), net: frozenset[int] = frozenset()
) -> frozenset[int]:
    """The chips that fail a pod on a node (``chip_faults.node_faults``), in two sets."""
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


def test_failed_chips_and_vanished_nodes_count_and_jobs_without_the_label_are_left_alone() -> None:
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


# ---- pod-level rescheduling and process-level recovery ---------------------------------
# Cases after Ascend/mind-cluster component/ascend-for-volcano/internal/rescheduling/
# job_test.go TestIsNormalTaskCanBeDelete (01: a healthy task of a pod-rescheduling job that
# is no SuperPoD job is kept; 02: a SuperPoD job's is kept while fewer than 6 sessions
# passed; 04: a process-recovery job's healthy task is kept; 05: without either, deleted),
# TestIsMasterFault (rank 0 failing restarts the whole job) and job_v2_test.go
# TestInTheSameVSuperPod.

FOUR = ("a", "b", "c", "d")
POD_LEVEL = Recovery(pod_level=True)


def four_with_fault_on(rank: int, recovery: Recovery) -> FaultJob:
    failed = {FOUR[rank]: frozenset({2})}
    (fault,) = find_faults({"ns/job": (FORCE, pods(*FOUR))}, failed, (), {"ns/job": recovery})
    return fault


def deleted(fault: FaultJob, waited: float) -> list[str]:
    return [d.name for d in deletions(fault, 0.0, waited, 900.0)]


def test_pod_rescheduling_deletes_only_the_pod_on_the_failed_chip() -> None:
    fault = four_with_fault_on(2, POD_LEVEL)
    assert (fault.failed, fault.moving) == ((2,), frozenset({2}))
    assert deleted(fault, 0.0) == ["job-2"], "the other three keep running"
    assert fault.previous == {0: "a", 1: "b", 2: "c", 3: "d"}


def test_rank_0_failing_restarts_the_whole_job() -> None:
    fault = four_with_fault_on(0, POD_LEVEL)
    assert fault.moving is None
    assert deleted(fault, 0.0) == ["job-0", "job-1", "job-2", "job-3"]


def test_rank_0_labelled_a_kubeflow_worker_is_no_master_and_moves_alone() -> None:
    # TestIsMaterRank: a rank-0 task labelled training.kubeflow.org/replica-type: worker is
    # not the master; "master" or no label is.
    def labelled(kind: str | None) -> JobPod | None:
        labels = {} if kind is None else {"training.kubeflow.org/replica-type": kind}
        notes = {"huawei.com/AscendReal": "Ascend910-2", "hccl/rankIndex": "0"}
        return job_pod(pod_view(pod_object("ns", "p", "a", 1, annotations=notes, labels=labels)), 0)

    assert [p is not None and p.master for p in map(labelled, (None, "master", "worker"))] == [
        True,
        True,
        False,
    ]
    members = [dataclasses.replace(p, worker=True) for p in pods(*FOUR)]
    (fault,) = find_faults(
        {"ns/job": (FORCE, members)}, {"a": frozenset({2})}, (), {"ns/job": POD_LEVEL}
    )
    assert (fault.moving, deleted(fault, 0.0)) == (frozenset({0}), ["job-0"])
    # In a SuperPoD job its virtual SuperPoD widens without restarting the job.
    block = dataclasses.replace(fault, recovery=Recovery(pod_level=True, block=2))
    assert scope(block, SUPER_POD_STAGE) == frozenset({0, 1})


def test_without_the_label_the_whole_job_restarts_as_before() -> None:
    assert deleted(four_with_fault_on(2, Recovery()), 0.0) == [f"job-{r}" for r in range(4)]


def test_a_pod_level_job_that_is_no_super_pod_job_widens_to_the_job_after_12_sessions() -> None:
    fault = four_with_fault_on(2, POD_LEVEL)
    assert deleted(fault, SUPER_POD_STAGE) == ["job-2"], "no SuperPoD stage without sp-block"
    assert deleted(fault, JOB_STAGE) == [f"job-{r}" for r in range(4)]


def test_a_super_pod_job_widens_to_the_faulty_pods_virtual_super_pod_then_the_job() -> None:
    # Two pods per virtual SuperPoD (sp-block 16 of 8-chip pods): ranks 2 and 3 together.
    fault = four_with_fault_on(2, Recovery(pod_level=True, block=2))
    assert deleted(fault, SUPER_POD_STAGE - 1) == ["job-2"]
    assert deleted(fault, SUPER_POD_STAGE) == ["job-2", "job-3"]
    assert deleted(fault, JOB_STAGE) == [f"job-{r}" for r in range(4)]
    # The master's virtual SuperPoD widened: the whole job (isMasterFaultWithSuperPodJob).
    master_block = four_with_fault_on(1, Recovery(pod_level=True, block=2))
    assert scope(master_block, SUPER_POD_STAGE) is None


def test_recover_policy_path_pod_never_widens() -> None:
    fault = four_with_fault_on(2, Recovery(pod_level=True, pod_only=True, block=2))
    assert deleted(fault, JOB_STAGE * 10) == ["job-2"]


def test_process_recovery_never_deletes_a_healthy_pod_and_never_widens() -> None:
    fault = four_with_fault_on(3, Recovery(process=True))
    assert deleted(fault, 0.0) == ["job-3"]
    assert deleted(fault, JOB_STAGE * 10) == ["job-3"]


# Atlas 950 SuperPoD jobs (chip8-node8-ra64-sp), after job_v2_test.go TestInTheSameTpBlock
# and reschedule_v2.go: 8 one-node pods, ra-blocks of 2 pods, virtual SuperPoDs of 4.
EIGHT = tuple("abcdefgh")
ATLAS_950 = Recovery(pod_level=True, block=4, ra_block=2)


def eight_with_fault_on(rank: int, recovery: Recovery) -> FaultJob:
    members = [
        JobPod("ns", f"job-{r}", f"uid-{r}", n, r, tuple(range(8)), worker=True)
        for r, n in enumerate(EIGHT)
    ]
    failed = {EIGHT[rank]: frozenset({2})}
    (fault,) = find_faults({"ns/job": (FORCE, members)}, failed, (), {"ns/job": recovery})
    return fault


def test_an_atlas_950_super_pod_job_widens_to_the_ra_block_then_the_super_pod_then_the_job() -> (
    None
):
    fault = eight_with_fault_on(5, ATLAS_950)
    assert deleted(fault, RA_BLOCK_STAGE - 0.1) == ["job-5"]
    assert deleted(fault, RA_BLOCK_STAGE) == ["job-4", "job-5"]
    assert deleted(fault, SUPER_POD_STAGE) == ["job-4", "job-5", "job-6", "job-7"]
    assert deleted(fault, JOB_STAGE) == [f"job-{r}" for r in range(8)]
    # Without sp-block the pod-level job keeps to its faulty pod until the job stage.
    no_super_pod = dataclasses.replace(fault, recovery=Recovery(pod_level=True, ra_block=2))
    assert scope(no_super_pod, SUPER_POD_STAGE) == frozenset({5})
    # recover_policy_path: pod never widens.
    pod_only = dataclasses.replace(fault, recovery=dataclasses.replace(ATLAS_950, pod_only=True))
    assert scope(pod_only, JOB_STAGE) == frozenset({5})


def test_an_atlas_950_job_restarts_whole_once_its_master_shares_the_widened_ra_block() -> None:
    # judgeJobIsMasterFault: rank 0 in the faulty pod's ra-block at the stage; the 950 path
    # takes rank 0 as the master even labelled a Kubeflow worker.
    fault = eight_with_fault_on(1, ATLAS_950)
    assert scope(fault, 0.0) == frozenset({1})
    assert scope(fault, RA_BLOCK_STAGE) is None
    assert scope(eight_with_fault_on(0, ATLAS_950), 0.0) is None


def test_atlas_950_process_recovery_widens_to_the_ra_block_and_no_further() -> None:
    fault = eight_with_fault_on(5, Recovery(process=True, ra_block=2))
    assert deleted(fault, 0.0) == ["job-5"]
    assert deleted(fault, RA_BLOCK_STAGE) == ["job-4", "job-5"]
    assert deleted(fault, JOB_STAGE * 10) == ["job-4", "job-5"]
    # An ra-block of one pod (no ra-block annotation) never widens.
    single = eight_with_fault_on(5, Recovery(process=True, ra_block=1))
    assert deleted(single, JOB_STAGE * 10) == ["job-5"]


def test_an_atlas_950_jobs_ranks_go_back_into_their_racks_then_whole_ra_blocks() -> None:
    # chip8node8ra64sp/reschedule.go selectNodesForFaultJob: stages 3 and 6 (const.go).
    stages = [0.0, RA_BLOCK_STAGE - 0.1, RA_BLOCK_STAGE, SUPER_POD_STAGE, JOB_STAGE * 10]
    pod_level = [refill_stage(ATLAS_950, w) for w in stages]
    assert pod_level == [SAME_RACK, SAME_RACK, WHOLE_RACK, None, None]
    process = [refill_stage(Recovery(process=True, ra_block=2), w) for w in stages]
    assert process == [SAME_RACK, SAME_RACK, WHOLE_RACK, WHOLE_RACK, WHOLE_RACK]
    assert refill_stage(POD_LEVEL, 0.0) is None, "no Atlas 950 job: placed as any"


def test_recovery_settings_are_read_from_labels_and_annotations() -> None:
    recovery, warning = recovery_of(
        {"pod-rescheduling": "on", "process-recover-enable": "pause"},
        {
            "huawei.com/recover_policy_path": "pod",
            "wait-reschedule-timeout": "60",
            "sp-block": "32",
        },
        npu=16,
    )
    assert recovery == Recovery(pod_level=True, process=False, pod_only=True, block=2, wait=60.0)
    assert warning == ""
    # An Atlas 950 SuperPoD job's ra-block in pods (1 without one); other jobs have none.
    atlas_950 = {"huawei.com/schedule_policy": "chip8-node8-ra64-sp", "sp-block": "64"}
    for extra, pods_per_ra_block in (({"ra-block": "32"}, 4), ({}, 1), ({"ra-block": "x"}, 1)):
        recovery, _ = recovery_of({}, {**atlas_950, **extra}, npu=8)
        assert (recovery.block, recovery.ra_block) == (8, pods_per_ra_block)
    assert recovery_of({}, {"ra-block": "32"}, npu=8)[0].ra_block == 0
    for bad in ("29", "271", "abc", "-5"):
        recovery, warning = recovery_of(
            {"process-recover-enable": "on"}, {"wait-reschedule-timeout": bad}
        )
        assert (recovery.process, recovery.wait) == (True, 270.0)
        assert "wait-reschedule-timeout" in warning and "270 is used" in warning


def test_failed_chips_are_asked_per_job() -> None:
    jobs = {"ns/one": (FORCE, pods("a")), "ns/two": (FORCE, pods("a"))}
    seen = find_faults_for(jobs, lambda job: {"a": frozenset({1})} if job == "ns/two" else {}, ())
    assert [f.job for f in seen] == ["ns/two"], "a chip silenced for one job is not its fault"


# ---- reset-config-<job> --------------------------------------------------------------
# Huawei's sample (tests/data/huawei_jobs/910b-8chips-gpt3-fault-tolerance-reset-cm...):
# reset.json {"status":"initializing"}; Go's Unmarshal into TaskResetInfo drops "status".
SAMPLE = {"reset.json": '{\n    "status":"initializing"\n}\n', "checkCode": ""}


def test_reset_config_after_pod_level_rescheduling_counts_a_retry_as_volcano() -> None:
    data = reset_config(SAMPLE, 1700000000.7, pod_level=True)
    body = (
        '{"RankList":[],"UpdateTime":1700000000,"RetryTime":1,"FaultFlushing":false,'
        '"GracefulExit":0,"RestartFaultProcess":false}'
    )
    assert data == {
        "checkCode": hashlib.sha256(body.encode()).hexdigest(),
        "reset.json": body,
        "restartType": "podReschedule",
    }
    again = reset_config(data, 1700000100, pod_level=True)
    assert json.loads(again["reset.json"])["RetryTime"] == 2
    whole = reset_config(again, 1700000200, pod_level=False)
    assert json.loads(whole["reset.json"])["RetryTime"] == 0, "the whole job placed: 0"


def test_reset_config_keeps_the_rank_list_on_a_graceful_exit_and_refuses_bad_json() -> None:
    entry = {"RankId": 3, "LogicId": 1, "Status": "unrecovered", "Policy": "reset"}
    data = {"reset.json": json.dumps({"RankList": [entry], "retrytime": 2})}
    out = reset_config(data, 0, graceful_exit=1)
    assert "restartType" not in out
    assert out["reset.json"] == (
        '{"RankList":[{"RankId":3,"LogicId":1,"Status":"unrecovered","Policy":"reset",'
        '"InitialPolicy":"","ErrorCode":null,"ErrorCodeHex":""}],"UpdateTime":0,'
        '"RetryTime":2,"FaultFlushing":false,"GracefulExit":1,"RestartFaultProcess":false}'
    )
    for bad in ({}, {"reset.json": "{"}, {"reset.json": '{"RetryTime":"x"}'}):
        with pytest.raises(InvalidInput):
            reset_config(bad, 0, pod_level=True)


# ---- subHealthyStrategy -------------------------------------------------------------
# After job_test.go TestDeleteJobWithSubHealthyLabels and task.go
# getTaskHealthStateBySubHealth: ignore keeps the job; graceExit and forceExit move the pods
# on sub-healthy nodes (graceful / at once); hotSwitch only the pod ClusterD marked
# needVolcanoOpe: delete.


def sub_health(strategy: str, switched: bool = False) -> list[FaultJob]:
    members = pods(*FOUR)
    members[1] = dataclasses.replace(members[1], switched=switched)
    recovery = Recovery(pod_level=True, sub_healthy=strategy)
    return find_faults({"ns/job": (FORCE, members)}, {}, (), {"ns/job": recovery}, {"b"})


def test_sub_healthy_strategies() -> None:
    assert sub_health("ignore") == []
    (grace,) = sub_health("graceExit")
    assert (grace.mode, grace.sub_health, grace.failed) == (GRACE, True, (1,))
    assert [d.grace_seconds for d in deletions(grace, 0.0, 0.0, 900.0)] == [None]
    (force,) = sub_health("forceExit")
    assert [(d.name, d.grace_seconds) for d in deletions(force, 0.0, 0.0, 900.0)] == [("job-1", 0)]
    assert sub_health("hotSwitch") == [], "until ClusterD asks, the backup flow runs"
    (switch,) = sub_health("hotSwitch", switched=True)
    assert [d.name for d in deletions(switch, 0.0, 0.0, 900.0)] == ["job-1"]
    assert recovery_of({"subHealthyStrategy": "bogus"}, {})[0].sub_healthy == "ignore"
