"""The differential suite's own logic, without Volcano (``testbed/differential``): the cases
survive JSON, Huawei's configuration is changed only where it must be, the plugin's scores are
read from its log, and the comparison counts as agreement the ties upstream draws at random and
nothing else."""

from __future__ import annotations

from chip_topology.routing import product_by_name
from contract.chip_names import ASCEND910
from contract.vnpu import NPU_CORE_RESOURCE
from testbed.differential import vnpu
from testbed.differential.cases import (
    VNPU_910B_GROUP,
    VNPU_GROUP,
    Case,
    JobSpec,
    NodeSpec,
    case_from_json,
    generate,
    listed,
)
from testbed.differential.huawei import scheduler_configuration
from testbed.differential.known import KNOWN, known_difference
from testbed.differential.ours import decide, equally_good_chips, judge, outcome
from testbed.differential.outcome import Outcome, logged_scores, outcome_from_json
from testbed.differential.samples import sample_cases

SHIPPED = """configurations:
  - name: init-params
    arguments: {"grace-over-time":"900","presetVirtualDevice":"true","nslb-version":"1.0",
"useClusterInfoManager":"true","self-maintain-available-card":"true"}
tiers:
- plugins:
  - name: volcano-npu_v6.0.RC1_linux-x86_64
"""


def _910(free: list[int]) -> NodeSpec:
    return NodeSpec(listed(free, ASCEND910))


def test_cases_and_outcomes_survive_json() -> None:
    vnpu_cases = generate(3, 20, [VNPU_GROUP, VNPU_910B_GROUP])
    for case in [*generate(3, 60), *vnpu_cases, *sample_cases()]:
        assert case_from_json(case.to_json()) == case
    placed = Outcome(True, ((1, (4, 5)),), scores=((0, {1: 261.0, 0: 200.0}),), ranks=(0,))
    assert outcome_from_json(placed.to_json()) == placed


def test_the_shipped_configuration_names_the_built_plugin_and_reads_deviceinfo() -> None:
    conf = scheduler_configuration(SHIPPED)
    assert "name: volcano-npu_v26.1.0\n" in conf
    assert '"useClusterInfoManager":"false"' in conf
    assert '"self-maintain-available-card":"false"' in conf
    assert '"presetVirtualDevice":"true"' in conf  # the rest as shipped


def test_the_plugins_scores_are_read_per_case_pod_and_node() -> None:
    log = (
        "I1128 factory.go:750] batchNodeOrderFn Get task:d3-p1 for NPU map[d3-n0:200 d3-n2:1e+08 "
        "d7-n0:5].\n"
        "I1128 factory.go:750] batchNodeOrderFn Get task:d3-p0 for NPU map[d3-n1:100].\n"
        "I1128 factory.go:750] batchNodeOrderFn Get task:d3-p1 for NPU map[d3-n0:300].\n"
    )
    scores = logged_scores(log)
    assert list(scores["d3"].items()) == [(0, {1: 100.0}), (1, {0: 300.0})]


def test_a_tie_of_equal_nodes_is_agreement_a_lower_node_is_not() -> None:
    case = Case("c", "910 x8", (_910(list(range(8))), _910(list(range(8)))), JobSpec(1, 2))
    ours = decide(case)
    assert ours.placements[0].node == "n0"
    other = Outcome(True, ((1, ours.placements[0].chips),))
    assert judge(case, other).agrees  # the same score: Volcano's draw
    fuller = Case("c", "910 x8", (_910([0, 1, 4, 5, 6, 7]), _910(list(range(8)))), JobSpec(1, 2))
    best = decide(fuller).placements[0]
    assert best.node == "n0"
    verdict = judge(fuller, Outcome(True, ((1, (0, 1)),)))
    assert verdict.kind == "nodes", verdict


def test_the_plugins_own_best_nodes_must_be_ours() -> None:
    case = Case("c", "910 x8", (_910(list(range(8))), _910(list(range(8)))), JobSpec(1, 2))
    chips = decide(case).placements[0].chips
    only_n0 = Outcome(True, ((0, chips),), scores=((0, {0: 300.0, 1: 200.0}),))
    assert judge(case, only_n0).kind == "ties"
    both = Outcome(True, ((0, chips),), scores=((0, {0: 300.0, 1: 300.0}),))
    assert judge(case, both).agrees


def test_a3_dies_of_as_many_free_chips_are_as_good() -> None:
    a3 = product_by_name("module910a3x16")
    usable = [0, 1, 2, 4, 5, 6, 7]  # die 1 half used
    assert equally_good_chips(a3, usable, 1, (2,), (2,))
    assert not equally_good_chips(a3, usable, 1, (2,), (4,))  # a whole die: not as good
    assert equally_good_chips(a3, usable, 2, (0, 1), (6, 7))  # any whole die
    assert not equally_good_chips(a3, usable, 2, (0, 1), (1, 2))  # across dies
    ring = product_by_name("module910x8")
    assert not equally_good_chips(ring, usable, 1, (2,), (4,))  # rings: no draw upstream


def test_a_gang_on_distinct_best_nodes_agrees_one_packed_is_the_known_difference() -> None:
    nodes = tuple(_910(list(range(8))) for _ in range(3))
    case = Case("g", "910 card x8", nodes, JobSpec(2, 8, selector={"accelerator-type": "card"}))
    spread = Outcome(True, ((2, tuple(range(8))), (1, tuple(range(8)))))
    assert judge(case, spread).agrees
    small = Case("g", "910 card x8", nodes, JobSpec(2, 2, selector={"accelerator-type": "card"}))
    packed = Outcome(True, ((0, (0, 1)), (0, (2, 3))))
    verdict = judge(small, packed)
    assert verdict.kind == "nodes"
    known = known_difference(small, verdict)
    assert known is not None and known.name == "gang-members-share-a-node"


def test_every_known_difference_has_a_smallest_case_our_engine_decides() -> None:
    names = [k.name for k in KNOWN]
    assert len(set(names)) == len(names)
    for known in KNOWN:
        assert outcome(decide(known.minimal)) is not None


def _vnpu_case(nodes: list[NodeSpec], cores: int) -> Case:
    job = JobSpec(
        1, cores, labels={"ring-controller.atlas": "ascend-310P"}, resource=NPU_CORE_RESOURCE
    )
    return Case("v", VNPU_GROUP, tuple(nodes), job)


def _on(node: int, chip: int, template: str) -> Outcome:
    return Outcome(True, ((node, (chip,)),), detail={"p0.template": template})


def test_vnpu_equally_idle_nodes_and_chips_as_free_are_upstreams_draw_nothing_else() -> None:
    # Two all-free nodes are equally idle, their four chips equally free: any is upstream's.
    free = NodeSpec((0, 1, 2, 3))
    assert vnpu.judge(_vnpu_case([free, free], 2), _on(1, 3, "vir02_1c")).agrees
    # Chip 0 cut (4 cores, 5 CPUs free): the best fit; a fully free chip is not as good, nor
    # is another template, nor a node more idle than the one with the cut chip.
    cut = NodeSpec((1, 2, 3), vnpus=((0, "vir04_3c"),))
    case = _vnpu_case([cut], 2)
    assert vnpu.judge(case, _on(0, 0, "vir02_1c")).agrees
    assert vnpu.judge(case, _on(0, 2, "vir02_1c")).kind == "chips"
    assert vnpu.judge(case, _on(0, 0, "vir02")).kind == "chips"
    assert vnpu.judge(_vnpu_case([free, cut], 2), _on(0, 1, "vir02_1c")).kind == "nodes"
