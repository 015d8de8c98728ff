"""The disagreements with Huawei's plugin known today, and the ones this suite found that the
engine has since fixed.

Each known difference is named, with upstream's code that decides otherwise, a test of which
disagreements it explains, and its smallest case (which the suite always runs, so a fix
shows). A matcher must be narrow: a disagreement it does not explain is a new one and fails
the suite. When the engine follows upstream in one of these, its smallest case agrees and
``tests/real/test_differential.py`` says so: move it to ``FIXED``.

``FIXED``: the smallest cases of the differences found and fixed since (MindCluster v26.1.0's
rules, merged from ``huawei-rules``); the suite runs them so that none comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from contract.annotations import SCHEDULE_POLICY_ANNOTATION, STRATEGY_310_LABEL, TOR_AFFINITY_LABEL
from contract.chip_names import ASCEND310, ASCEND310P
from testbed.differential.cases import HARDWARE, TOR_LAYOUT, Case, JobSpec, NodeSpec, listed
from testbed.differential.ours import Verdict


@dataclass(frozen=True)
class Known:
    name: str
    description: str
    matches: Callable[[Case, Verdict], bool]
    minimal: Case


@dataclass(frozen=True)
class Fixed:
    """A difference this suite found that the engine no longer has: what it was."""

    name: str
    description: str
    minimal: Case


def _node(
    hardware: str, free: Sequence[int], network_unhealthy: Sequence[int] = (), address: str = ""
) -> NodeSpec:
    kind = HARDWARE[hardware].kind
    return NodeSpec(listed(free, kind), (), tuple(network_unhealthy), address)


def _tor(slot: tuple[int, int]) -> str:
    """The address of slice ``slot[1]`` under ToR ``slot[0]`` in the run's layout."""
    tor, slice_id = slot
    return TOR_LAYOUT.addresses[tor * TOR_LAYOUT.per_tor + slice_id]


def _tor_case(name: str, slots: Sequence[tuple[int, int]], pods: int) -> Case:
    nodes = tuple(_node("910B x8", range(8), address=_tor(s)) for s in slots)
    job = JobSpec(
        pods,
        8,
        labels={TOR_AFFINITY_LABEL: "normal-schema"},
        selector={"accelerator-type": "module-910b-8"},
    )
    return Case(name, "910B x8", nodes, job, exclusive=True, note=f"gang {pods}x8, normal-schema")


def _tor_job(case: Case) -> bool:
    return case.job.labels.get(TOR_AFFINITY_LABEL) in ("normal-schema", "large-model-schema")


def _packed_where_we_refuse(detail: str) -> bool:
    """Huawei placed several pods on one node where we found too few nodes for one each."""
    if not detail.startswith("Huawei placed on [") or "nodes are free" not in detail:
        return False
    nodes = detail.removeprefix("Huawei placed on [").split("]", 1)[0].split()
    return len(set(nodes)) < len(nodes)


def _same_names_reordered(detail: str) -> bool:
    """Both sides' ``network unhealthy card is [ ... ]`` lists hold the same chips."""
    lists = [part.split(" ]", 1)[0] for part in detail.split("network unhealthy card is [ ")[1:]]
    return (
        len(lists) == 2
        and lists[0] != lists[1]
        and set(lists[0].split(",")) == set(lists[1].split(","))
    )


KNOWN: tuple[Known, ...] = (
    Known(
        "gang-members-share-a-node",
        "a job of several pods each smaller than a server: Volcano allocates them one by one, "
        "each on the node the plugin scores best, which is the one the pod before took while "
        "it has room (volcano pkg/scheduler/actions/allocate; two pods of 4 share one 910 x8 "
        "server); ours gives each member a server of its own "
        "(scheduler_core/service/state/gangs.py GangBook.reserve, locality.choose) and refuses "
        "the job where there are fewer servers than pods; deliberate (docs/compatibility.md: "
        "Huawei's own samples keep their pods apart by podAntiAffinity on the host name, which "
        "the reservation cannot see)",
        lambda case, verdict: (
            (verdict.kind == "nodes" and "Huawei puts several pods on" in verdict.detail)
            or (verdict.kind == "verdict" and _packed_where_we_refuse(verdict.detail))
        ),
        Case(
            "known-910x8-2x4",
            "910 x8",
            (_node("910 x8", range(8)),),
            JobSpec(2, 4),
            note="2 pods of 4 on 910 x8",
        ),
    ),
    Known(
        "network-unhealthy-order",
        "a refusal naming the node's network-unhealthy chips lists them as the DeviceInfo "
        "does upstream ('[ Ascend910-15,Ascend910-8 ]': ascend910b/module910bx16/frame.go "
        "prints the node's annotation), ours by number ('[ Ascend910-8,Ascend910-15 ]')",
        lambda case, verdict: (
            verdict.kind == "refusal"
            and "network unhealthy card is [ " in verdict.detail
            and _same_names_reordered(verdict.detail)
        ),
        Case(
            "known-network-order",
            "910B x16",
            (
                _node(
                    "910B x16",
                    (1, 2, 4, 5, 6, 8, 9, 10, 11, 14, 15),
                    network_unhealthy=(8, 15),
                ),
            ),
            JobSpec(1, 10, annotations={SCHEDULE_POLICY_ANNOTATION: "chip8-node16"}),
            note="one pod of 10",
        ),
    ),
    Known(
        "tor-logical-fill",
        "ToR affinity 1.0, a job of fewer pods than a ToR has slices that no ToR holds: "
        "upstream fills it from the logical ToR with the fewest servers that holds it "
        "(internal/nslb/nslbv1.go setTorHandlerServerList -> util.go setFillJobServerList, "
        "walking the logical ToRs from the last), ours takes the first logical ToR "
        "(scheduler_core/engine/tor.py select)",
        lambda case, verdict: _tor_job(case) and verdict.kind == "nodes",
        _tor_case("known-tor-fill", ((0, 0), (1, 1), (2, 0), (3, 1)), 2),
    ),
    Known(
        "tor-logical-ranks",
        "ToR affinity 1.0 on logical ToRs: upstream gives the job's servers ranks in slice "
        "order within each ToR of the job (internal/nslb/util.go sortJobServerListBySliceId, "
        "setNodeRankIndex), ours in the order of the slices sorted by their free servers "
        "(scheduler_core/engine/tor.py _logical_tors)",
        lambda case, verdict: _tor_job(case) and verdict.kind == "ranks",
        _tor_case("known-tor-ranks", ((0, 1), (1, 1), (2, 0)), 2),
    ),
)

FIXED: tuple[Fixed, ...] = (
    Fixed(
        "310-310p-chip-scores",
        "310P and 310 chip jobs: upstream scores a node as the base handler, 6400 - free chips "
        "(internal/npu/base/frame.go ScoreBestNPUNodes, max 64), ours scored every node 0",
        Case(
            "fixed-310p-scores",
            "310P",
            (_node("310P", range(8)), _node("310P", range(4))),
            JobSpec(1, 1, resource=ASCEND310P.resource),
            note="one pod of 1",
        ),
    ),
    Fixed(
        "910x8-invalid-count-words",
        "910 x8, one pod of 3, 5, 6 or 7 chips: upstream refuses it by the base handler's check "
        "('req npu num should small than 8, and not in map[3:{} 5:{} 6:{} 7:{}]', "
        "internal/npu/base/frame.go ValidNPUJob), ours in VOL-v5's words (checkSingleTrainMode)",
        Case(
            "fixed-910x8-3",
            "910 x8",
            (_node("910 x8", range(8)),),
            JobSpec(1, 3),
            note="one pod of 3",
        ),
    ),
    Fixed(
        "910bx16-chip-order",
        "910B x16: upstream picks from the free chips sorted by number (internal/npu/base/"
        "node.go GetUsableTopFromNode sort.Ints), ours took them in the DeviceInfo's order "
        "(names sorted as strings: Ascend910-14 before Ascend910-9)",
        Case(
            "fixed-910bx16-order",
            "910B x16",
            (_node("910B x16", (9, 14)),),
            JobSpec(1, 1, annotations={SCHEDULE_POLICY_ANNOTATION: "chip8-node16"}),
            note="one pod of 1",
        ),
    ),
    Fixed(
        "inference-card-count-stage",
        "300I Duo and 310 card jobs of more chips than a card has: upstream's job check passes "
        "them and each node refuses ('req npu(3) illegal not meet node top<...>', "
        "ascend310p/card310px2/task.go, ascend310/card310x4/task.go), ours refused the job",
        Case(
            "fixed-duo-card-3",
            "300I Duo",
            (_node("300I Duo", range(16)),),
            JobSpec(
                1,
                3,
                labels={"duo": "true", STRATEGY_310_LABEL: "card"},
                resource=ASCEND310P.resource,
            ),
            note="one pod of 3, card",
        ),
    ),
    Fixed(
        "inference-refusal-prefix",
        "310 / 310P node refusals: upstream's predicate returns the handler's error as it is "
        "(plugin/node.go NodePredicate), ours prefixed 'checkNodeNPUByTask  <node> : '",
        Case(
            "fixed-310-card-prefix",
            "310",
            (_node("310", (1, 2, 4, 6)),),
            JobSpec(1, 4, labels={STRATEGY_310_LABEL: "card"}, resource=ASCEND310.resource),
            note="one pod of 4, card",
        ),
    ),
    Fixed(
        "a3-refusal-words",
        "A3: a node whose dies cannot hold the pod is refused upstream with 'npu top[[0 1 3 5]] "
        "is not meet task req(4)' (ascend910a3/base.go JudgeNodeAndTaskNPU), ours with 'npu "
        "topology not meet job require,network unhealthy card is [  ]'",
        Case(
            "fixed-a3-words",
            "A3 x16",
            (_node("A3 x16", (0, 1, 3, 5)),),
            JobSpec(
                1,
                4,
                annotations={SCHEDULE_POLICY_ANNOTATION: "chip2-node16"},
                selector={"accelerator-type": "module-a3-16"},
            ),
            note="one pod of 4",
        ),
    ),
)


def known_difference(case: Case, verdict: Verdict) -> Known | None:
    """The known difference a disagreement is, if any."""
    return next((k for k in KNOWN if k.matches(case, verdict)), None)


def minimal_cases() -> list[Case]:
    """The smallest case of every known difference and of every fixed one."""
    return [k.minimal for k in KNOWN] + [f.minimal for f in FIXED]
