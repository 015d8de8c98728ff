"""910B and A3 dynamic vNPU (``huawei.com/npu-core`` with ``ring-controller.atlas:
ascend-910b``): upstream's unit-test vectors, transcribed, and the node model on 910 chips.

Vectors: Ascend/mind-cluster component/ascend-for-volcano ``internal/npu/ascend910/vnpu/
job_test.go`` (request sizes per chip type) and ``internal/npu/vnpu/frame_test.go`` (the
template of a request per chip type); each case names its upstream test and case number.
"""

from __future__ import annotations

import pytest

from contract.chip_names import ASCEND310P, ASCEND910
from contract.vnpu import parse_core_choice, parse_virtual_name
from scheduler_core.engine import vnpu
from scheduler_core.engine.vnpu import Resource, VnpuInvalid, VPod
from scheduler_core.service.state.vnpu_nodes import VnpuNodes, VnpuTask, chip_type_of

ERROR_INT = -1  # util.ErrorInt
A3_20, A3_24 = "Ascend910A3-20", "Ascend910A3-24"


def _takes(chip_type: str, cores: int) -> bool:
    try:
        vnpu.validate_910("t", cores, {}, chip_type)
    except VnpuInvalid:
        return False
    return True


@pytest.mark.parametrize(
    ("case", "chip_type", "cores", "want"),
    [
        ("TestCheckB41DyJobRequire 01", "910B4-1", 5, True),
        ("TestCheckB41DyJobRequire 02", "910B4-1", 10, True),
        ("TestCheckB41DyJobRequire 03", "910B4-1", 20, True),
        ("TestCheckB41DyJobRequire 04", "910B4-1", 7, False),
        ("TestCheckA3X20DyJobRequire 01", "Ascend910A3-20", 5, True),
        ("TestCheckA3X20DyJobRequire 02", "Ascend910A3-20", 10, True),
        ("TestCheckA3X20DyJobRequire 03", "Ascend910A3-20", 20, True),
        ("TestCheckA3X20DyJobRequire 04", "Ascend910A3-20", 40, True),
        ("TestCheckA3X20DyJobRequire 05", "Ascend910A3-20", 6, False),
        ("TestCheckA3X20DyJobRequire 06", "Ascend910A3-20", 7, False),
        ("TestCheckA3X24DyJobRequire 01", "Ascend910A3-24", 6, True),
        ("TestCheckA3X24DyJobRequire 02", "Ascend910A3-24", 12, True),
        ("TestCheckA3X24DyJobRequire 03", "Ascend910A3-24", 24, True),
        ("TestCheckA3X24DyJobRequire 04", "Ascend910A3-24", 48, True),
        ("TestCheckA3X24DyJobRequire 05", "Ascend910A3-24", 5, False),
        ("TestCheckA3X24DyJobRequire 06", "Ascend910A3-24", 7, False),
        ("TestCheckDyVJobReqByTemp 01", "910B4-1", 5, True),
        ("TestCheckDyVJobReqByTemp 02", "910B4-1", 7, False),
        ("TestCheckDyVJobReqByTemp 03", "Ascend910A3-20", 5, True),
        ("TestCheckDyVJobReqByTemp 04", "Ascend910A3-20", 10, True),
        ("TestCheckDyVJobReqByTemp 05", "Ascend910A3-20", 20, True),
        ("TestCheckDyVJobReqByTemp 06", "Ascend910A3-20", 6, False),
        ("TestCheckDyVJobReqByTemp 07", "Ascend910A3-20", 12, False),
        ("TestCheckDyVJobReqByTemp 08", "Ascend910A3-20", 7, False),
        ("TestCheckDyVJobReqByTemp 09", "Ascend910A3-24", 6, True),
        ("TestCheckDyVJobReqByTemp 10", "Ascend910A3-24", 12, True),
        ("TestCheckDyVJobReqByTemp 11", "Ascend910A3-24", 24, True),
        ("TestCheckDyVJobReqByTemp 12", "Ascend910A3-24", 5, False),
        ("TestCheckDyVJobReqByTemp 13", "Ascend910A3-24", 10, False),
        ("TestCheckDyVJobReqByTemp 14", "unknown", 7, False),
        # job.go's map for the chip types no case covers: B1 ×25, B2/B2C ×24, B3/B4 ×20.
        ("checkB1DyJobRequire", "910B1", 50, True),
        ("checkB1DyJobRequire", "910B1", 24, False),
        ("checkB2AndB2CDyJobRequire", "910B2C", 12, True),
        ("checkB2AndB2CDyJobRequire", "910B2", 48, True),
        ("checkB2AndB2CDyJobRequire", "910B2", 5, False),
        ("checkB3DyJobRequire", "910B3", 10, True),
        ("checkB4DyJobRequire", "910B4", 6, False),
    ],
)
def test_the_request_sizes_each_chip_type_takes(
    case: str, chip_type: str, cores: int, want: bool
) -> None:
    assert _takes(chip_type, cores) is want, case


@pytest.mark.parametrize(
    ("case", "chip_type", "cores", "dvpp", "want"),
    [
        ("TestGetResTemplateFromTaskSettingAndChipType 01", "910B1", 3, "null", "vir03_1c_8g"),
        ("TestGetResTemplateFromTaskSettingAndChipType 02", "910B2C", 6, "null", "vir06_1c_16g"),
        ("TestGetResTemplateFromTaskSettingAndChipType 03", "910B3", 5, "null", "vir05_1c_16g"),
        ("TestGetResTemplateFromTaskSettingAndChipType 04", "910B4", 5, "null", "vir05_1c_8g"),
        ("TestGetResTemplateFromTaskSettingAndChipType 05", "910B4-1", 5, "null", "vir05_1c_16g"),
        ("TestGetResTemplateFromTaskSettingAndChipType 06", "910B4-1", 10, "null", "vir10_3c_32g"),
        ("TestGetResTemplateFromTaskSettingAndChipType 07", "910B4-1", ERROR_INT, "null", None),
        ("TestGetResTemplateFromTaskSettingForB2 01", "910B2", 3, "null", "vir03_1c_8g"),
        ("TestGetResTemplateFromTaskSettingForB2 02", "910B2", 6, "null", "vir06_1c_16g"),
        ("TestGetResTemplateFromTaskSettingForB2 03", "910B2", 12, "null", "vir12_3c_32g"),
        ("TestGetResTemplateFromTaskSettingForB2 04", "910B2", ERROR_INT, "null", None),
        ("TestGetResTemplateFromTaskSettingForB3 01", "910B3", 5, "null", "vir05_1c_16g"),
        ("TestGetResTemplateFromTaskSettingForB3 02", "910B3", 10, "yes", "vir10_3c_32g"),
        ("TestGetResTemplateFromTaskSettingForB3 03", "910B3", ERROR_INT, "null", None),
        ("TestGetResTemplateFromTaskSettingForB4 01", "910B4", 5, "null", "vir05_1c_8g"),
        ("TestGetResTemplateFromTaskSettingForB4 02", "910B4", 10, "yes", "vir10_4c_16g_m"),
        ("TestGetResTemplateFromTaskSettingForB4 03", "910B4", ERROR_INT, "null", None),
        ("TestGetB4TempFromTaskLabel 01", "910B4", 10, "yes", "vir10_4c_16g_m"),
        ("TestGetB4TempFromTaskLabel 02", "910B4", 10, "no", "vir10_3c_16g_nm"),
        ("TestGetB4TempFromTaskLabel 02 (null)", "910B4", 10, "null", "vir10_3c_16g"),
        ("TestGetResTemplateFromTaskSettingForB41 01", "910B4-1", 5, "null", "vir05_1c_16g"),
        ("TestGetResTemplateFromTaskSettingForB41 02", "910B4-1", 10, "null", "vir10_3c_32g"),
        ("TestGetResTemplateFromTaskSettingForB41 03", "910B4-1", ERROR_INT, "null", None),
        ("TestGetResTemplateFromTaskSettingForA3 01", "Ascend910A3-99", 5, "null", None),
        ("TestGetResTemplateFromTaskSettingForA3X20 01", A3_20, 5, "null", "vir05_1c_16g"),
        ("TestGetResTemplateFromTaskSettingForA3X20 02", A3_20, 10, "null", "vir10_3c_32g"),
        ("TestGetResTemplateFromTaskSettingForA3X20 03", A3_20, ERROR_INT, "null", None),
        ("TestGetResTemplateFromTaskSettingForA3X24 01", A3_24, 6, "null", "vir06_1c_16g"),
        ("TestGetResTemplateFromTaskSettingForA3X24 02", A3_24, 12, "null", "vir12_3c_32g"),
        ("TestGetResTemplateFromTaskSettingForA3X24 03", A3_24, ERROR_INT, "null", None),
    ],
)  # fmt: skip
def test_the_template_of_a_request_per_chip_type(
    case: str, chip_type: str, cores: int, dvpp: str, want: str | None
) -> None:
    assert vnpu.template_910(cores, dvpp, chip_type) == want, case


def test_labels_are_refused_as_upstream_words_it_b4_with_10_cores_excepted() -> None:
    # ascend910/vnpu/job.go validDyVNPUTaskDVPPLabel
    with pytest.raises(
        VnpuInvalid, match=r"^t req 5 ai-core and npu is 910B3, but cpu level is:high$"
    ):
        vnpu.validate_910("t", 5, {"vnpu-level": "high"}, "910B3")
    with pytest.raises(VnpuInvalid, match=r"^t req 20 ai-core and npu is 910B3, but dvpp"):
        vnpu.validate_910("t", 20, {"vnpu-dvpp": "no"}, "910B3")
    with pytest.raises(VnpuInvalid, match=r"^t req err 7$"):
        vnpu.validate_910("t", 7, {}, "910B3")
    vnpu.validate_910("t", 10, {"vnpu-level": "high", "vnpu-dvpp": "yes"}, "910B4")
    vnpu.validate_910("t", 5, {"vnpu-level": "low", "vnpu-dvpp": "null"}, "Ascend910A3-20")


def test_task_resource_on_910_chips() -> None:
    # frame.go GetTaskResource: whole chips by the node's AI CPUs, else the chip type's
    # template (plugin/factory.go getJobTemplate).
    assert vnpu.task_resource(40, {}, 20, 6, chip_type="910B3") == Resource(40, 12)
    assert vnpu.task_resource(10, {}, 20, 6, chip_type="910B3") == Resource(10, 3)
    assert vnpu.task_resource(10, {"vnpu-dvpp": "yes"}, 20, 6, chip_type="910B4") == Resource(
        10, 4, "yes"
    )
    assert vnpu.task_resource(6, {}, 24, 6, chip_type="Ascend910A3-24") == Resource(6, 1)
    with pytest.raises(VnpuInvalid, match=r"^task<t> get virTemplate is null$"):
        vnpu.task_resource(7, {}, 20, 6, chip_type="910B3", task="t")


def b3_node(free: list[int], pods: list[VPod] = (), name: str = "b3") -> vnpu.VNode:  # type: ignore[assignment]
    return vnpu.node_model(
        name,
        chip_type="910B3",
        cores_per_chip=20,
        capacity=20 * 8,
        allocatable=20 * 8,
        free=free,
        unhealthy=(),
        pods=list(pods),
        requested=0,
    )


def test_a_b3_vnpu_takes_the_best_fitting_chip_and_no_vgroup_limit_applies() -> None:
    # Three vNPUs on chip 1 (distinct vGroups): a 310P chip would take no ≥ 4-core vNPU.
    pods = [VPod(f"ns/p{i}", parse_core_choice("1-vir05_1c_16g"), vgroup=i) for i in range(3)]
    model = b3_node([0, 2], pods)
    want = vnpu.task_resource(5, {}, 20, 6, chip_type="910B3")
    assert vnpu.check(model, "t", want).resource == want
    assert str(vnpu.choose(model, want)) == "1-vir05_1c_16g"
    # chip 1 has 5 cores and 3 CPUs left: a 10-core vNPU goes to a whole chip
    ten = vnpu.task_resource(10, {}, 20, 6, chip_type="910B3")
    assert str(vnpu.choose(model, ten)) == "0-vir10_3c_32g"


def test_whole_910b_chips_are_never_a_chip_with_a_vnpu() -> None:
    pods = [VPod("ns/a", parse_core_choice("0-vir05_1c_16g"))]
    model = b3_node([0, 1, 2], pods)
    want = vnpu.task_resource(40, {}, 20, 6, chip_type="910B3")
    assert str(vnpu.choose(model, want)) == "1,2"
    full = vnpu.check(b3_node([0, 1], pods), "t", want)
    assert full.resource is None and "resource not enough" in full.reason


def test_no_downgrade_on_910() -> None:
    # CheckNodeNPUByDyTask downgrades 310P tasks only.
    pods = [
        VPod("ns/a", parse_core_choice("0-vir10_3c_32g")),
        VPod("ns/b", parse_core_choice("0-vir05_1c_16g")),
    ]
    model = b3_node([0], pods)
    verdict = vnpu.check(model, "t", Resource(10, 3))
    assert verdict.resource is None and not verdict.downgraded


def _service(model: vnpu.VNode) -> VnpuNodes:
    nodes = VnpuNodes(ttl=60.0)
    nodes.set_node(model.name, model)
    return nodes


def test_a_910_task_and_a_310p_node_refuse_each_other_for_good() -> None:
    p310 = vnpu.node_model(
        "p", chip_type="Ascend310P", cores_per_chip=8, capacity=32, allocatable=32,
        free=[0, 1, 2, 3],
        unhealthy=(), pods=[], requested=0,
    )  # fmt: skip
    nodes = _service(p310)
    nodes.set_node("b3", b3_node([0, 1]))
    task910 = VnpuTask("t", 5, {"ring-controller.atlas": "ascend-910b"})
    assert task910.kind is ASCEND910
    verdicts = nodes.verdicts(task910, ["p", "b3"])
    assert verdicts["p"].final and "Ascend310P" in verdicts["p"].reason
    assert verdicts["b3"].resource == Resource(5, 1)
    task310 = VnpuTask("u", 2, {"ring-controller.atlas": "ascend-310P"})
    assert task310.kind is ASCEND310P
    verdicts = nodes.verdicts(task310, ["p", "b3"])
    assert verdicts["b3"].final and verdicts["p"].resource is not None
    assert isinstance(nodes.take(task310, "ns/u", "uid", "b3", 0.0), str)


def test_a_request_the_node_chip_type_refuses_is_final_with_upstreams_words() -> None:
    nodes = _service(b3_node([0, 1]))
    verdict = nodes.verdicts(VnpuTask("t", 6, {"ring-controller.atlas": "ascend-910"}), ["b3"])
    assert verdict["b3"].final and verdict["b3"].reason == "t req err 6"


def test_taking_counts_the_vnpu_so_a_chip_is_never_given_twice() -> None:
    nodes = _service(b3_node([0, 1]))
    task = VnpuTask("t", 10, {"ring-controller.atlas": "ascend-910b"})
    assert str(nodes.take(task, "ns/a", "ua", "b3", 0.0)) == "0-vir10_3c_32g"
    # chip 0's vNPU is not created yet: the chip is unstable (vnode.go), the next goes to 1
    assert str(nodes.take(task, "ns/b", "ub", "b3", 0.0)) == "1-vir10_3c_32g"
    third = nodes.take(task, "ns/c", "uc", "b3", 0.0)
    assert isinstance(third, str) and "resource not enough" in third
    # Both chips wait for their vNPUs: no chip for another size either, and the resources
    # are judged before the in-flight rule (vdynamic.go CheckNodeNPUByDyTask).
    five = VnpuTask("f", 5, {"ring-controller.atlas": "ascend-910b"})
    assert nodes.take(five, "ns/d", "ud", "b3", 0.0) == (
        "dynamic vnpu task<f> CheckNodeNPUByDyTask node b3 resource not enough"
    )


def test_the_chip_type_comes_from_the_chip_name_label_or_the_a3_servertype() -> None:
    assert chip_type_of({"servertype": "Ascend910A3-20"}, ASCEND910) == "Ascend910A3-20"
    labels = {"servertype": "Ascend910B-20", "node.kubernetes.io/npu.chip.name": "910B3"}
    assert chip_type_of(labels, ASCEND910) == "910B3"
    assert chip_type_of({"servertype": "Ascend310P-8"}, ASCEND310P) == "Ascend310P"
    with pytest.raises(VnpuInvalid, match=r"no node label <node\.kubernetes\.io/npu\.chip\.name>"):
        chip_type_of({"servertype": "Ascend910B-20"}, ASCEND910)


def test_a_910_vnpu_name_parses_as_910() -> None:
    name = parse_virtual_name("Ascend910-10c.3cpu.32g-100-3_0")
    assert (name.kind, name.spec, name.vdev, name.phy) == (ASCEND910, "10c.3cpu.32g", 100, 3)
