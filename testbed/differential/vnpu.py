"""Dynamic vNPU cases (``huawei.com/npu-core`` on 310P servers): our side and the comparison.

Huawei's plugin decides them with ``presetVirtualDevice: "false"`` (its shipped ``"true"`` refuses
every such job: ``internal/npu/ascend310p/vnpu/job.go`` checkDyVJobReq), in a Volcano of its
own (``huawei.huawei_volcano(preset=False)``). Our side is the service's own vNPU state
(``scheduler_core/service/state/vnpu_nodes.py``) fed the same objects the plugin reads: each
node as ``objects.node_objects`` writes it, its DeviceInfo decoded, its holders' pods read as
the service reads pods; then the task's verdict on each node, the scores, and the vNPU taken
on the best node (ours breaks equal scores by name).

The comparison: the verdict; a refusal in upstream's words (the job check's, or each node's as
the plugin names it); a placement on a node of our highest score, the same template, and a
chip as good: upstream sorts chips by what is free with a partial order over a Go map
(``plugin/vnode.go`` SelectChipFromNode), so a chip with as much free as ours, or free that
neither dominates, is its draw; whole chips, any fully free ones.
"""

from __future__ import annotations

from collections.abc import Mapping

from contract import deviceinfo
from contract.pods import pod_view
from contract.vnpu import CoreChoice
from scheduler_core.engine.vnpu import VChip, VNode, VnpuInvalid
from scheduler_core.service.state.vnpu_nodes import VnpuNodes, VnpuTask, vnode_of, vpod_of
from testbed.differential.cases import Case
from testbed.differential.objects import node_objects
from testbed.differential.ours import AGREE, Verdict, huawei_reasons, job_refusal, node_name
from testbed.differential.outcome import Outcome

TASK = "p0"  # the pod's name as both sides' messages carry it (the case's key taken out)


def our_state(case: Case) -> tuple[VnpuNodes, dict[str, str]]:
    """The case's nodes as the service models them, and why each node left out is not a vNPU
    node."""
    state = VnpuNodes(ttl=float("inf"))
    invalid: dict[str, str] = {}
    for i, spec in enumerate(case.nodes):
        node, configmap, holders = node_objects(case, case.name, i, spec)
        name = node_name(i)
        node["metadata"]["name"] = name
        views = [pod_view(h) for h in holders]
        vpods = [v for v in (vpod_of(p) for p in views) if v is not None]
        status = node["status"]
        resource = case.spec.resource
        model = vnode_of(
            node,
            int(status["capacity"][resource]),
            deviceinfo.decode(configmap["data"]),
            vpods,
            sum(p.npu_limit for p in views),
            allocatable=int(status["allocatable"][resource]),
        )
        if isinstance(model, VNode):
            state.set_node(name, model)
        else:
            invalid[name] = model
    return state, invalid


def decide(case: Case) -> Outcome:
    """Our outcome: placed on the best node with its vNPU (or whole chips), or refused."""
    state, _ = our_state(case)
    task = VnpuTask(TASK, case.job.npu, dict(case.job.labels))
    names = [node_name(i) for i in range(len(case.nodes))]
    try:
        verdicts = state.verdicts(task, names)
    except VnpuInvalid as invalid:
        return Outcome(False, reason=str(invalid))
    refused = {n: v.reason for n, v in verdicts.items() if v.resource is None}
    scores = state.scores(task, names)
    if not scores:  # a 910 request each node's chip type refuses (upstream: the job's check)
        return Outcome(False, reason=" | ".join(sorted(set(refused.values()))), detail=refused)
    best = max(scores.values())
    chosen = min(n for n, s in scores.items() if s == best)
    choice = state.take(task, TASK, "uid", chosen, 0.0)
    if isinstance(choice, str):
        return Outcome(False, reason=choice, detail={chosen: choice})
    index = int(chosen.removeprefix("n"))
    return Outcome(True, ((index, choice.chips),), detail={f"{TASK}.template": _template(choice)})


def _template(choice: CoreChoice) -> str:
    return choice.template or ""


def judge(case: Case, theirs: Outcome) -> Verdict:
    ours = decide(case)
    if theirs.reason.startswith("undecided"):
        return Verdict("undecided", theirs.reason[:500], ours)
    if theirs.placed != ours.placed:
        if theirs.placed:
            (index, chips), template = theirs.placements[0], theirs.detail.get("p0.template")
            return Verdict(
                "verdict",
                f"Huawei placed on n{index} {list(chips)} {template}, we refused: {ours.reason} "
                f"{dict(ours.detail)}",
                ours,
            )
        return Verdict("verdict", f"we placed, Huawei refused: {theirs.reason}", ours)
    if not theirs.placed:
        return _refusal(case, theirs, ours)
    return _placement(case, theirs, ours)


def _refusal(case: Case, theirs: Outcome, ours: Outcome) -> Verdict:
    conditions, per_node = huawei_reasons(case, theirs)
    if (checked := job_refusal(conditions, ours.reason, ours)) is not None:
        return checked
    for index, reason in sorted(per_node.items()):
        mine = ours.detail.get(node_name(index))
        if mine is None or reason.strip() != mine.strip():
            return Verdict("refusal", f"n{index}: Huawei {reason!r}; ours {mine!r}", ours)
    return Verdict(AGREE, ours=ours)


def _placement(case: Case, theirs: Outcome, ours: Outcome) -> Verdict:
    state, _ = our_state(case)
    task = VnpuTask(TASK, case.job.npu, dict(case.job.labels))
    (index, chips), template = theirs.placements[0], theirs.detail.get("p0.template", "")
    best = best_nodes(state, task, [node_name(i) for i in range(len(case.nodes))])
    if node_name(index) not in best:
        scores = state.scores(task, [node_name(i) for i in range(len(case.nodes))])
        return Verdict("nodes", f"Huawei used n{index}; ours {sorted(best)} of {scores}", ours)
    logged = dict(theirs.scores).get(0)
    if logged:
        their_top = {node_name(n) for n, s in logged.items() if s == max(logged.values())}
        if not their_top <= best:
            return Verdict(
                "ties", f"Huawei's best {sorted(their_top)} ({logged}); ours {sorted(best)}", ours
            )
    node = state.node(node_name(index))
    assert node is not None
    our_choice = state.take(task, TASK, "uid", node.name, 0.0)
    assert not isinstance(our_choice, str), our_choice
    if template != _template(our_choice):
        mine = _template(our_choice)
        return Verdict("chips", f"n{index}: Huawei's template {template!r}, ours {mine!r}", ours)
    if not _as_good(node, our_choice, chips):
        free = {c.id: (c.cores, c.cpus, c.dvpp) for c in node.chips}
        return Verdict(
            "chips",
            f"n{index}: Huawei took chip(s) {list(chips)}, we take {list(our_choice.chips)} "
            f"(free {free})",
            ours,
        )
    return Verdict(AGREE, ours=ours)


def best_nodes(state: VnpuNodes, task: VnpuTask, names: list[str]) -> set[str]:
    """The nodes upstream may score highest: it sorts the passing nodes by idle AI cores over
    Volcano's parallel predicate order (``vdynamic.go`` ScoreBestNPUNodes), so among equally
    idle ones the first is its draw; ours, by name, is one of them. The least idle, or past
    the nodes where the task is downgraded the least idle of the others."""
    passing = {n: v for n, v in state.verdicts(task, names).items() if v.resource is not None}
    idle = {n: model.idle for n in passing if (model := state.node(n)) is not None}
    others = [n for n, v in passing.items() if not v.downgraded]
    if not others:  # every node downgraded: each scores 8
        return set(passing)
    least = min(idle[n] for n in others)
    return {n for n in others if idle[n] == least}


def _as_good(node: VNode, ours: CoreChoice, theirs: tuple[int, ...]) -> bool:
    """Whether upstream's chips are its draw among chips as good as ours."""
    chips: Mapping[int, VChip] = {c.id: c for c in node.chips}
    if ours.template is None:  # whole chips: any fully free ones, as many
        whole = {c.id for c in node.chips if not c.segmented and c.cores == node.cores_per_chip}
        return len(theirs) == len(ours.chips) and set(theirs) <= whole
    if len(theirs) != 1 or theirs[0] not in chips:
        return False
    mine, their = chips[ours.chips[0]], chips[theirs[0]]
    if (mine.cores, mine.cpus) == (their.cores, their.cpus):
        return True
    below = mine.cores <= their.cores and mine.cpus <= their.cpus
    above = mine.cores >= their.cores and mine.cpus >= their.cpus
    return not below and not above  # neither dominates: upstream's order is its input's
