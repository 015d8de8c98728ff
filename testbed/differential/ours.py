"""Our side of a case, and the comparison of both sides.

Our decision is the engine's, as the service makes it for a Volcano job: a job of one pod
without network rules placed by ``Session.place`` (the best-scored node, Volcano's
``predicate`` + ``prioritize`` + ``allocateFunc``); a gang, or a job with ``tor-affinity`` or
``sp-block``, by the service's reservation (``scheduler_core/service/state/gangs.py``
``GangBook.reserve``: candidates by score, then ``locality.choose`` on the case's network,
then ``Session.place`` on the nodes chosen). The network is the case's: the run's ToR layout
and each node's address, its SuperPoD id; the settings are the init-params Huawei ships
(``build/volcano-v1.12.0.yaml``: nslb 1.0, shared-tor-num 2, reserve-nodes 2,
super-pod-size 48).

The comparison (``judge``): the verdict (placed or refused) first. A refusal must be in
upstream's words: the job check's (``JobValidateFailed``) in our reason, each node the plugin
names under its own reason (``npu.go`` addNodePredicateFailedCondition) refused by ours in the
same words. A placement, where Volcano breaks equal scores at random
(``pkg/scheduler/util/scheduler_helper.go`` SelectBestNodeAndScore):

- one pod: on a node of our highest score whose set of highest-scored nodes is the plugin's
  own (its scores from vc-scheduler's log), on our chips or chips as good where upstream's pick
  is random (A3 dies: ``ascend910a3/base.go`` selectNPUForA3Job ranges over a Go map);
- a gang: ours gives each member a node of its own, the best scored, so Huawei's nodes must be
  distinct and none scored below a node left out, each on our chips or as good;
- ToR affinity: the same servers in the same rank order (upstream is deterministic there);
  SuperPoDs: as many servers from SuperPoDs offering as many candidates (upstream walks Go
  maps of SuperPoDs and of their nodes: ``superpod/frame.go``).

Nothing else counts as agreement.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from chip_topology.products import Product, Rule
from chip_topology.products.a3 import dies
from chip_topology.routing import product_by_name, product_for_job, product_of_node
from contract.annotations import (
    SCHEDULER_TASK_SPEC,
    SKIP_ASCEND_PLUGIN_ANNOTATION,
    SKIP_ENABLED,
    TASK_SPEC_ANNOTATION,
)
from contract.chip_names import KIND_OF_RESOURCE
from contract.tor_topology import parse_topology
from scheduler_core.engine import locality
from scheduler_core.engine.model import Decision, Job, NodeState, Task
from scheduler_core.engine.policies import DEFAULT_POLICY
from scheduler_core.engine.session import Session
from scheduler_core.engine.superpod import SuperPodInvalid
from scheduler_core.engine.tor import TorInvalid
from scheduler_core.service.state.jobs import JobSettings
from scheduler_core.service.wire import _a3_roles
from testbed.differential.cases import TOR_LAYOUT, Case
from testbed.differential.outcome import Outcome

SETTINGS = locality.Settings(
    nslb_version="1.0", shared_tor_num=2, reserve_nodes=2, super_pod_size=48
)
AGREE = "agree"
KINDS = ("verdict", "nodes", "ties", "ranks", "chips", "refusal", "undecided")


def node_name(i: int) -> str:
    return f"n{i}"


def node_index(name: str) -> int:
    return int(name.removeprefix("n"))


def our_nodes(case: Case, taken: Mapping[int, Sequence[int]] | None = None) -> list[NodeState]:
    """The case's nodes as the engine sees them (names ``n<i>``), less the chips ``taken``."""
    spec = case.spec
    product = product_of_node(spec.kind, spec.labels).name
    nodes = []
    for i, node in enumerate(case.nodes):
        gone = set((taken or {}).get(i, ()))
        nodes.append(
            NodeState(
                node_name(i),
                product,
                tuple(c for c in node.free if c not in gone),
                spec.chips - len(node.unhealthy),
                unhealthy=frozenset(node.unhealthy),
                network_unhealthy=frozenset(node.network_unhealthy),
                card_type=spec.labels.get("infer-card-type", ""),
            )
        )
    return nodes


def our_job(case: Case) -> Job:
    """The job's NPU pods routed as the service routes them (``chip_topology/routing.py``);
    its pods without NPUs are not ours to place."""
    job = case.job
    kind = KIND_OF_RESOURCE[job.resource]
    product = product_for_job(kind, job.labels, job.annotations, job.selector)
    tasks = tuple(Task(f"p{r}", job.npu) for r in range(job.pods))
    return Job(case.name, product.name, tasks, "differential", dict(job.labels), dict(job.selector))


def network(case: Case) -> locality.Network:
    return locality.Network(
        topology=parse_topology(TOR_LAYOUT.tor_info()),
        addresses={node_name(i): n.address for i, n in enumerate(case.nodes) if n.address},
        super_pods={
            node_name(i): n.super_pod for i, n in enumerate(case.nodes) if n.super_pod is not None
        },
        racks={node_name(i): n.rack for i, n in enumerate(case.nodes) if n.rack is not None},
    )


def _network_job(case: Case) -> bool:
    job = case.job
    return job.pods > 1 or locality.picks_lone_node(job.annotations) or "tor-affinity" in job.labels


def _roles(case: Case, job: Job) -> str:
    """The service's refusal of an A3 job's pods asking no NPU without the marks MindCluster's
    A3 handlers accept (``scheduler_core/service/wire.py`` ``_a3_roles``, which the service
    applies while reading the job)."""
    if not case.job.plain:
        return ""
    marks = {TASK_SPEC_ANNOTATION: SCHEDULER_TASK_SPEC, SKIP_ASCEND_PLUGIN_ANNOTATION: SKIP_ENABLED}
    notes = case.job.plain_annotations
    unmarked = () if any(notes.get(k) == v for k, v in marks.items()) else ("q0",)
    settings = JobSettings(size=case.job.pods, unmarked=unmarked)
    return _a3_roles(product_by_name(job.product), settings, case.job.npu)


def decide(case: Case) -> Decision:
    """Our decision for the case's job."""
    job = our_job(case)
    if refusal := _roles(case, job):
        return Decision(job.key, False, reason=refusal)
    session = Session(our_nodes(case), DEFAULT_POLICY)
    if not _network_job(case):
        return session.place(job, explain=True)
    npu = case.job.npu
    statuses = session.filter(job, npu)
    candidates = [n for n, s in statuses.items() if s.ok]
    scores = session.score(job, npu, candidates)
    candidates.sort(key=lambda n: (-scores.get(n, 0.0), n))
    rejected = {n: s.reason for n, s in statuses.items() if not s.ok}
    product = product_by_name(job.product)
    ask = locality.Ask(
        job.key, case.job.pods, product.capacity, npu, job.labels, dict(case.job.annotations)
    )
    try:
        choice = locality.choose(
            ask,
            candidates,
            network(case),
            dataclasses.replace(SETTINGS, nslb_version=case.nslb),
            idle={n: len(session.usable(n)) for n in candidates} if case.job.pods == 1 else None,
        )
    except (TorInvalid, SuperPodInvalid, locality.Unplaceable) as refused:
        validity = session.place(job)  # the job's own checks come first upstream
        reason = validity.reason if not validity.feasible else str(refused)
        return Decision(job.key, False, reason=reason, scores=scores, rejected=rejected)
    decision = session.place(job, choice.nodes)
    return Decision(
        job.key,
        decision.feasible,
        decision.placements,
        decision.reason,
        scores=scores,
        rejected=rejected,
    )


def outcome(decision: Decision) -> Outcome:
    if not decision.feasible:
        return Outcome(False, reason=decision.reason, detail=dict(decision.rejected))
    placements = tuple((node_index(p.node), p.chips) for p in decision.placements)
    return Outcome(True, placements, ranks=tuple(range(len(placements))))


# ---- the comparison ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """``kind``: ``agree`` or the first way the sides differ (``KINDS``), and how."""

    kind: str
    detail: str = ""
    ours: Outcome = field(default_factory=lambda: Outcome(False))

    @property
    def agrees(self) -> bool:
        return self.kind == AGREE


def judge(case: Case, theirs: Outcome) -> Verdict:
    """Whether our decision agrees with Huawei's outcome ``theirs``."""
    decision = decide(case)
    ours = outcome(decision)
    if theirs.reason.startswith("undecided"):
        return Verdict("undecided", theirs.reason[:500], ours)
    if theirs.placed != ours.placed:
        if theirs.placed:
            where = " ".join(f"n{n}" for n, _ in theirs.placements)
            return Verdict(
                "verdict", f"Huawei placed on [{where}], we refused: {ours.reason}", ours
            )
        return Verdict("verdict", f"we placed, Huawei refused: {theirs.reason}", ours)
    if not theirs.placed:
        return _refusals(case, theirs, decision, ours)
    if case.exclusive:
        return _network_placement(case, theirs, ours)
    if case.job.pods > 1 and (case.job.min_member or case.job.pods) > 1:
        return _gang(case, theirs, ours)
    return _replay(case, theirs, ours)


def _gang(case: Case, theirs: Outcome, ours: Outcome) -> Verdict:
    """A gang without network rules: ours takes the best-scored nodes, one member each, on
    the chips our policy picks there (``decide``), so Huawei's nodes must be distinct, none
    scored below a node left out (ties at the edge are Volcano's draw), each pod on our chips
    or chips as good; and the plugin's best nodes for its first pod must be ours."""
    job = our_job(case)
    product = product_by_name(job.product)
    nodes = our_nodes(case)
    scores = session_scores(case, job, nodes)
    used = [n for n, _ in theirs.placements]
    if len(set(used)) != len(used):
        shared = sorted({f"n{n}" for n in used if used.count(n) > 1})
        return Verdict(
            "nodes",
            f"Huawei puts several pods on {shared} ({_by_rank(theirs)}); ours one a node",
            ours,
        )
    missing = [n for n in used if n not in scores]
    if missing:
        return Verdict("nodes", f"Huawei used n{missing[0]}, which we do not score", ours)
    lowest = min(scores[n] for n in used)
    better = sorted(n for n, s in scores.items() if n not in used and s > lowest)
    if better:
        return Verdict(
            "nodes",
            f"Huawei used {sorted(f'n{n}' for n in used)}, leaving n{better[0]} of a higher "
            f"score; ours {_scores_text(scores)}",
            ours,
        )
    first = next(iter(theirs.scores), None)
    if first is not None and first[1] and not _same_ties(product, top(first[1]), top(scores)):
        return Verdict(
            "ties",
            f"first pod: Huawei's best {_names_of(top(first[1]))}, ours {_names_of(top(scores))}"
            + _their_scores(first[1]),
            ours,
        )
    for rank, (index, chips) in enumerate(theirs.placements):
        usable = _usable(case, product, nodes[index], job.distributed)
        mine = DEFAULT_POLICY.select(product, usable, case.job.npu, job.distributed)
        if not equally_good_chips(product, usable, case.job.npu, mine, chips):
            return Verdict(
                "chips",
                f"pod p{rank} on n{index} (free {list(nodes[index].free)}): Huawei took "
                f"{list(chips)}, we take {list(mine)}",
                ours,
            )
    return Verdict(AGREE, ours=ours)


def _usable(case: Case, product: Product, node: NodeState, distributed: bool) -> tuple[int, ...]:
    """The chips ``Session.place`` picks from: free, healthy, and for a distributed job of a
    network-fault-aware handler not network-unhealthy (``scheduler_core/engine/session.py``
    ``_drops``)."""
    drops = distributed and product.network_fault
    return tuple(
        c
        for c in node.free
        if c not in node.unhealthy and not (drops and c in node.network_unhealthy)
    )


def equally_good_chips(
    product: Product, usable: Sequence[int], req: int, ours: Sequence[int], theirs: Sequence[int]
) -> bool:
    """Whether ``theirs`` is as good as ``ours`` where upstream picks at random: on A3 dies
    (``ascend910a3/base.go`` selectNPUForA3Job walks a map of dies), one chip from a die of as
    many free chips, or whole free dies for two or more."""
    if set(theirs) == set(ours):
        return True
    if product.rule is not Rule.DIES or not set(theirs) <= set(usable):
        return False
    free = set(usable)

    def free_in_die(chip: int) -> int:
        low = chip - chip % dies.DIE
        return sum(1 for c in (low, low + 1) if c in free)

    if req == 1:  # the die's first chip (``npuTop`` sorted), from a die as free as ours
        low = theirs[0] - theirs[0] % dies.DIE
        first = low if low in free else low + 1
        return theirs[0] == first and free_in_die(theirs[0]) == free_in_die(ours[0])
    return all(free_in_die(c) == dies.DIE for c in theirs) and all(c ^ 1 in theirs for c in theirs)


def _replay(case: Case, theirs: Outcome, ours: Outcome) -> Verdict:
    """Huawei's pods in the order it scored them (else by rank): each on a node of our highest
    score given Huawei's earlier pods, whose set of highest-scored nodes equals the plugin's
    own where its log shows it, and on our chips or chips as good."""
    job = our_job(case)
    product = product_by_name(job.product)
    req = case.job.npu
    logged = dict(theirs.scores)
    order = [r for r in logged if r < len(theirs.placements)]
    order += [r for r in range(len(theirs.placements)) if r not in logged]
    taken: dict[int, list[int]] = {}
    for step, rank in enumerate(order):
        index, chips = theirs.placements[rank]
        nodes = our_nodes(case, taken)
        scores = session_scores(case, job, nodes)
        if not scores:
            why = f"pod {step}: no node fits for us after Huawei's earlier pods"
            return Verdict("nodes", why, ours)
        best = top(scores)
        if index not in best:
            return Verdict(
                "nodes",
                f"pod p{rank} (pod {step} placed): Huawei used n{index}, our score "
                f"{scores.get(index)}; our best {_names_of(best)} at {max(scores.values())}"
                + _their_scores(logged.get(rank)),
                ours,
            )
        if rank in logged and logged[rank] and not _same_ties(product, top(logged[rank]), best):
            return Verdict(
                "ties",
                f"pod p{rank} (pod {step} placed) on n{index}: Huawei's best "
                f"{_names_of(top(logged[rank]))}, ours {_names_of(best)}"
                + _their_scores(logged[rank])
                + f"; ours {_scores_text(scores)}",
                ours,
            )
        state = nodes[index]
        usable = _usable(case, product, state, job.distributed)
        our_chips = DEFAULT_POLICY.select(product, usable, req, job.distributed)
        if not equally_good_chips(product, usable, req, our_chips, chips):
            return Verdict(
                "chips",
                f"pod p{rank} on n{index} (free {list(state.free)}): Huawei took {list(chips)}, "
                f"we take {list(our_chips)}",
                ours,
            )
        taken.setdefault(index, []).extend(chips)
    return Verdict(AGREE, ours=ours)


def _same_ties(product: Product, theirs: set[int], ours: set[int]) -> bool:
    """Whether the plugin's best nodes are ours. The A3 handler stops scoring at the first node
    whose best is 0 (``module910a3x16/frame.go`` ScoreBestNPUNodes' fast break), in the order
    Volcano's parallel predicates found the nodes (``pkg/scheduler/util/predicate_helper.go``
    PredicateNodes), so any of our best can be its only best."""
    if product.rule is Rule.DIES:
        return theirs <= ours
    return theirs == ours


def session_scores(case: Case, job: Job, nodes: Sequence[NodeState]) -> dict[int, float]:
    """Our score of each node that can take a pod of the job, by node index."""
    session = Session(nodes, DEFAULT_POLICY)
    return {node_index(n): s for n, s in session.score(job, case.job.npu).items()}


def top(scores: Mapping[int, float]) -> set[int]:
    """The nodes of the highest score."""
    best = max(scores.values())
    return {n for n, s in scores.items() if s == best}


def _names_of(nodes: set[int]) -> str:
    return "[" + " ".join(f"n{n}" for n in sorted(nodes)) + "]"


def _scores_text(scores: Mapping[int, float]) -> str:
    return "{" + ", ".join(f"n{n}: {s:g}" for n, s in sorted(scores.items())) + "}"


def _their_scores(scores: Mapping[int, float] | None) -> str:
    return "" if not scores else f" (Huawei's scores {_scores_text(scores)})"


def _super_pod_shape(case: Case, used: Sequence[int]) -> list[tuple[int, int]]:
    """Per SuperPoD the job uses: how many candidate nodes it offers and how many the job
    takes. Upstream walks its SuperPoDs and each SuperPoD's nodes as Go maps
    (``superpod/frame.go`` classifySuperPod over ``map[int32]superPod``,
    selectNodesFromSuperPod over ``map[string]plugin.NPUNode``): SuperPoDs of as many
    candidates are taken in any order, and any of a SuperPoD's nodes; only these counts are
    not random. The candidates are the nodes passing the predicate, for a one-pod job those of
    the least idle chips (``selectNodesWithLeastResourceForSingle``)."""
    job = our_job(case)
    session = Session(our_nodes(case), DEFAULT_POLICY)
    passing = [node_index(n) for n, s in session.filter(job, case.job.npu).items() if s.ok]
    if case.job.pods == 1 and passing:
        least = min(len(case.nodes[i].free) for i in passing)
        passing = [i for i in passing if len(case.nodes[i].free) == least]
    offered = Counter(case.nodes[i].super_pod for i in passing)
    taken = Counter(case.nodes[i].super_pod for i in used)
    return sorted((offered[sp], taken[sp]) for sp in taken)


def _by_rank(outcome: Outcome) -> list[str]:
    """The nodes of ranks 0, 1, … (``hccl/rankIndex``; pod order where a pod has none)."""
    ranked = sorted(
        zip(outcome.ranks or range(len(outcome.placements)), outcome.placements, strict=True)
    )
    return [f"n{node}" for _, (node, _) in ranked]


def _network_placement(case: Case, theirs: Outcome, ours: Outcome) -> Verdict:
    """A ToR or SuperPoD job: the same servers (in any rank order), each on our chips; on
    SuperPoDs, servers as good (``_super_pod_shape``)."""
    their_nodes = sorted(n for n, _ in theirs.placements)
    our_nodes_ = sorted(n for n, _ in ours.placements)
    super_pods = any(n.super_pod is not None for n in case.nodes)
    same = their_nodes == our_nodes_ or (
        super_pods and _super_pod_shape(case, their_nodes) == _super_pod_shape(case, our_nodes_)
    )
    if not same:
        return Verdict(
            "nodes",
            f"Huawei used {[f'n{n}' for n in their_nodes]}, we use {[f'n{n}' for n in our_nodes_]}",
            ours,
        )
    if not super_pods and _by_rank(theirs) != _by_rank(ours):
        return Verdict(
            "ranks",
            f"ranks 0.. on Huawei's {_by_rank(theirs)}, ours {_by_rank(ours)}",
            ours,
        )
    job = our_job(case)
    product = product_by_name(job.product)
    nodes = our_nodes(case)
    for index, chips in theirs.placements:
        usable = _usable(case, product, nodes[index], job.distributed)
        mine = DEFAULT_POLICY.select(product, usable, case.job.npu, job.distributed)
        if not equally_good_chips(product, usable, case.job.npu, mine, chips):
            return Verdict(
                "chips", f"n{index}: Huawei took {list(chips)}, we take {list(mine)}", ours
            )
    return Verdict(AGREE, ours=ours)


# ---- refusals ---------------------------------------------------------------------------------

_NODE_REASON = re.compile(r" Reason: (.*?), such as: \[([^\]]*)\]\.\.\.")


def huawei_reasons(case: Case, theirs: Outcome) -> tuple[dict[str, str], dict[int, str]]:
    """Huawei's refusal: the PodGroup's conditions by reason (``JobValidateFailed``,
    ``JobEnqueueFailed``, ``BatchOrderFailed``, ``NodePredicateFailed``, ...), and the plugin's
    own refusal of each of the case's nodes it names (``npu.go``
    addNodePredicateFailedCondition: `` Reason: <err>, such as: [<nodes>]...``)."""
    conditions: dict[str, str] = {}
    for part in theirs.reason.split(" | "):
        reason, _, message = part.partition(": ")
        conditions[reason] = message
    per_node: dict[int, str] = {}
    for reason, names in _NODE_REASON.findall(conditions.get("NodePredicateFailed", "")):
        for name in names.split():
            if re.fullmatch(r"n\d+", name):
                per_node[node_index(name)] = reason
    return conditions, per_node


def _names(text: str) -> str:
    """A refusal with the job's and task's names left out (``job<ns/pg>``, ``task<p0>``, a
    bare ``differential/<name>``: our names are the case's, upstream's the PodGroup's)."""
    return re.sub(r"differential/[\w.-]+", "<>", re.sub(r"(job|task)<[^>]*>", r"\1<>", text))


def job_refusal(conditions: Mapping[str, str], reason: str, ours: Outcome) -> Verdict | None:
    """Where upstream's job checks refused the job (``JobValidateFailed``): agreement when our
    ``reason`` carries its words; None where they passed it."""
    invalid = conditions.get("JobValidateFailed")
    if invalid is None:
        return None
    core = _names(invalid.split(": ", 1)[-1].strip().rstrip(",").strip())
    if core and core not in _names(reason):
        return Verdict("refusal", f"Huawei: {invalid!r}; ours: {reason!r}", ours)
    return Verdict(AGREE, ours=ours)


def _refusals(case: Case, theirs: Outcome, decision: Decision, ours: Outcome) -> Verdict:
    """Both refuse: the same reason. A job refused by its own checks (upstream's
    ``JobValidateFailed``) must be refused by ours in the same words; a node the plugin refused
    must be refused by ours in its words: by our filter of the job's first pod, or, for a gang
    whose earlier pods took chips before a later one found no node (Volcano's predicate
    reasons are the failing task's), among our reasons for that later pod."""
    conditions, per_node = huawei_reasons(case, theirs)
    if (checked := job_refusal(conditions, decision.reason, ours)) is not None:
        return checked
    for index, reason in sorted(per_node.items()):
        mine = decision.rejected.get(node_name(index))
        if mine is None and case.job.pods > 1 and f" {reason.strip()}" in decision.reason:
            continue
        if mine is None:
            return Verdict(
                "refusal",
                f"Huawei refused n{index} ({reason!r}); ours passes it "
                f"(our reason for the job: {decision.reason!r})",
                ours,
            )
        if reason.strip() != mine.strip():
            return Verdict("refusal", f"n{index}: Huawei {reason!r}; ours {mine!r}", ours)
    return Verdict(AGREE, ours=ours)
