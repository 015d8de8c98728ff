"""Job validation: which chip counts a job may ask for, with upstream's messages.

Ascend 910 (ring) products: a single-pod job asks for one of the product's sizes; a job of
more than one pod is a distributed job. On ``module910x8`` that means 8 × N: every pod takes
a whole 8-chip server (Huawei's resource application constraints for Atlas 800 training
servers). Upstream only checks the first task's count; we check every task, because any other
pod would fail later anyway.

910B products: every task asks for 1..capacity chips outside the product's invalid set.
A ``ring-controller.atlas`` label or a ``host-arch`` selector that contradicts the product is
rejected; unlike Volcano we do not *require* them, since they carry no placement information.
"""

from __future__ import annotations

from chip_topology.products import Family, Product, Rule, product_by_name
from contract.annotations import HOST_ARCH_LABEL, RING_CONTROLLER_LABEL
from scheduler_core.engine.model import Job

RING_CONTROLLER_910B = "ascend-910b"


class JobInvalid(ValueError):
    """A job asks for something no placement can satisfy; the message is upstream's."""


def _listing(sizes: tuple[int, ...]) -> str:
    return "[" + ",".join(str(n) for n in sizes) + "]"


def _validate_910(job: Job, product: Product) -> None:
    tasks = job.npu_tasks
    sizes = product.single_task_requests
    if len(tasks) == 1:
        if tasks[0].npu not in sizes:
            raise JobInvalid(
                f"{product.scheduler_name} checkSingleTrainMode {job.key} "
                f"req npu not in {_listing(sizes)}"
            )
        return
    for task in tasks:
        if task.npu not in sizes:
            raise JobInvalid(
                f"checkModuleDistributeTrainMode {task.name} req {task.npu} "
                f"not in {_listing(sizes)}"
            )
    if product.capacity == 8:
        for task in tasks:
            if task.npu != product.capacity:
                raise JobInvalid(
                    f"{job.key} is distributed ({len(tasks)} NPU pods), so every pod must take "
                    f"a whole server of {product.capacity} chips; task {task.name} asks {task.npu}"
                )


def _validate_910b(job: Job, product: Product) -> None:
    ring = job.labels.get(RING_CONTROLLER_LABEL)
    if ring is not None and ring != RING_CONTROLLER_910B:
        raise JobInvalid(f"{job.name} label:{ring} not right({RING_CONTROLLER_910B})")
    arch = job.selector.get(HOST_ARCH_LABEL)
    if arch is not None and arch not in product.allowed_arch:
        raise JobInvalid(
            f"{job.name} selector {HOST_ARCH_LABEL}:{arch} not in {list(product.allowed_arch)}"
        )
    for task in job.npu_tasks:
        if task.npu > product.capacity or task.npu in product.invalid_requests:
            raise JobInvalid(
                f"{product.scheduler_name} checkJobTrainMode {job.name} req npu is invalid"
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


def validate_job(job: Job) -> Product:
    """Check the job against its product's rules; return the product handler."""
    product = product_by_name(job.product)
    if not job.npu_tasks:
        raise JobInvalid(f"{job.name} no npu job")
    if product.family is Family.ASCEND910:
        _validate_910(job, product)
    elif product.family is Family.INFERENCE:
        _validate_inference(job, product)
    else:
        _validate_910b(job, product)
    return product
