"""Job validation: which chip counts a job may ask for, with upstream's messages. The rules
and their words are each product family's (``Rules.validate``, ``chip_topology.products``);
what every handler checks first is here."""

from __future__ import annotations

from chip_topology.products import Product
from chip_topology.products.jobs import JobInvalid
from chip_topology.routing import product_by_name
from scheduler_core.engine.model import Job

__all__ = ["JobInvalid", "validate_job"]


def validate_job(job: Job) -> Product:
    """Check the job against its product's rules; return the product handler."""
    product = product_by_name(job.product)
    if not job.npu_tasks:
        raise JobInvalid(f"{job.name} no npu job")
    product.rules.validate(job, product)
    return product
