"""The Atlas A3 handlers' chip rules: one chip, or whole dies of two (``dies``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from chip_topology.products.a3 import dies
from chip_topology.products.base.rules import BASE_REASON
from chip_topology.products.groups import split_refusal
from chip_topology.products.jobs import JobAsk, JobInvalid, task_listing
from chip_topology.products.product import DIE, Product, Refusal, Rules

# CheckTaskNPU's expectations (``ascend910a3/module910a3x16/frame.go``, ``superpod/frame.go``).
A3X16_EXPECTED = (
    "only standalone job can request single npu, npu num required by task in a3×16 job "
    f"must be 2n, and <= {dies.TABLE_CHIPS}"
)
SUPER_POD_EXPECTED = (
    "distributed super-pod job require npu({total}) should be equal to node npu({capacity})"
)
# ``ascend910a3/base.go`` JudgeNodeAndTaskNPU: enough chips but not in whole dies; ``npu
# top[%v]`` of a Go slice, so the brackets double.
DIES_REASON = "npu top[[{top}]] is not meet task req({req})"


def fits(product: Product, mask: int, req: int, distributed: bool) -> bool:
    return dies.fits(mask, req, product.capacity)


def score(product: Product, mask: int, allocatable: int, req: int, distributed: bool) -> float:
    return dies.score(mask, req)


def select(product: Product, usable: Sequence[int], req: int, distributed: bool) -> tuple[int, ...]:
    return dies.select(usable, req)


def validate_super_pod(job: JobAsk, product: Product) -> None:
    """The A3 SuperPoD handler: a one-task job 1 or 2n up to the node's chips, a distributed
    one the node's chips in every task (``ascend910a3/superpod/frame.go`` ``checkRequireNPU``,
    ``CheckTaskNPU``; its ``sp-block`` checks are the network rule's,
    ``superpod.block_nodes``). Tasks of no NPU are not here (``Job.npu_tasks``)."""
    tasks = job.npu_tasks
    total = sum(t.npu for t in tasks)
    if len(tasks) == 1:
        if not (total == 1 or (total % dies.DIE == 0 and total <= product.capacity)):
            raise JobInvalid(f"standalone super-pod job require npu [1, 2*n], instead of {total}")
        return
    expected = SUPER_POD_EXPECTED.format(total=total, capacity=product.capacity)
    task_listing(expected, [t for t in tasks if t.npu != product.capacity])


def validate(job: JobAsk, product: Product) -> None:
    """``module910a3x16`` (also A3 x8) as MindCluster checks it: one chip only for a
    one-task job, an even total, every task 2n and at most 16 (``ascend910a3/module910a3x16/
    frame.go`` ``ValidNPUJob``, ``CheckTaskNPU``)."""
    tasks = job.npu_tasks
    total = sum(t.npu for t in tasks)
    if total == 1:  # one task of one chip (upstream's "only single task job" cannot arise)
        return
    if total % dies.DIE:
        raise JobInvalid(
            "except for single task job can request single npu, job require npu num should "
            f"be even number, instead of {total}"
        )
    bad = [t for t in tasks if t.npu % dies.DIE or t.npu > dies.TABLE_CHIPS]
    task_listing(A3X16_EXPECTED, bad)


def no_npu_role(product: Product, pods: int, npu: int) -> str:
    """A role of no NPU meets ``module910a3x16/frame.go`` CheckTaskNPU only in a job of an
    even request of more than one chip (``ValidNPUJob`` returns before it otherwise)."""
    total = npu * pods
    return "" if total == 1 or total % dies.DIE else A3X16_EXPECTED


def no_npu_role_super_pod(product: Product, pods: int, npu: int) -> str:
    """A role of no NPU meets ``superpod/frame.go`` CheckTaskNPU only in a distributed job
    (``checkRequireNPU`` returns before it for one task)."""
    if pods == 1:
        return ""
    return SUPER_POD_EXPECTED.format(total=npu * pods, capacity=product.capacity)


def refuse(
    product: Product, usable: Sequence[int], mask: int, req: int, network_unhealthy: frozenset[int]
) -> Refusal:
    if mask.bit_count() < req:
        return Refusal(BASE_REASON.format(req=req, idle=mask.bit_count()))
    return Refusal(DIES_REASON.format(req=req, top="{top}"), per_node=True)


def canonical(mask: int) -> int:
    """Only A3 handlers take A3 nodes, and their answers depend on the die counts alone."""
    return dies.canonical(mask)


def die_of(product: Product, chip: int) -> dict[str, int]:
    """A chip's die, besides its ring: a claim keeps a request of two chips in one."""
    return {DIE: chip // dies.DIE}


def claim_refusal(product: Product, chips: Sequence[int]) -> str | None:
    """One chip, or whole dies."""
    return split_refusal(product, chips, DIE, from_count=2)


RULES = Rules(
    fits=fits,
    score=score,
    select=select,
    select_tightest=select,
    validate=validate,
    refuse=refuse,
    canonical=canonical,
    more_groups=die_of,
    claim_refusal=claim_refusal,
    no_npu_role=no_npu_role,
)
SUPER_POD_RULES = dataclasses.replace(
    RULES, validate=validate_super_pod, no_npu_role=no_npu_role_super_pod
)
