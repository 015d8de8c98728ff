"""MindCluster's own unit-test vectors for its base handler, its meshes of 4 and its handler
routing, transcribed case by case (Ascend/mind-cluster master 22bb3d98, folder
component/ascend-for-volcano/): each case names its Go file and test."""

from __future__ import annotations

import pytest

from chip_topology.products import (
    ATLAS_350_4PX8,
    ATLAS_350_4PX16,
    MODULE_910BX8,
    Product,
    fits,
    huawei_score,
    mask_of,
    select_huawei,
)
from chip_topology.routing import product_for_job
from contract.chip_names import ASCEND910, NPU, InvalidInput
from scheduler_core.engine.model import Job, NodeState, Task
from scheduler_core.engine.session import Session
from scheduler_core.engine.validation import JobInvalid, validate_job

# ---- internal/npu/base/frame_test.go ------------------------------------------------------


def _base_node(name: str, free: list[int], unhealthy: list[int]) -> NodeState:
    return NodeState(
        name, MODULE_910BX8.name, tuple(free), 8 - len(unhealthy), frozenset(unhealthy)
    )


# buildFakeScheduleEnv: node1 0-4 free, 5 unhealthy; node2 0-4, 5-6 unhealthy; node3 0-5, 6-7.
BASE_NODES = (
    _base_node("node1", [0, 1, 2, 3, 4], [5]),
    _base_node("node2", [0, 1, 2, 3, 4], [5, 6]),
    _base_node("node3", [0, 1, 2, 3, 4, 5], [6, 7]),
)


@pytest.mark.parametrize(
    ("case", "names", "expected"),
    [
        (
            "01-ScoreBestNPUNodes select the node whose fault npu less",
            ["node1", "node2"],
            [695, 595],
        ),
        (
            "02-ScoreBestNPUNodes select the node whose rest npu less",
            ["node2", "node3"],
            [595, 594],
        ),
    ],
)
def test_base_score_best_npu_nodes(case: str, names: list[str], expected: list[float]) -> None:
    """frame_test.go TestScoreBestNPUNodes (max 8, a 1-chip task)."""
    session = Session(BASE_NODES)
    scores = session.score(Job("job", MODULE_910BX8.name, (Task("pod1", 1),)), 1, names)
    assert [scores[n] for n in names] == expected, case


def test_base_valid_npu_job_refuses_a_task_above_the_max() -> None:
    """frame_test.go TestValidNPUJob 02 ("tasks request npu more than 64"): the same message,
    for max 8 (the 910B x8 handler): "expected: job<…> req npu num should small than 64, and
    not in map[], actual: task<> req npu: 65, "."""
    job = Job("job02", MODULE_910BX8.name, (Task("t", 9),), "vcjob")
    with pytest.raises(JobInvalid) as raised:
        validate_job(job)
    assert str(raised.value) == (
        "expected: job<vcjob/job02> req npu num should small than 8, and not in map[], "
        "actual: task<t> req npu: 9, "
    )


def test_base_valid_npu_job_accepts_a_valid_request() -> None:
    """frame_test.go TestValidNPUJob 03."""
    assert validate_job(Job("job03", MODULE_910BX8.name, (Task("t", 1),))) is MODULE_910BX8


def test_base_judge_node_and_task_npu_when_the_node_is_short() -> None:
    """frame_test.go TestJudgeNodeAndTaskNPU 03: req 2 on top [0]. Through the framework a node
    with fewer idle chips is refused before the handler (plugin/job.go checkNodeNum), so the
    handler's words show where a distributed job leaves network-unhealthy chips out."""
    node = NodeState("n", MODULE_910BX8.name, (0, 1), 8, network_unhealthy=frozenset({1}))
    tasks = (Task("t", 2), Task("u", 2))
    status = Session([node]).filter(Job("j", MODULE_910BX8.name, tasks), 2)["n"]
    assert status.reason == "NPUResourceShortage: node don't have enough resource, req<2>, idle<1>"
    node = NodeState("n", MODULE_910BX8.name, (0,), 8)
    status = Session([node]).filter(Job("j", MODULE_910BX8.name, (Task("t", 2),)), 2)["n"]
    assert status.reason == (
        "NPUResourceShortage: huawei.com/Ascend910, task requires 2 NPU cards but node idle is 1"
    )


def test_base_select_takes_the_first_chips_in_id_order() -> None:
    """frame.go SelectNPUFromNode: nodeTop[:req] of the sorted annotation."""
    assert select_huawei(MODULE_910BX8, [5, 1, 3, 0], 2, False) == (0, 1)


# ---- internal/npu/policy/chip4nodex/job_test.go, frame_test.go --------------------------


@pytest.mark.parametrize(
    ("case", "req", "top", "want"),
    [
        ("task < 4, enough cards in one mesh", 2, [0, 1, 2], True),
        ("task < 4, no mesh has enough cards", 3, [0, 4, 8], False),
        ("task < 4, exactly enough in one mesh", 3, [0, 1, 2, 5, 6, 7, 9, 10, 11], True),
        ("task = 4, one full mesh", 4, [0, 1, 2, 3], True),
        ("task = 4, no full mesh", 4, [0, 1, 2], False),
        ("task = 8, two full meshes", 8, list(range(8)), True),
        ("task = 8, only one full mesh", 8, [0, 1, 2, 3, 8, 9, 13, 15], False),
        ("task = 16, all full", 16, list(range(16)), True),
        ("task = 16, missing some cards", 16, list(range(8)), False),
    ],
)
def test_mesh_judge_node_and_task_npu_in_4p_mesh(
    case: str, req: int, top: list[int], want: bool
) -> None:
    """job_test.go TestJudgeNodeAndTaskNpuIn4Pmesh."""
    assert fits(ATLAS_350_4PX16, mask_of(top), req, False) is want, case


def test_mesh_judge_node_and_task_npu_general() -> None:
    """job_test.go TestJudgeNodeAndTaskNPU: 3 on three chips fits, 4 does not."""
    assert fits(ATLAS_350_4PX8, mask_of([0, 1, 2]), 3, False)
    assert not fits(ATLAS_350_4PX8, mask_of([0, 1, 2]), 4, False)


@pytest.mark.parametrize(
    ("case", "req", "top", "product", "expected"),
    [
        ("task=2, mesh={4,0,0,0}", 2, [0, 1, 2, 3], ATLAS_350_4PX8, 16 * 14),
        ("task=2, mesh={2,2,0,0}", 2, [0, 1, 4, 5], ATLAS_350_4PX8, 16 * 6),
        ("task=2, mesh={3,0,0,0}", 2, [0, 1, 2], ATLAS_350_4PX8, 16 * 15),
        ("task=8, mesh={4,4,4,4}", 8, list(range(16)), ATLAS_350_4PX16, 64 * 24),
        ("task=8, mesh={4,4,4,2}", 8, list(range(14)), ATLAS_350_4PX16, 64 * 42),
        ("task=8, mesh={4,4,4,0}", 8, list(range(12)), ATLAS_350_4PX16, 64 * 44),
        ("task=8, mesh={4,0,4,0}", 8, [0, 1, 2, 3, 8, 9, 10, 11], ATLAS_350_4PX16, 64 * 64),
    ],
)
def test_mesh_score_node_for_4p_mesh(
    case: str, req: int, top: list[int], product: Product, expected: float
) -> None:
    """job_test.go TestScoreNodeFor4Pmesh."""
    assert huawei_score(product, mask_of(top), product.capacity, req, False) == expected, case


@pytest.mark.parametrize(("free", "expected"), [(5, 64), (6, 56)])
def test_mesh_score_best_npu_nodes_without_mesh_affinity(free: int, expected: float) -> None:
    """frame_test.go TestScoreBestNPUNodesSuccessNoMesh: a 5-chip task on 5 and 6 free chips."""
    assert huawei_score(ATLAS_350_4PX8, mask_of(range(free)), 8, 5, False) == expected


@pytest.mark.parametrize(
    ("case", "req", "top", "want"),
    [
        # TestSelectNPUNotFullMesh
        ("task=2, mesh={3,2,3,3}", 2, [0, 1, 2, 5, 6, 8, 9, 10, 12, 13, 14], (5, 6)),
        ("task=2, mesh={4,1,3,4}", 2, [0, 1, 2, 3, 5, 8, 9, 10, 12, 13, 14, 15], (8, 9)),
        ("task=3, mesh={4,2,3,4}", 3, [0, 1, 2, 3, 4, 5, 8, 9, 10, 12, 13, 14, 15], (8, 9, 10)),
        ("task=4, mesh={4,2,3,4}", 4, [0, 5, 9], ()),
        # TestSelectNPUMultiMesh
        ("task=4, mesh={3,2,3,4}", 4, [0, 1, 2, 5, 6, 8, 9, 10, 12, 13, 14, 15], (12, 13, 14, 15)),
        (
            "task=4, mesh={3,2,4,4}",
            4,
            [0, 1, 2, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15],
            (8, 9, 10, 11),
        ),
        (
            "task=8, mesh={4,1,3,4}",
            8,
            [0, 1, 2, 3, 5, 8, 9, 10, 12, 13, 14, 15],
            (0, 1, 2, 3, 12, 13, 14, 15),
        ),
        (
            "task=12, mesh={4,2,4,4}",
            12,
            [0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 14, 15],
            (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15),
        ),
    ],
)
def test_mesh_select(case: str, req: int, top: list[int], want: tuple[int, ...]) -> None:
    """job_test.go TestSelectNPUNotFullMesh, TestSelectNPUMultiMesh (x16)."""
    assert select_huawei(ATLAS_350_4PX16, top, req, False) == want, case


def test_mesh_check_job_mode_refuses_more_than_the_node() -> None:
    """job.go checkJobMode (job_test.go TestCheckJobModeValid's bound): the job's NPUs per NPU
    task, Go's integer division, named by the plugin's name."""
    with pytest.raises(JobInvalid) as refused:
        validate_job(Job("j", ATLAS_350_4PX8.name, (Task("t", 9),)))
    assert str(refused.value) == (
        "4p-8 checkJobMode default/j req npu is invalid, task require npu can not bigger than 8"
    )
    validate_job(Job("j", ATLAS_350_4PX8.name, (Task("t", 7),)))
    validate_job(Job("jobC", ATLAS_350_4PX8.name, (Task("a", 12), Task("b", 4))))  # 16 / 2
    with pytest.raises(JobInvalid, match=r"^4p-16 checkJobMode default/j "):
        validate_job(Job("j", ATLAS_350_4PX16.name, (Task("a", 20), Task("b", 14))))


# ---- internal/npu/factory_test.go --------------------------------------------------------

POLICY = "huawei.com/schedule_policy"


@pytest.mark.parametrize(
    ("policy", "kind", "product"),
    [
        ("chip1-node2", ASCEND910, "card910x2"),
        ("chip4-node4", ASCEND910, "half910x4"),
        ("chip8-node8", ASCEND910, "module910bx8"),
        ("chip8-node16", ASCEND910, "module910bx16"),
        ("chip2-node16", ASCEND910, "module910a3x16"),
        ("chip2-node16-sp", ASCEND910, "superpod910a3x16"),
        ("chip4-node8", ASCEND910, "chip4-node8"),
        # Upstream also routes these for huawei.com/Ascend910, but their handlers read the
        # huawei.com/npu annotation: here they take huawei.com/npu jobs, others are refused.
        ("chip4-node16", NPU, "atlas350-4px16"),
        ("chip1-node8", NPU, "atlas350x8"),
        ("chip1-node16", NPU, "atlas350x16"),
    ],
)
def test_init_910_card_policy_handler(policy: str, kind: object, product: str) -> None:
    """factory_test.go TestInit910CardPolicyHandler: the policy picks the handler."""
    assert kind in (ASCEND910, NPU)
    chips = ASCEND910 if kind is ASCEND910 else NPU
    assert product_for_job(chips, {}, {POLICY: policy}, {}).name == product


@pytest.mark.parametrize(
    ("selector", "product"),
    [("module-a3-8-super-pod", "superpod910a3x8"), ("module-a3-16-super-pod", "superpod910a3x16")],
)
def test_get_a3_accelerator_type(selector: str, product: str) -> None:
    """factory_test.go TestGetA3AcceleratorType: ``sp-block`` with the selector."""
    routed = product_for_job(ASCEND910, {}, {"sp-block": "16"}, {"accelerator-type": selector})
    assert routed.name == product


# ---- routing beyond upstream's tests (factory.go get910CardHandlerName) --------------------


def test_the_policy_wins_over_the_selector() -> None:
    routed = product_for_job(ASCEND910, {}, {POLICY: "chip8-node8"}, {"accelerator-type": "card"})
    assert routed.name == "module910bx8"


@pytest.mark.parametrize("value", ["card", "card-910b-2", "card-910b-infer"])
def test_any_accelerator_type_containing_card_is_the_card_handler(value: str) -> None:
    assert product_for_job(ASCEND910, {}, {}, {"accelerator-type": value}).name == "card910x2"


def test_huawei_npu_requires_a_policy() -> None:
    with pytest.raises(InvalidInput, match=r"asks for a huawei\.com/schedule_policy annotation"):
        product_for_job(NPU, {}, {}, {"accelerator-type": "module"})


@pytest.mark.parametrize("policy", ["chip1-softShareDev", "multilevel"])
def test_a_policy_not_built_here_is_refused_by_name(policy: str) -> None:
    with pytest.raises(InvalidInput, match=f"schedule policy {policy} is not supported by this"):
        product_for_job(ASCEND910, {}, {POLICY: policy}, {})


def test_an_unknown_policy_is_refused_naming_it() -> None:
    with pytest.raises(InvalidInput, match="'chip9-node9' names no MindCluster handler"):
        product_for_job(ASCEND910, {}, {POLICY: "chip9-node9"}, {})
