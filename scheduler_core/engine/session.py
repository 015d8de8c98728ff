"""The decision engine: validate → filter → score → select, for one scheduling session.

Nodes are indexed by their *signature* (product, usable-chip mask, network-unhealthy mask,
allocatable). Feasibility and score depend on nothing else, so they are computed once per
signature and request, and one pod costs O(distinct signatures) instead of O(nodes): a
10,000-node cluster of 8-chip servers has at most a few thousand signatures, usually far fewer.
"""

from __future__ import annotations

import bisect
import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import NamedTuple

from chip_topology.products import Product, fits, mask_of
from chip_topology.routing import product_by_name, serves
from contract.chip_names import InvalidInput, chip_name
from scheduler_core.engine.ledger import Holding, SessionLedger
from scheduler_core.engine.model import Decision, Job, NodeState, Placement, Status, Task
from scheduler_core.engine.policies import DEFAULT_POLICY, Policy
from scheduler_core.engine.rescheduling import IGNORE, SUB_HEALTHY_LABEL, SUB_HEALTHY_STRATEGIES
from scheduler_core.engine.validation import JobInvalid, validate_job

# Before any handler, MindCluster's framework refuses a node whose idle chips (the kubelet's
# allocatable less what its pods and this session's ask) are fewer than the task asks
# (``plugin/job.go`` preCheckNodePredicate → checkNodeNum): the words of most refusals. The
# node's usable chips are its idle ones here (a node whose counts disagree is left out).
IDLE_REASON = (
    "NPUResourceShortage: {resource}, task requires {req} NPU cards but node idle is {idle}"
)
# A job whose ``subHealthyStrategy`` is not ``ignore`` takes no sub-healthy node, refused before
# anything else (``internal/rescheduling/reschedule.go`` checkNodeCurNodeIsFault; its words,
# the missing space included).
SUB_HEALTH_REASON = (
    "NodePredicate failed, cardSubHealthy={card} andswitchSubHealthy={switch}, but sub-healthy "
    "strategy is {strategy}"
)
# {node} is filled in per node (Status.named); a handler's own words are its family's
# (``Rules.refuse``, ``Rules.mislabelled``).
KIND_REASON = "node {node} has {have} chips, the task asks for {want}"


class Signature(NamedTuple):
    """What feasibility and scores depend on; a tuple, so hashing it is cheap."""

    product: str
    usable: int
    network_unhealthy: int
    allocatable: int
    unhealthy: int  # how many chips the node lists unhealthy (the base handler's score)
    card_sub_healthy: bool = False
    switch_sub_healthy: bool = False

    def mask(self, distributed: bool) -> int:
        """The usable chips; a distributed job of a network-fault-aware handler leaves the
        network-unhealthy ones (``distributed`` is then ``Job.distributed and
        product.network_fault``, see ``_drops``)."""
        return self.usable & ~self.network_unhealthy if distributed else self.usable


def sub_health_strategy(job: Job) -> str:
    """The job's ``subHealthyStrategy``, ``ignore`` when missing or unknown (``plugin/job.go``
    setJobSubHealthyStrategy)."""
    strategy = job.labels.get(SUB_HEALTHY_LABEL, IGNORE)
    return strategy if strategy in SUB_HEALTHY_STRATEGIES else IGNORE


def _go_bool(value: bool) -> str:
    return "true" if value else "false"


def _drops(product: Product, distributed: bool) -> bool:
    """Whether a job leaves a node's network-unhealthy chips (MindCluster ``base/node.go``
    GetUsableTopFromNode: distributed jobs on handlers ``WithNetworkFault``)."""
    return distributed and product.network_fault


def _healthy(product: Product, signature: Signature) -> int:
    """The count the score calls allocatable (``Rules.healthy``)."""
    return product.rules.healthy(product, signature.allocatable, signature.unhealthy)


def check_node_chips(node: NodeState) -> None:
    """Every chip a node names must exist on its product."""
    product = product_by_name(node.product)
    if node.allocatable > product.capacity:
        raise InvalidInput(
            f"node {node.name}: allocatable {node.allocatable} exceeds {product.name}'s "
            f"{product.capacity} chips"
        )
    for label, chips in (
        ("free", node.free),
        ("unhealthy", node.unhealthy),
        ("network_unhealthy", node.network_unhealthy),
    ):
        bad = sorted(c for c in chips if not 0 <= c < product.capacity)
        if bad:
            raise InvalidInput(
                f"node {node.name}: {label} chip {chip_name(bad[0])} is outside "
                f"{product.name} (chips 0-{product.capacity - 1})"
            )


def filter_node(
    node: NodeState,
    usable: tuple[int, ...],
    job_product: Product,
    req: int,
    distributed: bool,
    *,
    strategy: str = IGNORE,
) -> Status:
    """The predicate with upstream's reasons (``CheckNodeNPUByTask``); ``strategy``: the job's
    ``subHealthyStrategy``."""
    node_product = product_by_name(node.product)
    if not serves(node_product, job_product):
        if node_product.kind is not job_product.kind:
            have, want = node_product.kind.resource, job_product.kind.resource
            kinds = KIND_REASON.format(have=have, want=want, node="{node}")
            return Status.unschedulable(kinds, per_node=True, unresolvable=True)
        label = job_product.rules.mislabelled(node_product, job_product)
        return Status.unschedulable(label, per_node=True, unresolvable=True)
    if strategy != IGNORE and node.sub_healthy:
        card, switch = _go_bool(node.card_sub_healthy), _go_bool(node.switch_sub_healthy)
        why = SUB_HEALTH_REASON.format(card=card, switch=switch, strategy=strategy)
        return Status.unschedulable(why)
    signature = _signature(node, usable)
    drops = _drops(job_product, distributed)
    mask = signature.mask(drops)
    if fits(job_product, mask, req, distributed):
        return Status.success()
    if len(usable) < req:
        resource = job_product.kind.resource
        return Status.unschedulable(
            IDLE_REASON.format(resource=resource, req=req, idle=len(usable))
        )
    refusal = job_product.rules.refuse(job_product, usable, mask, req, node.network_unhealthy)
    return Status.unschedulable(refusal.reason, per_node=refusal.per_node)


def _signature(node: NodeState, usable: Iterable[int]) -> Signature:
    mask, network = mask_of(tuple(usable)), mask_of(node.network_unhealthy)
    if not network:  # the node's product says which masks answer alike (``Rules.canonical``)
        mask = product_by_name(node.product).rules.canonical(mask)
    return Signature(
        node.product,
        mask,
        network,
        node.allocatable,
        len(node.unhealthy),
        node.card_sub_healthy,
        node.switch_sub_healthy,
    )


class Session:
    """Cluster state for one scheduling session (or a long-lived scheduler cache).

    Mutations go through the ledger, so a chip chosen for one pod is never offered to the
    next, and a failed gang gives back every chip it took.
    """

    def __init__(self, nodes: Iterable[NodeState] = (), policy: Policy = DEFAULT_POLICY) -> None:
        self.policy = policy
        self._ledger = SessionLedger()
        self._nodes: dict[str, NodeState] = {}
        self._usable: dict[str, tuple[int, ...]] = {}
        self._signature: dict[str, Signature] = {}
        self._buckets: dict[Signature, list[str]] = {}
        self._cache: dict[tuple[Signature, str, int, bool], float | None] = {}
        self._statuses: dict[tuple[Signature, str, int, bool, str], Status] = {}
        self._room: dict[tuple[Signature, str, int, bool, str, int], bool] = {}
        self.chips = 0  # allocatable chips of every node, kept as nodes come and go
        for node in nodes:
            self.upsert_node(node)

    # ---- cluster state ---------------------------------------------------------------

    @property
    def nodes(self) -> Mapping[str, NodeState]:
        return self._nodes

    def upsert_node(self, node: NodeState) -> None:
        """Add a node or replace its snapshot (a new DeviceInfo); the ledger still applies."""
        check_node_chips(node)
        if self._nodes.get(node.name) == node:
            return
        if (old := self._nodes.get(node.name)) is not None:
            self._unindex(node.name)
            self.chips -= old.allocatable
        self._nodes[node.name] = node
        self.chips += node.allocatable
        self._reindex(node.name)

    def remove_node(self, name: str) -> None:
        """The node is no longer offered (left out, or gone); chips held on it stay held,
        should it come back."""
        if (old := self._nodes.pop(name, None)) is not None:
            self.chips -= old.allocatable
            self._unindex(name)

    def fitting(self, product: str, req: int) -> Iterator[str]:
        """The nodes where a ``req``-chip task of a job of several pods fits now, the
        policy's best first (ties by name within a signature): from the signature buckets,
        lazily, never by walking every node."""
        ranked = []
        for signature, bucket in self._buckets.items():
            score = self._score(signature, product, req, True)
            if score is not None:
                ranked.append((-score, bucket[0], bucket))
        ranked.sort(key=lambda item: item[:2])
        return itertools.chain.from_iterable(bucket for _, _, bucket in ranked)

    def crowded(self, names: Iterable[str], job: Job, req: int, kept: str, keep: int) -> list[str]:
        """The nodes of ``names`` where the chips the policy gives a ``req``-chip task of
        ``job`` leave no room for a ``keep``-chip task of a job of several pods of product
        ``kept`` (a gang member's chips held there); per signature, as the predicate."""
        crowded = []
        seen: dict[Signature, bool] = {}
        for name in names:
            signature = self._signature[name]
            room = seen.get(signature)
            if room is None:
                key = (signature, job.product, req, job.distributed, kept, keep)
                room = self._room.get(key)
                if room is None:
                    room = self._room[key] = self._leaves_room(name, job, req, kept, keep)
                seen[signature] = room
            if not room:
                crowded.append(name)
        return crowded

    def _leaves_room(self, name: str, job: Job, req: int, kept: str, keep: int) -> bool:
        usable = self._usable[name]
        product = product_by_name(job.product)
        if _drops(product, job.distributed):
            usable = tuple(c for c in usable if c not in self._nodes[name].network_unhealthy)
        chips = self.policy.select(product, usable, req, job.distributed)
        held = product_by_name(kept)
        left = self._signature[name].mask(_drops(held, True)) & ~mask_of(chips)
        return fits(held, left, keep, True)

    def usable(self, name: str) -> tuple[int, ...]:
        """Chips of a node that may be offered now, in DeviceInfo order."""
        return self._usable[name]

    def release_job(self, job: str) -> list[Holding]:
        released = self._ledger.release_job(job)
        for node in {h.node for h in released}:
            self._refresh(node)
        return released

    # ---- decisions -------------------------------------------------------------------

    def filter(self, job: Job, req: int, names: Iterable[str] | None = None) -> dict[str, Status]:
        """The predicate for every node (or the given ones that exist). A status depends on the
        node's signature alone, so it is computed once per signature and request."""
        passing, refused, _ = self.split(job, req, self._nodes if names is None else names)
        statuses = dict.fromkeys(passing, Status.success())
        statuses.update(refused)
        return statuses

    def split(
        self, job: Job, req: int, names: Iterable[str]
    ) -> tuple[list[str], dict[str, Status], list[str]]:
        """The predicate over ``names`` in one pass: the nodes that pass (in order), the
        refused ones with their verdicts, and the names of no node of this session."""
        product = product_by_name(job.product)
        distributed = job.distributed
        strategy = sub_health_strategy(job)
        passing: list[str] = []
        refused: dict[str, Status] = {}
        unknown: list[str] = []
        # Per call by signature alone: no key tuple built per node (the extender sends every
        # node's name with every pod).
        seen: dict[Signature, Status] = {}
        signatures = self._signature
        for name in names:
            signature = signatures.get(name)
            if signature is None:
                unknown.append(name)
                continue
            status = seen.get(signature)
            if status is None:
                key = (signature, job.product, req, distributed, strategy)
                status = self._statuses.get(key)
                if status is None:
                    node = self._nodes[name]
                    usable = self._usable[name]
                    status = filter_node(node, usable, product, req, distributed, strategy=strategy)
                    self._statuses[key] = status
                seen[signature] = status
            if status.ok:
                passing.append(name)
            elif status.per_node:
                top = self._top(name, product, distributed) if "{top}" in status.reason else ""
                refused[name] = status.named(self._nodes[name], top)
            else:
                refused[name] = status
        return passing, refused, unknown

    def score(self, job: Job, req: int, names: Iterable[str] | None = None) -> dict[str, float]:
        """The policy's score of every node (or the given ones) that passes the filter for a
        ``req``-chip task."""
        distributed = job.distributed
        strategy = sub_health_strategy(job)
        scores: dict[str, float] = {}
        if names is None:
            for signature, bucket in self._buckets.items():
                score = self._score(signature, job.product, req, distributed, strategy)
                if score is not None:
                    scores.update(dict.fromkeys(bucket, score))
            return scores
        seen: dict[Signature, float | None] = {}
        for name in names:
            known = self._signature.get(name)
            if known is None:
                continue
            if known in seen:
                score = seen[known]
            else:
                score = seen[known] = self._score(known, job.product, req, distributed, strategy)
            if score is not None:
                scores[name] = score
        return scores

    def score_list(self, job: Job, req: int, names: Sequence[str]) -> list[float | None]:
        """``score``'s values in the order of ``names`` (None: the node cannot host the task,
        or is no node of this session), each distinct signature scored once. The per-node
        steps are C loops (``map``): prioritize is called with thousands of names per pod."""
        distributed = job.distributed
        strategy = sub_health_strategy(job)
        signatures = list(map(self._signature.get, names))
        by_signature: dict[Signature | None, float | None] = {None: None}
        for signature in dict.fromkeys(signatures):
            if signature is not None:
                score = self._score(signature, job.product, req, distributed, strategy)
                by_signature[signature] = score
        return list(map(by_signature.__getitem__, signatures))

    def place(
        self, job: Job, nodes: Sequence[str] | None = None, explain: bool = False
    ) -> Decision:
        """Place every NPU task of the job, or none of them: the i-th task on ``nodes[i]``
        when given (the node kube-scheduler chose, a gang's nodes chosen for the network),
        else on the best node. ``explain``: scores and rejections for the first task."""
        try:
            product = validate_job(job)
        except JobInvalid as invalid:
            return Decision(job.key, False, reason=str(invalid))
        tasks = job.npu_tasks
        if nodes is not None and (len(nodes) != len(tasks) or len(set(nodes)) != len(nodes)):
            return Decision(job.key, False, reason=f"{job.key}: need {len(tasks)} distinct nodes")
        if self._ledger.holds(job.key):
            return Decision(
                job.key, False, reason=f"job {job.key} already holds chips this session"
            )
        scores: dict[str, float] = {}
        rejected: dict[str, str] = {}
        if explain:
            scores = self.score(job, tasks[0].npu)
            rejected = {n: s.reason for n, s in self.filter(job, tasks[0].npu).items() if not s.ok}
        placements: list[Placement] = []
        distributed = job.distributed
        strategy = sub_health_strategy(job)
        for i, task in enumerate(tasks):
            if nodes is None:
                node = self._best_node(job.product, task.npu, distributed, strategy)
                refusal = None if node is not None else self._no_fit_reason(job, product, task)
            else:
                node = nodes[i]
                refusal = self._refusal(node, product, task.npu, distributed, strategy)
            if node is None or refusal is not None:
                self.release_job(job.key)
                return Decision(
                    job.key, False, reason=refusal or "", scores=scores, rejected=rejected
                )
            usable = self._usable[node]
            if _drops(product, distributed):
                usable = tuple(c for c in usable if c not in self._nodes[node].network_unhealthy)
            chips = self.policy.select(product, usable, task.npu, distributed)
            if len(chips) != task.npu:
                raise AssertionError(f"{self.policy.name} selected {chips} on {node} for {task}")
            self._ledger.take(job.key, task.name, node, chips)
            self._refresh(node)
            placements.append(Placement(task.name, node, chips))
        return Decision(job.key, True, tuple(placements), scores=scores, rejected=rejected)

    def _refusal(
        self, node: str, product: Product, req: int, distributed: bool, strategy: str = IGNORE
    ) -> str | None:
        """Why a task may not go on a node chosen for it (None: it may)."""
        if node not in self._nodes:
            return f"{node} is not a known NPU node"
        state = self._nodes[node]
        status = filter_node(
            state, self._usable[node], product, req, distributed, strategy=strategy
        )
        status = status.named(state, self._top(node, product, distributed))
        return None if status.ok else f"{node}: {status.reason}"

    def _top(self, name: str, product: Product, distributed: bool) -> str:
        """A node's usable chips as a handler prints them (Go's ``%v`` of its sorted slice,
        without the brackets), those a distributed job leaves out left out."""
        usable = self._usable[name]
        if _drops(product, distributed):
            usable = tuple(c for c in usable if c not in self._nodes[name].network_unhealthy)
        return " ".join(str(c) for c in sorted(usable))

    def warm(self) -> None:
        """Fill the per-signature caches for every single-pod request of every product here,
        so the first requests after a new snapshot are as fast as the rest."""
        for product_name in {node.product for node in self._nodes.values()}:
            product = product_by_name(product_name)
            for req in product.single_task_requests:
                job = Job("warm-up", product_name, (Task("warm-up", req),))
                self.filter(job, req)
                self.score(job, req)

    def release_task(self, job: str, task: str) -> None:
        """One task's chips come back (its pod now shows them, or its bind failed)."""
        released = self._ledger.release_task(job, task)
        if released is not None:
            self._refresh(released.node)

    # ---- internals -------------------------------------------------------------------

    def _score(
        self,
        signature: Signature,
        product: str,
        req: int,
        distributed: bool,
        strategy: str = IGNORE,
    ) -> float | None:
        if signature.product != product and not serves(
            product_by_name(signature.product), product_by_name(product)
        ):
            return None
        sub_healthy = signature.card_sub_healthy or signature.switch_sub_healthy
        if sub_healthy and strategy != IGNORE:
            return None
        key = (signature, product, req, distributed)
        try:
            return self._cache[key]
        except KeyError:
            pass
        job_product = product_by_name(product)
        mask = signature.mask(_drops(job_product, distributed))
        healthy = _healthy(job_product, signature)
        score = None
        if fits(job_product, mask, req, distributed):
            score = self.policy.score(job_product, mask, healthy, req, distributed)
            if sub_healthy and self.policy.sub_health_penalty:
                score = max(0.0, score - self.policy.sub_health_penalty)
        self._cache[key] = score
        return score

    def _best_node(
        self, product: str, req: int, distributed: bool, strategy: str = IGNORE
    ) -> str | None:
        """Highest score; ties go to the smallest node name, so decisions are repeatable."""
        best_score = 0.0
        best_name: str | None = None
        for signature, names in self._buckets.items():
            score = self._score(signature, product, req, distributed, strategy)
            if score is None:
                continue
            first = names[0]
            if (
                best_name is None
                or score > best_score
                or (score == best_score and first < best_name)
            ):
                best_score, best_name = score, first
        return best_name

    def _no_fit_reason(self, job: Job, product: Product, task: Task) -> str:
        req = task.npu
        reasons = Counter(s.reason for s in self.filter(job, req).values() if not s.ok)
        detail = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
        return (
            f"task {task.name} of {job.key} ({req} x {product.name}): 0/{len(self._nodes)} nodes "
            f"are available" + (f": {detail}" if detail else "")
        )

    def _refresh(self, name: str) -> None:
        if name in self._nodes:
            self._unindex(name)
            self._reindex(name)

    def _reindex(self, name: str) -> None:
        node = self._nodes[name]
        blocked = node.unhealthy | self._ledger.unavailable(name)
        usable = tuple(c for c in node.free if c not in blocked)
        signature = _signature(node, usable)
        self._usable[name] = usable
        self._signature[name] = signature
        bisect.insort(self._buckets.setdefault(signature, []), name)

    def _unindex(self, name: str) -> None:
        signature = self._signature.pop(name)
        del self._usable[name]
        bucket = self._buckets[signature]
        del bucket[bisect.bisect_left(bucket, name)]
        if not bucket:
            del self._buckets[signature]
