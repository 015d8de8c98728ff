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

from chip_topology.products import MESH_CHIPS, SUPER_POD_PRODUCTS, Family, Product, Rule
from chip_topology.products.a3 import dies
from chip_topology.routing import product_by_name
from contract.annotations import DISTRIBUTED_LABEL
from scheduler_core.engine.model import Job, Task


class JobInvalid(ValueError):
    """A job asks for something no placement can satisfy; the message is upstream's."""


def job_id(job: Job) -> str:
    """The job as upstream's messages name it: Volcano's job id, ``<namespace>/<PodGroup>``
    (volcano ``pkg/scheduler/cache/event_handlers.go`` getJobID; the plugin's ``tp.Name``).
    The service names a gang by its key already."""
    return job.name if "/" in job.name else job.key


def _go_set(values: frozenset[int]) -> str:
    """Go's ``%v`` of a ``map[int]struct{}``: keys sorted, as ``map[3:{}]``."""
    return "map[" + " ".join(f"{n}:{{}}" for n in sorted(values)) + "]"


def _validate_base(job: Job, product: Product) -> None:
    limit = product.request_limit
    expected = (
        f"job<{job_id(job)}> req npu num should small than {limit}, and not in "
        f"{_go_set(product.invalid_requests)}"
    )
    bad = [t for t in job.npu_tasks if t.npu > limit or t.npu in product.invalid_requests]
    _task_listing(expected, bad)


def _validate_mesh(job: Job, product: Product) -> None:
    """``policy/chip4nodex/job.go`` checkJobMode: the job's NPUs per NPU task, on average (Go's
    integer division), at most the node's; named by the handler's plugin name (``4p-8``,
    ``4p-16``, ``chip4nodex/type.go``)."""
    tasks = job.npu_tasks
    if sum(t.npu for t in tasks) // len(tasks) > product.capacity:
        raise JobInvalid(
            f"{MESH_CHIPS}p-{product.capacity} checkJobMode {job_id(job)} req "
            f"npu is invalid, task require npu can not bigger than {product.capacity}"
        )


# The 300I Duo handlers' own check of a ``distributed: "true"`` job, in each one's words
# (``ascend310p/card310px2/frame.go`` and ``chip310px2/frame.go`` ValidNPUJob).
_DUO_ONE_POD = {
    "card310px2": "should has only 1 npu pod ",
    "chip310px2": "should have only 1 npu pod ",
}


def _validate_inference(job: Job, product: Product) -> None:
    """Inference handlers as MindCluster checks them: the 300I Duo handlers refuse a
    ``distributed`` job of more than one NPU pod; then every handler keeps the base handler's
    ValidNPUJob, each task 1..its ``MaxNodeNPUNum`` (64 on 310 and plain 310P nodes, 32 for
    the Duo card handler, 16 for the Duo chip handler; ``base/frame.go``). A card handler's
    task larger than a card passes here, as upstream, and no node's card holds it (the
    predicate says so on every node)."""
    duo = "chip310px2" if product.node_product == "chip310px2" else product.name
    words = _DUO_ONE_POD.get(duo)
    distributed = product.rule is Rule.DUO_DISTRIBUTED or job.labels.get(DISTRIBUTED_LABEL) == (
        "true"
    )
    if words is not None and distributed and len(job.npu_tasks) > 1:
        raise JobInvalid(
            f"job <{job_id(job)}> task num <{len(job.tasks)}> is invalid, job with label of "
            f"distributed=true {words}"
        )
    _validate_base(job, product)


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
