"""Atlas A3 against MindCluster's own unit-test vectors (master 22bb3d98), case by case.

``A3X16`` = ``component/ascend-for-volcano/internal/npu/ascend910/ascend910a3/module910a3x16/
frame_test.go``; ``SP`` = ``…/ascend910a3/superpod/frame_test.go``. Chips are named by number
(upstream's ``Ascend910-<n>``). Cases upstream writes against nil arguments or gomonkey
patches of its own internals (nil task, nil node, a node missing from the plugin's map) have
no counterpart here and are named where they are left out.
"""

from __future__ import annotations

import re

import pytest

from chip_topology.products import (
    MODULE_910A3X8,
    MODULE_910A3X16,
    SUPERPOD_910A3X16,
    fits,
    mask_of,
    select_huawei,
)
from contract.chip_names import InvalidInput
from scheduler_core.engine.model import Job, NodeState, Task
from scheduler_core.engine.session import Session
from scheduler_core.engine.superpod import SuperPodInvalid, block_nodes
from scheduler_core.engine.validation import JobInvalid, validate_job
from tests.unit.helpers import node

X16 = MODULE_910A3X16.name
SP16 = SUPERPOD_910A3X16.name


def a3_job(*requests: int, product: str = X16) -> Job:
    return Job("job", product, tuple(Task(f"task{i}", n) for i, n in enumerate(requests)))


def valid(job: Job) -> bool:
    try:
        validate_job(job)
    except JobInvalid:
        return False
    return True


# ---- A3X16 TestValidNPUJob ------------------------------------------------------------
# "01- single pod job … 1*0 npu" and "05- … 2*0 npu": a job asking for no NPU is not an
# NPU job (upstream gives it no handler; here the extender never places it).
# A 0-NPU task in the cases below is the MindSpore scheduler role (``volcano.sh/task-spec:
# scheduler``), which upstream validates and we leave out of the NPU tasks.


@pytest.mark.parametrize(
    ("case", "requests", "passes"),
    [
        ("02- single pod job, want pass when single pod job request 1*1 npu", (1,), True),
        ("03- single pod job, want pass when request 1*2 npu", (2,), True),
        ("04- single pod job, want not pass when request 1*3 npu", (3,), False),
        ("06- not distributed job, … request 1*0+1*1 npu", (1, 0), True),
        ("07- distributed job, want not pass when request 1*1+1*1 npu", (1, 1), False),
        ("08- not distributed job, want pass when request 1*0+1*2 npu", (2, 0), True),
        ("09- not distributed job, want not pass when request 1*0+1*3 npu", (3, 0), False),
        ("10- distributed job, want pass when request 1*2+2*2 npu", (2, 2, 2), True),
        ("11- distributed job, want pass when request 1*16+1*16 npu", (16, 16), True),
        ("12- distributed job, want pass when request 1*4+1*4+1*4 npu", (4, 4, 4), True),
    ],
)
def test_a3x16_valid_npu_job(case: str, requests: tuple[int, ...], passes: bool) -> None:
    assert valid(a3_job(*requests)) is passes, case


def test_a3x16_refusals_in_upstreams_words() -> None:
    # ValidNPUJob / CheckTaskNPU messages (module910a3x16/frame.go).
    cases = [
        ((1, 1), "a3×16 job must be 2n, and <= 16, actual: task<task0> req npu: 1task<task1>"),
        ((3,), "job require npu num should be even number, instead of 3"),
        (
            (1, 3),
            "expected: only standalone job can request single npu, npu num required by task "
            "in a3×16 job must be 2n, and <= 16, actual: task<task0> req npu: 1"
            "task<task1> req npu: 3, ",
        ),
    ]
    for requests, message in cases:
        with pytest.raises(JobInvalid, match=re.escape(message)):
            validate_job(a3_job(*requests))


# ---- A3X16 TestCheckNodeNPUByTask -----------------------------------------------------
# "01-want err when task is nil": no counterpart.


@pytest.mark.parametrize(
    ("case", "req", "tasks", "chips", "passes"),
    [
        ("02-want success when task can be schedule", 1, 1, ([0, 1], [1]), True),
        ("03-want err when task can not be schedule", 2, 1, ([0], []), False),
        ("04-want success when task can be schedule", 4, 1, (range(7), [2, 3, 6]), True),
        ("05-want err when unhealthy annot not exist", 16, 2, ([0], []), False),
        ("07-want err when unhealthy card npu > node max card", 16, 2, ([0], range(7)), False),
        ("08-want err when task can not be schedule", 4, 1, ([0, 1, 3, 5, 7], [7]), False),
    ],
)
def test_a3x16_check_node_npu_by_task(
    case: str, req: int, tasks: int, chips: tuple[list[int], list[int]], passes: bool
) -> None:
    free, network_unhealthy = chips  # usable, network-unhealthy
    session = Session([node("n", free, product=X16, network_unhealthy=network_unhealthy)])
    job = a3_job(*([req] * tasks))
    assert session.filter(job, req)["n"].ok is passes, case


def test_a3x16_case06_a_node_naming_a_chip_twice_is_refused() -> None:
    # "06-want err when card npu > node max card": 17 chips, some twice.
    with pytest.raises(InvalidInput, match="names a chip twice"):
        node("n", [0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 0, 1, 2], product=X16)


# ---- A3X16 TestScoreBestNPUNodes ------------------------------------------------------
# "01-want err when task is nil", "02-… node is nil", "03-… not found node": no counterpart.
# "05-want success when node cards > 16": such a node is refused when read (case 06 above).
# Upstream's loop stops at the first node whose best is 0 and leaves the later nodes at
# their initial 0 (cases 13, 14, 15); we score those nodes too (``None`` below), and the node
# chosen is the same: the first best-0 node, by name here.


@pytest.mark.parametrize(
    ("case", "req", "nodes", "want", "chosen"),
    [
        ("04-want success when allocate not found card", 1, {"node1": [0]}, [512], "node1"),
        ("06-want success when schedule task", 1, {"node1": [0]}, [512], "node1"),
        (
            "07-want success when schedule single die task",
            1,
            {"node1": [0, 1], "node2": [0, 1, 2]},
            [240, 480],
            "node2",
        ),
        (
            "08-want success when scheduler",
            1,
            {"node1": [0, 1, 4, 5], "node2": [0, 1], "node3": [0, 1, 2, 3, 6, 7]},
            [208, 240, 176],
            "node2",
        ),
        (
            "09-want success when scheduler",
            1,
            {"node1": [0, 1, 4, 5], "node2": [0, 1], "node3": [0, 1, 2, 3, 5, 6, 7]},
            [208, 240, 416],
            "node3",
        ),
        (
            "10-want success when scheduler",
            1,
            {"node1": [0, 1, 4, 5], "node2": [0, 1, 3], "node3": [0, 1, 2, 3, 5, 6, 7]},
            [208, 480, 416],
            "node2",
        ),
        (
            "11-want success when scheduler",
            1,
            {"node1": [0, 1, 2, 4, 5], "node2": [0, 1, 3], "node3": [0, 1, 2, 3, 5, 6, 7]},
            [448, 480, 416],
            "node2",
        ),
        (
            "12-want success when scheduler",
            2,
            {"node1": [0, 1, 2, 4, 5], "node2": [0, 1, 3], "node3": [0, 1, 2, 3, 5, 6, 7]},
            [464, 496, 432],
            "node2",
        ),
        (
            "13-want success when scheduler",
            2,
            {"node1": [0, 1, 2, 4], "node2": [0, 1], "node3": [0, 1, 2, 3, 6, 7]},
            [480, 512, None],
            "node2",
        ),
        (
            "14-want success when scheduler",
            10,
            {"node1": range(10), "node2": range(16), "node3": range(11)},
            [512, None, None],
            "node1",
        ),
        (
            "15-want success when scheduler",
            16,
            {"node1": range(16), "node2": range(16), "node3": range(16)},
            [512, None, None],
            "node1",
        ),
    ],
)
def test_a3x16_score_best_npu_nodes(
    case: str, req: int, nodes: dict[str, list[int]], want: list[int | None], chosen: str
) -> None:
    session = Session([node(name, free, product=X16) for name, free in nodes.items()])
    job = a3_job(req, req)  # upstream's NPUTaskNum is 2 in every case
    scores = session.score(job, req)
    for (name, _), expected in zip(nodes.items(), want, strict=True):
        if expected is not None:
            assert scores[name] == expected, (case, name)
    best = max(scores.values())
    assert min(n for n, s in scores.items() if s == best) == chosen, case


# ---- A3X16 TestSelectNPUFromNode ------------------------------------------------------
# "01-want err when task is nil", "02-want err when task npu num is 0": no counterpart.


@pytest.mark.parametrize(
    ("case", "req", "tasks", "free", "want"),
    [
        ("03-want err when node npu num is 0", 1, 1, [], ()),
        ("04-want success when select npu", 1, 1, [0], (0,)),
        ("05- distribute job, want success when request 2 npu", 2, 2, [0, 1], (0, 1)),
        ("06-want success when select npu", 2, 1, [0, 1, 5, 3], (0, 1)),
        ("07-want success when select npu", 16, 2, range(16), tuple(range(16))),
        ("09-want success when select npu", 6, 1, [0, 1, 3, 6, 7, 8, 9], (0, 1, 6, 7, 8, 9)),
        ("10-want success when select npu", 1, 1, [0, 1, 2, 3, 6, 7, 11], (11,)),
        ("11-want success when select npu", 2, 1, [0, 2, 6, 11, 12, 13], (12, 13)),
    ],
)
def test_a3x16_select_npu_from_node(
    case: str, req: int, tasks: int, free: list[int], want: tuple[int, ...]
) -> None:
    usable = list(free)
    distributed = tasks > 1
    assert fits(MODULE_910A3X16, mask_of(usable), req, distributed) is bool(want), case
    assert tuple(sorted(select_huawei(MODULE_910A3X16, usable, req, distributed))) == want, case
    if want:
        decision = Session([node("n", usable, product=X16)]).place(a3_job(req))
        assert decision.feasible and sorted(decision.placements[0].chips) == list(want), case


def test_a3x16_case08_a_distributed_job_skips_network_unhealthy_chips() -> None:
    # "08- distribute job, want err when don't have enough usable npu".
    session = Session([node("n", range(16), product=X16, network_unhealthy=range(16))])
    assert not session.filter(a3_job(16, 16), 16)["n"].ok


# ---- SP TestValidNPUJob (checkSpBlock, checkRequireNPU; MaxNodeNPUNum 16) -------------
# Upstream sets the job's NPU total directly; here it is tasks × NPUs per task.


@pytest.mark.parametrize(
    ("case", "sp_block", "ask", "size", "passes"),
    [
        ("01 will return false when spBlockNPUNum is 0", "0", (1, 1), 48, False),
        (
            "02 will return false when spBlockNPUNum is 1 but superPodSize is 0 ",
            "1",
            (0, 0),
            0,
            False,
        ),
        (
            "03 will return false when spBlockNPUNum is not mutiple of node npu",
            "25",
            (0, 0),
            48,
            False,
        ),
        (
            "04 will return false when require npu num is 1 and sp-block is not 1",
            "2",
            (1, 1),
            1,
            False,
        ),
        ("05 will return false when 1 task job … sp-block is not 1", "2", (1, 1), 1, False),
        ("06 will return false when job require npu num is 3 …", "1", (1, 3), 1, False),
        (
            "07 will return true when job require npu num is 1 and task num is 1",
            "1",
            (1, 1),
            1,
            True,
        ),
        (
            "08 will return false when spBlockNPUNum is 1 and job npu number is 32",
            "1",
            (2, 16),
            16,
            False,
        ),
    ],
)
def test_superpod_valid_npu_job(
    case: str, sp_block: str, ask: tuple[int, int], size: int, passes: bool
) -> None:
    tasks, npu = ask  # tasks × NPUs per task
    try:
        block_nodes(sp_block, tasks=tasks, npu_per_task=npu, chips_per_node=16, super_pod_size=size)
    except SuperPodInvalid:
        assert not passes, case
    else:
        assert passes, case


# ---- SP TestCheckTaskNPU --------------------------------------------------------------
# "02 Invalid task with zero NPUs but no special annotations", "04 Task with 0 NPUs and both
# annotations should pass": 0-NPU tasks are not NPU tasks here (see above).


def test_superpod_check_task_npu() -> None:
    assert valid(a3_job(16, 16, product=SP16))  # "01 Valid task with 16 NPUs (…)"
    # "03 Mixed valid and invalid tasks" (upstream's fixture leaves the job's total at 0).
    message = (
        "expected: distributed super-pod job require npu(24) should be equal to node npu(16), "
        "actual: task<task1> req npu: 8, "
    )
    with pytest.raises(JobInvalid, match=re.escape(message)):
        validate_job(a3_job(16, 8, product=SP16))


# ---- SP TestCheckNodeNPUByTask (MaxNodeNPUNum 8, die rule of the A3 base) -------------
# "01"-"04" (nil task, SuperPodID -1, patched request errors): the SuperPoD id is the
# network rule's (``locality``); the rest has no counterpart.


@pytest.mark.parametrize(
    ("case", "free", "passes"),
    [
        ("05 will return err when JudgeNodeAndTaskNPU return err", [], False),
        ("06 will return nil when node topo meet job require", [1, 0], True),
    ],
)
def test_superpod_check_node_npu_by_task(case: str, free: list[int], passes: bool) -> None:
    name = "superpod910a3x8"
    session = Session([NodeState("n", name, tuple(free), 8)])
    assert session.filter(a3_job(2, product=name), 2)["n"].ok is passes, case


def test_a3x8_runs_the_same_rules_on_eight_chips() -> None:
    # ``chip2-node8`` is the a3×16 handler on 8-chip servers (internal/npu/factory.go).
    assert MODULE_910A3X8.capacity == 8
    session = Session([node("n", [0, 2, 3, 5, 6, 7], product=MODULE_910A3X8.name)])
    decision = session.place(a3_job(4, product=MODULE_910A3X8.name))
    assert decision.feasible and decision.placements[0].chips == (2, 3, 6, 7)
    assert not session.filter(a3_job(16, product=MODULE_910A3X8.name), 16)["n"].ok
