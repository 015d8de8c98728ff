"""The inference handlers' chip rules, one ``Rules`` a handler: the card handlers (one card
holds the task, Huawei's priority list and ``8 × (card − best)``), chip310x4 (fragments
first), the 310P base handler (the first chips), the 300I Duo chip handler (half-used cards
first) and its ``distributed`` variant (whole cards)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chip_topology.products.base.rules import BASE_NODE_WEIGHT, BASE_REASON, validate_base
from chip_topology.products.groups import (
    enough_chips,
    first_chips,
    fits_one_group,
    group_affinity,
    mask_of,
    select_by_priority,
)
from chip_topology.products.inference import cards
from chip_topology.products.jobs import JobAsk, JobInvalid, job_id
from chip_topology.products.product import CARD as CARD_ATTRIBUTE
from chip_topology.products.product import Product, Refusal, Rules
from contract.annotations import DISTRIBUTED_LABEL

# The inference handlers' refusals as MindCluster words them; its framework passes a handler's
# error on as it is (``plugin/node.go`` NodePredicate; VOL-v5 prefixed ``checkNodeNPUByTask
# <node> : ``). The card handlers and the Duo chip handler wrap theirs in the topology warning
# (``ascend310/card310x4/frame.go``, ``ascend310p/card310px2/frame.go``,
# ``ascend310p/chip310px2/frame.go`` CheckNodeNPUByTask); chip310x4 and the 310P base handler
# keep the base handler's (BASE_REASON).
NOT_TOPOLOGY = "checkNodeNPUByTask the npus on this node don't satisfy the schedulable topology : "
DUO_LABEL_REASON = "judgeNodeLabel node card label not right, is {card_type}"
CARD_REASON = NOT_TOPOLOGY + "req npu({req}) illegal not meet node top<{top}>"
DUO_EVEN_REASON = NOT_TOPOLOGY + "judgeNodeByTaskNPU task req num<{req}>, node full cards is {full}"
DUO_ODD_REASON = (
    NOT_TOPOLOGY + "judgeNodeByTaskNPU task req num<{req}>, node full/half cards is {full}/{half}"
)


def _card_fits(product: Product, mask: int, req: int, distributed: bool) -> bool:
    """One card holds the task (``card310x4/task.go``)."""
    return req <= product.group_size and fits_one_group(product, mask, req)


def _card_score(
    product: Product, mask: int, allocatable: int, req: int, distributed: bool
) -> float:
    if req <= product.group_size:
        best = group_affinity(product, mask, req)
    else:
        best = 0 if req == product.capacity and mask == product.full_mask else product.impossible
    if best == product.impossible:
        return 0.0
    return product.score_weight * (product.impossible - best)


def _card_select(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    return select_by_priority(product, usable, req) if req <= product.group_size else ()


def _base_score(
    product: Product, mask: int, allocatable: int, req: int, distributed: bool
) -> float:
    """The 310P base handler and chip310x4, which keeps the base ScoreBestNPUNodes:
    (64 − unhealthy) × 100 − usable, where "unhealthy" is read from the node's
    ``huawei.com/Ascend910-Unhealthy`` list for every resource but ``huawei.com/npu``
    (``base/node.go`` getUnhealthyNPU), which a 310 or 310P node never has: 6400 − usable,
    the fullest node first (``base/frame.go`` ScoreBestNPUNodes)."""
    return float(product.capacity * BASE_NODE_WEIGHT - mask.bit_count())


def _no_score(product: Product, mask: int, allocatable: int, req: int, distributed: bool) -> float:
    return 0.0  # chip310px2 without ``distributed``: no ScoreBestNPUNodes of its own


def _buckets(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    return cards.select_buckets(product.group_size, usable, req)


def _half_first(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    return cards.select_half_first(product.group_size, usable, req)


def _duo_fits(product: Product, mask: int, req: int, distributed: bool) -> bool:
    return cards.duo_distributed_fits(mask, req)


def _duo_score(product: Product, mask: int, allocatable: int, req: int, distributed: bool) -> float:
    return product.score_weight * (16 - cards.duo_distributed_rank(mask, req))


def _duo_select(
    product: Product, usable: Sequence[int], req: int, distributed: bool
) -> tuple[int, ...]:
    return cards.select_duo_distributed(usable, req)


# The 300I Duo handlers' own check of a ``distributed: "true"`` job, in each one's words
# (``ascend310p/card310px2/frame.go`` and ``chip310px2/frame.go`` ValidNPUJob).
_DUO_ONE_POD = {
    "card310px2": "should has only 1 npu pod ",
    "chip310px2": "should have only 1 npu pod ",
}


def _validate(job: JobAsk, product: Product, *, distributed: bool) -> None:
    """Inference handlers as MindCluster checks them: the 300I Duo handlers refuse a
    ``distributed`` job of more than one NPU pod; then every handler keeps the base handler's
    ValidNPUJob, each task 1..its ``MaxNodeNPUNum`` (64 on 310 and plain 310P nodes, 32 for
    the Duo card handler, 16 for the Duo chip handler; ``base/frame.go``). A card handler's
    task larger than a card passes here, as upstream, and no node's card holds it (the
    predicate says so on every node)."""
    duo = "chip310px2" if product.node_product == "chip310px2" else product.name
    words = _DUO_ONE_POD.get(duo)
    distributed = distributed or job.labels.get(DISTRIBUTED_LABEL) == "true"
    if words is not None and distributed and len(job.npu_tasks) > 1:
        raise JobInvalid(
            f"job <{job_id(job)}> task num <{len(job.tasks)}> is invalid, job with label of "
            f"distributed=true {words}"
        )
    validate_base(job, product)


def _validate_labelled(job: JobAsk, product: Product) -> None:
    _validate(job, product, distributed=False)


def _validate_distributed(job: JobAsk, product: Product) -> None:
    """The ``distributed`` Duo chip handler: distributed by its routing, whatever the job's
    label says."""
    _validate(job, product, distributed=True)


def _serves(node_product: Product, job_product: Product) -> bool:
    """Any inference handler takes a node of its chip kind (the job picks the handler), a Duo
    chip handler only a node labelled as a Duo."""
    return node_product.kind is job_product.kind and job_product.node_product in (
        None,
        node_product.name,
    )


# Every inference handler names up to 64 chips (``MaxNodeNPUNum``); a node has the cards it
# reports (``partial_nodes``) and is drawn by them (``draw_known_groups``).


def _mislabelled(node_product: Product, job_product: Product) -> str:
    return DUO_LABEL_REASON


def _enough_refusal(
    product: Product, usable: Sequence[int], mask: int, req: int, network_unhealthy: frozenset[int]
) -> Refusal:
    """Enough idle chips are enough for these handlers: the base handler's words."""
    return Refusal(BASE_REASON.format(req=req, idle=len(usable)))


def _card_refusal(
    product: Product, usable: Sequence[int], mask: int, req: int, network_unhealthy: frozenset[int]
) -> Refusal:
    top = "[" + " ".join(str(c) for c in sorted(usable)) + "]"  # Go's %v of a slice
    return Refusal(CARD_REASON.format(req=req, top=top))


def _duo_refusal(
    product: Product, usable: Sequence[int], mask: int, req: int, network_unhealthy: frozenset[int]
) -> Refusal:
    half, full = cards.duo_counts(mask_of(usable))
    if req % 2 == 0:
        return Refusal(DUO_EVEN_REASON.format(req=req, full=full))
    return Refusal(DUO_ODD_REASON.format(req=req, full=full, half=half))


def _card(product: Product) -> str:
    return CARD_ATTRIBUTE


def _card_rules(**own: Any) -> Rules:
    """A card family's Rules: what every inference card shares (which nodes it serves, its
    mislabelled nodes, partial nodes, the known groups drawn, the card as the DRA group, no
    product label asked), with ``own`` (its fit, score, chips, refusal and validation)."""
    return Rules(
        serves=_serves,
        mislabelled=_mislabelled,
        partial_nodes=True,
        draw_known_groups=True,
        group_attribute=_card,
        labelled=False,
        **own,
    )


CARD = _card_rules(
    refuse=_card_refusal,
    fits=_card_fits,
    score=_card_score,
    select=_card_select,
    select_tightest=_card_select,
    validate=_validate_labelled,
)
BUCKETS = _card_rules(
    refuse=_enough_refusal,
    fits=enough_chips,
    score=_base_score,
    select=_buckets,
    select_tightest=_buckets,
    validate=_validate_labelled,
)
FIRST = _card_rules(
    refuse=_enough_refusal,
    fits=enough_chips,
    score=_base_score,
    select=first_chips,
    select_tightest=first_chips,
    validate=_validate_labelled,
)
HALF_FIRST = _card_rules(
    refuse=_enough_refusal,
    fits=enough_chips,
    score=_no_score,
    select=_half_first,
    select_tightest=_half_first,
    validate=_validate_labelled,
)
DUO_DISTRIBUTED = _card_rules(
    refuse=_duo_refusal,
    fits=_duo_fits,
    score=_duo_score,
    select=_duo_select,
    select_tightest=_duo_select,
    validate=_validate_distributed,
)
