"""Huawei's own Volcano plugin (ascend-for-volcano v26.1.0, in the real Volcano v1.12.0 on the
test bed's API server) beside our engine, case by case (``testbed/differential``): seeded cases
over every product both serve, Huawei's job samples, and the smallest case of each known
difference. Ties upstream breaks at random count as agreement, nothing else does.

Every disagreement must be a known difference (``testbed/differential/known.py``); each known
difference is an expected failure naming it, until the engine follows upstream there: then its
test passes, and ``strict`` turns that into a failure saying so (move it to ``FIXED``). The
fixed ones' smallest cases run too, so that none comes back.
The long run: ``python -m benchmarks.differential --seed N --cases M`` (``--through ours``:
our own side in Volcano, as the last test here).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pytest

from testbed.differential.cases import NSLB2_GROUP, VNPU_910B_GROUP, VNPU_GROUP, generate
from testbed.differential.faults import (
    FAULT_CASES,
    OUR_PASS,
    FaultVerdict,
    generate_faults,
    run_faults,
)
from testbed.differential.huawei import huawei_volcano, our_volcano
from testbed.differential.known import KNOWN, Known, minimal_cases
from testbed.differential.ours import judge
from testbed.differential.run import Result, run_cases, summary
from testbed.differential.samples import (
    applied_documents,
    applied_samples,
    sample_case,
    sample_cases,
)

SEED, CASES = 11, 300
NSLB2_CASES = 40
VNPU_CASES = 60  # a chip
# The fault cases: the fixed ones and a dozen seeded (``faults.generate_faults``).
FAULTS = [*FAULT_CASES, *generate_faults(SEED, 12)]


@pytest.fixture(scope="module")
def results() -> Iterator[list[Result]]:
    cases = generate(SEED, CASES) + sample_cases() + minimal_cases()
    with huawei_volcano() as runner:
        found = run_cases(runner, cases)
    print(summary(found))
    yield found


def _listed(results: list[Result]) -> str:
    return "\n".join(
        f"{r.case.name} ({r.case.hardware}, {r.case.note}): {r.verdict.kind}: {r.verdict.detail}"
        for r in results
    )


def test_every_job_is_placed_or_refused_by_huaweis_plugin(results: list[Result]) -> None:
    undecided = [r for r in results if r.verdict.kind == "undecided"]
    assert not undecided, _listed(undecided)


def test_huaweis_plugin_places_most_jobs(results: list[Result]) -> None:
    """The cases try the plugin's placements, not mostly its refusals."""
    placed = sum(r.huawei.placed for r in results)
    assert placed >= len(results) // 2, f"{placed} of {len(results)} placed"


def test_every_disagreement_is_a_known_difference(results: list[Result]) -> None:
    unknown = [r for r in results if not r.verdict.agrees and r.known is None]
    assert not unknown, "disagreements no known difference explains:\n" + _listed(unknown)


@pytest.mark.parametrize(
    "known",
    [
        pytest.param(k, id=k.name, marks=pytest.mark.xfail(strict=True, reason=k.description))
        for k in KNOWN
    ],
)
def test_known_difference_is_gone(known: Known, results: list[Result]) -> None:
    """Expected to fail while the difference stands: its smallest case disagrees (and so may
    seeded ones). Passing means our engine now agrees: move the entry to ``FIXED``."""
    met = [r for r in results if r.known is known]
    assert not met, f"{known.name}: {known.description}\n" + _listed(met)


def test_our_volcano_path_decides_as_our_engine() -> None:
    """The same cases through our own side in the same real Volcano v1.12.0 (the service and
    the in-process adapter, as the chart's ``volcano.adapter`` installs them: ``our_volcano``)
    and through our engine: every one agrees, nothing known excepted. With the comparison
    above this puts Huawei's plugin beside the path users run, not only beside ``place``. It
    found a gang reserved, and held for, nodes its pods' nodeSelector ruled out, and a
    one-pod SuperPoD job left to Volcano's draw among equal scores."""
    cases = generate(SEED, CASES) + sample_cases()
    with our_volcano() as runner:
        found = run_cases(runner, cases, known=False)
    print(summary(found))
    differing = [r for r in found if not r.verdict.agrees]
    assert not differing, _listed(differing)


@pytest.mark.parametrize("extender", [False, True], ids=["v1.12.0-adapter", "v1.15.0-extender"])
def test_huaweis_sample_workloads_applied_as_yaml_go_through_our_side_as_our_engine_places(
    extender: bool,
) -> None:
    """Huawei's sample Volcano Jobs, Deployment and StatefulSet of every product they name
    (910 x8, cards, 910B x8 and x16), each alone on its servers, created as their YAML has
    them for their own controllers to expand (Volcano's job controller; Kubernetes' Deployment,
    ReplicaSet and StatefulSet controllers with Volcano's PodGroup controller), placed through
    our service in the real Volcano, v1.12.0 through our adapter and v1.15.0 through its own
    extender plugin: every pod bound with its chips, as our engine places the sample's job
    (the comparison's rules; and the first test of this module puts our engine beside
    Huawei's plugin)."""
    samples = applied_samples()
    assert len(samples) >= 11, samples
    differing = []
    with our_volcano(extender=extender) as runner:
        for sample in samples:
            objects = applied_documents(sample)
            for job in (d for d in objects if d["kind"] == "Job"):
                if priority := job["spec"].get("priorityClassName"):
                    runner.ensure_priority_class(priority)
            case = sample_case(sample)
            outcome = runner.run_applied(case, objects)
            verdict = judge(case, outcome)
            print(f"{sample}: {verdict.kind}, {outcome.to_json()}")
            if not verdict.agrees:
                differing.append(f"{sample}: {verdict.kind}: {verdict.detail}")
    assert not differing, "\n".join(differing)


def test_switch_affinity_2_0_decides_as_huaweis_plugin() -> None:
    """ToR affinity under ``nslb-version: "2.0"`` (shared ToRs: ``scheduler_core/engine/
    tor_share.py``), in a Volcano whose plugin is set so: gangs of whole 910B servers, normal
    and large-model schemas, each alone on its ToRs."""
    cases = generate(SEED, NSLB2_CASES, [NSLB2_GROUP])
    with huawei_volcano(nslb="2.0") as runner:
        found = run_cases(runner, cases)
    print(summary(found))
    unknown = [r for r in found if not r.verdict.agrees and r.known is None]
    assert not unknown, "disagreements no known difference explains:\n" + _listed(unknown)
    assert sum(r.huawei.placed for r in found) >= len(found) // 2


@pytest.mark.parametrize("group", [VNPU_GROUP, VNPU_910B_GROUP])
def test_dynamic_vnpu_decides_as_huaweis_plugin(group: str) -> None:
    """310P and 910B3 servers cut into vNPUs as pods ask (``huawei.com/npu-core``), each chip
    in a Volcano of its own whose plugin is set to (``presetVirtualDevice: "false"``; Huawei
    ships ``"true"``, under which it refuses every such job): chips free, unhealthy, held
    whole or already cut; one pod of a template's AI cores (on 310P at either CPU level and
    media engine) or of whole chips, and sizes and labels upstream refuses. The node, the
    template and a chip as good, or the refusal in upstream's words
    (``testbed/differential/vnpu.py``)."""
    cases = generate(SEED, VNPU_CASES, [group])
    with huawei_volcano(preset=False) as runner:
        found = run_cases(runner, cases)
    print(summary(found))
    differing = [r for r in found if not r.verdict.agrees]
    assert not differing, "disagreements:\n" + _listed(differing)
    placed = sum(r.huawei.placed for r in found)
    assert len(found) // 3 <= placed <= len(found) - len(found) // 10, "both kinds met"


@pytest.mark.parametrize("group", [VNPU_GROUP, VNPU_910B_GROUP])
def test_our_volcano_path_cuts_vnpus_as_our_engine(group: str) -> None:
    """The same dynamic vNPU cases through our own side in Volcano v1.12.0 (the service and
    the adapter, which reads no ``presetVirtualDevice``: each node's agent decides): the vNPU
    the adapter carries in Volcano's Binding is the one our engine cuts."""
    cases = generate(SEED, VNPU_CASES, [group])
    with our_volcano() as runner:
        found = run_cases(runner, cases, known=False)
    print(summary(found))
    differing = [r for r in found if not r.verdict.agrees]
    assert not differing, "disagreements:\n" + _listed(differing)


def test_huaweis_plugin_and_our_engine_delete_the_same_pods_after_a_chip_fault() -> None:
    """Fault reactions (``testbed/differential/faults.py``): a job running on chips Huawei's
    plugin gave it, then a chip of one of its nodes listed failed in the DeviceInfo: the
    plugin in the real Volcano and our engine delete the same ranks, for force and grace,
    job-, pod- and process-level (the master or not; A3 and 950 SuperPoD jobs), unlabelled
    and ``off`` jobs, a chip the job does not hold, and a chip listed only network-unhealthy
    (which stops no running pod), and a dozen seeded cases over the products; the pods made
    again go back to their healthy nodes and off the failed one."""
    with huawei_volcano() as runner:
        _agree(run_faults(runner, FAULTS))


def test_our_volcano_path_reacts_to_a_chip_fault_as_our_engine() -> None:
    """The same fault cases through our own side in the same Volcano v1.12.0 (the service and
    the adapter): its fault controller deletes the ranks our engine names, and the pods made
    again go where Huawei's plugin puts them (healthy ranks back on their nodes)."""
    with our_volcano() as runner:
        _agree(run_faults(runner, FAULTS, seconds=OUR_PASS))


def _agree(verdicts: Mapping[str, FaultVerdict]) -> None:
    for verdict in verdicts.values():
        print(f"{verdict.case}: {verdict.detail}")
    assert len(verdicts) == len(FAULTS)
    differing = [f"{v.case}: {v.detail}" for v in verdicts.values() if not v.agrees]
    assert not differing, "\n".join(differing)
