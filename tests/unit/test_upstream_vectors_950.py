"""MindCluster's own test vectors for the Atlas 850 SuperPoD (``chip8-node8-sp``) and Atlas 950
SuperPoD (``chip8-node8-ra64-sp``) handlers, transcribed into our tables: each case names the
upstream file (under Ascend/mind-cluster ``component/ascend-for-volcano/internal/npu/policy/``)
and its case name."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest

from contract.annotations import UB_MEMORY_ANNOTATION
from scheduler_core.engine import locality, racks, superpod
from scheduler_core.engine.racks import RackJob, Where
from scheduler_core.engine.superpod import SuperPodInvalid, SuperPodUnplaceable

# ---- chip8node8sp/frame_test.go buildValidNPUJobTestCases (all refused) -----------------------

# (case, sp-block, super-pod-size, each task's NPUs, upstream's message)
VALID_850 = [
    ("01 spBlockNPUNum is 0", "0", 48, [8, 8], "sp-block(0) is invalid"),
    (
        "02 spBlockNPUNum is 1 but superPodSize is 0",
        "1",
        0,
        [1],
        "sp-block(1/8=1) is bigger than size of super-pod(0)",
    ),
    ("03 not mutiple of node npu", "25", 48, [8, 8], "sp-block(25) is not mutiple of node npu (8)"),
    (
        "05 1 task job require npu num is 1 and sp-block is not 1",
        "2",
        1,
        [1],
        "single super-pod job sp-block annotation should equal require npu num",
    ),
    (
        "06 job require npu num is 3",
        "1",
        1,
        [3],
        "single super-pod job sp-block annotation should equal require npu num",
    ),
]


@pytest.mark.parametrize(("case", "sp_block", "size", "npus", "message"), VALID_850)
def test_chip8node8sp_valid_npu_job(
    case: str, sp_block: str, size: int, npus: list[int], message: str
) -> None:
    with pytest.raises(SuperPodInvalid) as refused:
        superpod.block_nodes_850(sp_block, npus=npus, super_pod_size=size)
    assert str(refused.value) == message, case


def test_chip8node8sp_blocks_below_a_node_are_one_node_and_tasks_take_8() -> None:
    # ``checkSpBlock``: "sp-block less than 8, set default value 1"; ``checkReqNPUEqualNodeNPU``.
    assert superpod.block_nodes_850("4", npus=[4], super_pod_size=48) == 1
    assert superpod.block_nodes_850("16", npus=[8] * 4, super_pod_size=48) == 2
    assert superpod.block_nodes_850(None, npus=[8] * 3, super_pod_size=48) == 3
    with pytest.raises(SuperPodInvalid, match=r"require npu 8\*n, instead of 4"):
        superpod.block_nodes_850("8", npus=[4, 4], super_pod_size=48)


# ---- chip8node8ra64sp/job_test.go TestValidNPUJob --------------------------------------------

# (case, tasks, NPUs each, sp-block, ra-block, super-pod-size, UB memory, upstream's message)
VALID_950 = [
    (
        "checkSpBlockValid-01",
        1,
        8,
        10,
        1,
        32,
        False,
        "Parameter sp-block(10) is not multiple of node npu (8)",
    ),
    (
        "checkSpBlockValid-02",
        5,
        8,
        32,
        1,
        32,
        False,
        "job require total Pod(5) should be multiple of a sp-block size 4",
    ),
    (
        "checkSuperPodSizeValid-01",
        4,
        8,
        32,
        32,
        0,
        False,
        "Parameter super-pod-size(0) in volcano.yaml is invalid which should be in range [1,1024]",
    ),
    (
        "checkSuperPodSizeValid-02",
        4,
        8,
        32,
        1,
        2,
        False,
        "Parameter spBlock(32/8=4) is bigger than size of super-pod-size(2)",
    ),
    (
        "checkTpBlockNum-01",
        4,
        8,
        32,
        128,
        32,
        False,
        "Parameter ra-block is invalid, it should be a number in the range from 1 to 64",
    ),
    (
        "checkTpBlockNum-02",
        8,
        8,
        64,
        48,
        32,
        False,
        "Parameter ra-block(48) must be the power of 2",
    ),
    (
        "calculateTpBlockAndCheck-01",
        2,
        8,
        16,
        32,
        32,
        False,
        "Parameter ra-block(32)/8 could not be bigger than sp-block(16)/8",
    ),
    (
        "calculateTpBlockAndCheck-02",
        3,
        8,
        24,
        16,
        32,
        False,
        "number of tasks(3) must be multiple of nodes occupied by ra-block(2)",
    ),
    (
        "calculateTpBlockAndCheck-03",
        12,
        8,
        24,
        16,
        32,
        False,
        "spBlock= 24 / 8 must be multiple of tpBlock= 16 / 8",
    ),
    (
        "checkJobReqNpuNum-01",
        1,
        9,
        1,
        1,
        32,
        False,
        "single super-pod job require npu [1, 8], instead of 9",
    ),
    (
        "checkJobReqNpuNum-02",
        2,
        8,
        6,
        1,
        32,
        False,
        "distributed super-pod job require npu should be multiple of sp-block, instead of 16",
    ),
    ("checkJobReqNpuNum-03", 3, 6, 1, 1, 32, False, "distributed job require npu 8, instead of 6"),
    (
        "checkJobReqNpuNum-04",
        1,
        1,
        2,
        1,
        32,
        False,
        "single super-pod job sp-block annotation should equal require npu num",
    ),
    (
        "checkJobReqNpuNum-05",
        2,
        5,
        2,
        8,
        32,
        False,
        "distributed super-pod job require npu(10) should be multiple of ra-block",
    ),
    (
        "checkJobInUBMemScene-01",
        256,
        8,
        2,
        1,
        32,
        True,
        "in ubmem scene, task require npu nums should smaller than 1024, but recevice 1032",
    ),
]


@pytest.mark.parametrize(
    ("case", "tasks", "npu", "sp_block", "ra_block", "size", "ub", "message"), VALID_950
)
def test_chip8node8ra64sp_valid_npu_job(  # noqa: PLR0917 (a transcribed table)
    case: str, tasks: int, npu: int, sp_block: int, ra_block: int, size: int, ub: bool, message: str
) -> None:
    notes = {"sp-block": str(sp_block), "ra-block": str(ra_block)}
    if ub:
        notes[UB_MEMORY_ANNOTATION] = "true"
    with pytest.raises(SuperPodInvalid) as refused:
        racks.rack_job(notes, [npu] * tasks, size)
    assert str(refused.value) == message, case


def test_the_huawei_950_sample_job_is_valid_and_ra_block_defaults_to_8() -> None:
    # Huawei's sample (tests/data/huawei_jobs/950-superpod-sp-block-8…): one pod of 8, sp-block 8,
    # ra-block 8.
    job = racks.rack_job({"sp-block": "8", "ra-block": "8"}, [8], 48)
    assert job == RackJob(tasks=1, block=1, ra_block=1, ra_block_npu=8, ub_memory=False)
    assert racks.rack_job({"sp-block": "16"}, [8, 8], 48).ra_block == 1
    with pytest.raises(SuperPodInvalid, match=r"^Parameter sp-block\(0\) is invalid\.$"):
        racks.rack_job({"sp-block": "eight"}, [8], 48)


# ---- chip8node8ra64sp selection: schedule_test.go and frame_test.go TestSelectNodesForJob ------


def nodes_of(indices: Iterable[int], *, size: int = 64) -> dict[str, Where]:
    """``base_test.go`` getNPUNodes: node i is in SuperPoD i / super-pod-size, rack i / 8."""
    return {f"node{i}": Where(i // size, i // 8) for i in indices}


def default_nodes() -> dict[str, Where]:
    """``base_test.go`` buildDefaultNodeInfoList: SuperPoD k has k + 1 racks of 8."""
    spans = [(0, 7), (64, 79), (128, 151), (192, 223), (256, 295), (320, 367)]
    return nodes_of(i for start, end in spans for i in range(start, end + 1))


def ub_nodes(layout: Mapping[int, Mapping[int, int]]) -> dict[str, Where]:
    """``schedule_test.go`` buildSuperPodMapWithUBMemByParams: SuperPoD → UB domain → nodes,
    racks of 8 from the domain's first rack (domain × 16)."""
    return {
        f"node-{sp}-{ub}-{i}": Where(sp, ub * racks.UB_MEMORY_RACKS + i // 8)
        for sp, domains in layout.items()
        for ub, count in domains.items()
        for i in range(count)
    }


def summary(
    choice: superpod.SuperPodChoice, where: Mapping[str, Where]
) -> dict[int, tuple[int, list[int]]]:
    """``base_test.go`` checkScoreBestNPUNodesResult: SuperPoD → (racks, nodes per rack)."""
    per: dict[int, dict[int, int]] = {}
    for block in choice.blocks:
        for node in block.nodes:
            at = where[node]
            per.setdefault(at.super_pod, {}).setdefault(at.rack, 0)
            per[at.super_pod][at.rack] += 1
    return {sp: (len(r), sorted(r.values())) for sp, r in per.items()}


def job(tasks: int, block: int, ra: int, *, ub: bool = False, ra_npu: int = 0) -> RackJob:
    return RackJob(tasks, block, ra, ra_npu, ub)


# (case, nodes, job, super-pod-size, expected summary)
SELECTED = [
    ("frame_test only one pod scheduled 1Pod", default_nodes, job(1, 1, 1), 64, {0: (1, [1])}),
    ("frame_test OneRack strategy success 8Pod", default_nodes, job(8, 1, 1), 64, {0: (1, [8])}),
    (
        "frame_test OneSuperPod strategy success 16Pod",
        default_nodes,
        job(16, 4, 2),
        64,
        {1: (2, [8, 8])},
    ),
    (
        "frame_test MulSuperPod strategy success 64Pod",
        default_nodes,
        job(64, 4, 2),
        64,
        {5: (6, [8] * 6), 4: (2, [8, 8])},
    ),
    (
        "frame_test RackSchedule failed, OneSuperPod success 4Pod",
        lambda: nodes_of([0, 1, 8, 9, 10]),
        job(4, 4, 2),
        64,
        {0: (2, [2, 2])},
    ),
    (
        "schedule_test test_case_002 8Pod rack schedule success",
        lambda: ub_nodes({0: {0: 15, 1: 8}, 1: {0: 5}}),
        job(8, 8, 8, ub=True),
        128,
        {0: (1, [8])},
    ),
    (
        "schedule_test test_case_003 32Pod ubMem, fewer remaining first",
        lambda: ub_nodes({0: {0: 32, 1: 32}, 1: {0: 32, 1: 8}}),
        job(32, 4, 4, ub=True),
        64,
        {1: (4, [8] * 4)},
    ),
    (
        "schedule_test test_case_004 32Pod ubMem",
        lambda: ub_nodes({0: {0: 32, 1: 32}, 1: {0: 32, 1: 48}}),
        job(32, 4, 4, ub=True),
        128,
        {0: (4, [8] * 4)},
    ),
    (
        "schedule_test test_case_005 32Pod ubMem, smallest SuperPoD that can",
        lambda: ub_nodes({0: {0: 8, 1: 24}, 1: {0: 32, 1: 32}}),
        job(32, 4, 4, ub=True),
        64,
        {1: (4, [8] * 4)},
    ),
]


@pytest.mark.parametrize(("case", "nodes", "rack_job", "size", "expected"), SELECTED)
def test_chip8node8ra64sp_selection(
    case: str,
    nodes: object,
    rack_job: RackJob,
    size: int,
    expected: dict[int, tuple[int, list[int]]],
) -> None:
    assert callable(nodes)
    where = nodes()
    choice = racks.select(rack_job, where, super_pod_size=size)
    assert summary(choice, where) == expected, case
    chosen = [n for b in choice.blocks for n in b.nodes]
    assert len(chosen) == len(set(chosen)) == rack_job.tasks, case
    assert all(len(b.nodes) == rack_job.block for b in choice.blocks), case


# (case, nodes, job, super-pod-size, upstream's error)
REFUSED = [
    (
        "schedule_test test_case_001 no nodes",
        dict,
        job(1, 1, 1),
        128,
        "before scheduling, required sp-block count=1, but total sp-block count=0",
    ),
    (
        "frame_test RackSchedule failed 4Pod ra-block of 4 nodes",
        lambda: nodes_of([0, 1, 8, 9, 10]),
        job(4, 4, 4),
        64,
        "not found the 1 count of ra-block:0 in all racks of every super-pod, exit select process",
    ),
    (
        "frame_test 6Pod racks 3/3/1/1",
        lambda: nodes_of([0, 1, 2, 8, 9, 10, 16, 24]),
        job(6, 6, 2),
        64,
        "scheduling failed in MultiSuperPodsSchedule strategy",
    ),
    (
        "frame_test 16Pod ra-block 64 in racks of 4",
        lambda: nodes_of([*range(4), *range(8, 12), *range(16, 20), *range(24, 28)]),
        job(16, 8, 8),
        64,
        "scheduling failed in MultiSuperPodsSchedule strategy",
    ),
    (
        "frame_test 32Pod SuperPodSchedule will failed",
        lambda: nodes_of([*range(8), *range(64, 80)]),
        job(32, 8, 2),
        64,
        "scheduling failed in MultiSuperPodsSchedule strategy",
    ),
    (
        "schedule_test test_case_007 40Pod ubMem failed",
        lambda: ub_nodes({0: {0: 8, 1: 24}, 1: {0: 32, 1: 32}}),
        job(40, 8, 4, ub=True),
        64,
        "scheduling failed in UBMemSchedule strategy",
    ),
]


@pytest.mark.parametrize(("case", "nodes", "rack_job", "size", "message"), REFUSED)
def test_chip8node8ra64sp_refusals(
    case: str, nodes: object, rack_job: RackJob, size: int, message: str
) -> None:
    assert callable(nodes)
    with pytest.raises(SuperPodUnplaceable) as refused:
        racks.select(rack_job, nodes(), super_pod_size=size)
    assert str(refused.value) == message, case


def test_ranks_follow_the_blocks_and_a_super_pod_above_its_size_is_refused() -> None:
    where = nodes_of([0, 1, 8, 9, 10])
    choice = racks.select(job(4, 4, 2), where, super_pod_size=64)
    # One block of two ra-blocks: rack 0 (2 free, the fewest) first, then rack 1.
    assert [choice.node_of_rank(r) for r in range(4)] == ["node0", "node1", "node10", "node8"]
    with pytest.raises(SuperPodUnplaceable, match="super-pod-size is smaller"):
        racks.select(job(1, 1, 1), where, super_pod_size=4)


def test_the_locality_entry_refuses_nodes_without_a_rack_in_upstreams_words() -> None:
    notes = {"huawei.com/schedule_policy": "chip8-node8-ra64-sp", "sp-block": "8"}
    ask = locality.Ask("ns/j", 2, 8, 8, {}, notes)
    network = locality.Network(super_pods={"a": 0, "b": 0}, racks={"a": 0})
    with pytest.raises(locality.Unplaceable, match=r"node rack-id is invalid for node=b, id=-1"):
        locality.choose(ask, ["a", "b"], network, locality.Settings())
    placed = locality.choose(
        ask,
        ["a", "b"],
        locality.Network(super_pods={"a": 0, "b": 0}, racks={"a": 0, "b": 0}),
        locality.Settings(),
    )
    assert placed.nodes == ("a", "b") and placed.how == "racks"


# ---- chip8node8ra64sp/reschedule.go selectNodesByRack: a pod-level refill -------------------
# After reschedule_test.go TestGetSameRackNodes and TestGetAnotherRackNodes.


def test_a_refill_before_the_ra_block_stage_keeps_each_rank_in_its_old_rack() -> None:
    free = {"n4": Where(0, 2), "n7": Where(0, 1), "x": Where(1, 1)}
    assert racks.refill(racks.SAME_RACK, [3], [Where(0, 1)], 2, free) == ("n7",)
    # Rack 1 of another SuperPoD is not its rack; nor is a free rack of its own SuperPoD.
    with pytest.raises(SuperPodUnplaceable, match="rank 3: no free node in rack 1 of super-pod 0"):
        racks.refill(racks.SAME_RACK, [3], [Where(0, 1)], 2, {"n4": Where(0, 2), "x": Where(1, 1)})
    # Two ranks of one rack take two of its nodes, never one twice.
    two = {"a": Where(0, 1), "b": Where(0, 1)}
    assert racks.refill(racks.SAME_RACK, [2, 3], [Where(0, 1)] * 2, 2, two) == ("a", "b")


def test_from_the_ra_block_stage_each_ra_block_goes_whole_into_one_rack() -> None:
    old = [Where(0, 1)] * 2  # ranks 2 and 3, one ra-block of 2, ran in rack 1
    free = {"a": Where(0, 1), "b": Where(0, 3), "c": Where(0, 2), "d": Where(0, 3)}
    free |= {"e": Where(0, 2), "f": Where(0, 3)}
    # Rack 1 has one free node: the rack with the fewest free that holds them (getRackId).
    assert racks.refill(racks.WHOLE_RACK, [2, 3], old, 2, free) == ("c", "e")
    # Its old rack when that has room again (getOriginRackId).
    assert racks.refill(racks.WHOLE_RACK, [2, 3], old, 2, {**free, "g": Where(0, 1)}) == (
        "a",
        "g",
    )
    # Two ra-blocks: each whole, in its own rack.
    four = racks.refill(racks.WHOLE_RACK, [0, 1, 2, 3], [Where(0, 3)] * 2 + old, 2, free)
    assert [free[n].rack for n in four] == [3, 3, 2, 2]
    elsewhere = {"a": Where(0, 1), "x": Where(1, 2), "y": Where(1, 2)}
    with pytest.raises(SuperPodUnplaceable, match="there is no enough nodes for whole rack"):
        racks.refill(racks.WHOLE_RACK, [2, 3], old, 2, elsewhere)
