"""Job validation: which chip counts a job may ask for, with upstream's messages.

Every 910 handler built on MindCluster's base handler or keeping its ValidNPUJob (Atlas 800
910 ``module910x8``, card, half, 910B x8, 910B x16, Atlas 850 and 350; Ascend/mind-cluster
``component/ascend-for-volcano/internal/npu/base/frame.go`` ValidNPUJob): each NPU task asks
1..max chips outside the handler's invalid set, whatever the number of pods. On ``module910x8``
that is 1, 2, 4 or 8 per pod for one pod as for N (``ascend910old/module910x8/frame.go`` New
leaves out 3, 5, 6, 7); VOL-v5's ``checkSingleTrainMode`` / ``checkModuleDistributeTrainMode``
and its 8-per-pod rule for distributed jobs are gone. The meshes of 4
(``policy/chip4nodex/job.go`` checkJobMode) only bound a task by the node's chips. MindCluster
dropped VOL-v5's 910B checks of the ``ring-controller.atlas`` label and the ``host-arch``
selector (the plugin refactor dbde0740): so do we.
"""

from __future__ import annotations

from chip_topology import dies
from chip_topology.products import (
    SUPER_POD_PRODUCTS,
    Family,
    Product,
    Rule,
    product_by_name,
)
from scheduler_core.engine.model import Job, Task


class JobInvalid(ValueError):
    """A job asks for something no placement can satisfy; the message is upstream's."""


def _go_set(values: frozenset[int]) -> str:
    """Go's ``%v`` of a ``map[int]struct{}``: keys sorted, as ``map[3:{}]``."""
    return "map[" + " ".join(f"{n}:{{}}" for n in sorted(values)) + "]"


def _validate_base(job: Job, product: Product) -> None:
    expected = (
        f"job<{job.name}> req npu num should small than {product.capacity}, and not in "
        f"{_go_set(product.invalid_requests)}"
    )
    bad = [
        t for t in job.npu_tasks if t.npu > product.capacity or t.npu in product.invalid_requests
    ]
    _task_listing(expected, bad)


def _validate_mesh(job: Job, product: Product) -> None:
    for task in job.npu_tasks:
        if task.npu > product.capacity:
            raise JobInvalid(
                f"{product.name} checkJobMode {job.name} req npu is invalid, task require npu "
                f"can not bigger than {product.capacity}"
            )


def _validate_inference(job: Job, product: Product) -> None:
    """Inference handlers: every task within the handler's chips (a card for the card
    handlers). VOL-v5's 310 parent discards this check and lets the predicate refuse; we
    refuse at once, as MindCluster does, with VOL-v5's messages."""
    tasks = job.npu_tasks
    if product.rule is Rule.DUO_DISTRIBUTED and len(tasks) > 1:
        raise JobInvalid(
            f"job {job.key} task num {len(tasks)} is invalid, job with label of "
            "distributed=true should has only 1 npu pod "
        )
    largest = product.group_size if product.rule is Rule.CARD else product.capacity
    for task in tasks:
        if not 1 <= task.npu <= largest:
            if product.rule is Rule.CARD:
                raise JobInvalid(f"task {task.name} req npu {task.npu} is invalid")
            raise JobInvalid(f"task{task.name} req npu num{task.npu} is invalid")


def _validate_a3(job: Job, product: Product) -> None:
    """Atlas A3 as MindCluster checks it. ``module910a3x16`` (also A3 x8): one chip only for
    a one-task job, an even total, every task 2n and at most 16 (``ascend910a3/module910a3x16/
    frame.go`` ``ValidNPUJob``, ``CheckTaskNPU``). A3 SuperPoD: a one-task job 1 or 2n up to
    the node's chips, a distributed one the node's chips in every task (``ascend910a3/superpod/
    frame.go`` ``checkRequireNPU``, ``CheckTaskNPU``; its ``sp-block`` checks are the network
    rule's, ``superpod.block_nodes``). Tasks of no NPU are not here (``Job.npu_tasks``)."""
    tasks = job.npu_tasks
    total = sum(t.npu for t in tasks)
    if product.name in SUPER_POD_PRODUCTS:
        if len(tasks) == 1:
            if not (total == 1 or (total % dies.DIE == 0 and total <= product.capacity)):
                raise JobInvalid(
                    f"standalone super-pod job require npu [1, 2*n], instead of {total}"
                )
            return
        expected = (
            f"distributed super-pod job require npu({total}) should be equal to node "
            f"npu({product.capacity})"
        )
        _task_listing(expected, [t for t in tasks if t.npu != product.capacity])
        return
    if total == 1:  # one task of one chip (upstream's "only single task job" cannot arise)
        return
    if total % dies.DIE:
        raise JobInvalid(
            "except for single task job can request single npu, job require npu num should "
            f"be even number, instead of {total}"
        )
    expected = (
        "only standalone job can request single npu, npu num required by task in a3×16 job "
        f"must be 2n, and <= {dies.TABLE_CHIPS}"
    )
    bad = [t for t in tasks if t.npu % dies.DIE or t.npu > dies.TABLE_CHIPS]
    _task_listing(expected, bad)


def _task_listing(expected: str, bad: list[Task]) -> None:
    """Upstream's ``TaskValidateHelper.TaskValidResult``: every bad task, in task order (upstream
    walks a Go map)."""
    if bad:
        actual = "".join(f"task<{t.name}> req npu: {t.npu}" for t in bad)
        raise JobInvalid(f"expected: {expected}, actual: {actual}, ")


def validate_job(job: Job) -> Product:
    """Check the job against its product's rules; return the product handler."""
    product = product_by_name(job.product)
    if not job.npu_tasks:
        raise JobInvalid(f"{job.name} no npu job")
    if product.family is Family.INFERENCE:
        _validate_inference(job, product)
    elif product.family is Family.ASCEND910A3:
        _validate_a3(job, product)
    elif product.rule is Rule.MESH:
        _validate_mesh(job, product)
    else:
        _validate_base(job, product)
    return product
