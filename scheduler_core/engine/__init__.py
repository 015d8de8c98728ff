"""The decision engine, pure: typed values (nodes, jobs) in, decisions out. No Kubernetes, no
gRPC, no I/O, no clock: the service and the CLI around it are the only parts that touch the
outside.
"""

from contract.chip_names import CHIP_PREFIX, RESOURCE_NAME, InvalidInput, chip_name, parse_chip_name
from scheduler_core.engine.ledger import Holding, SessionLedger
from scheduler_core.engine.model import Decision, Job, NodeState, Placement, Status, Task
from scheduler_core.engine.policies import (
    BINPACK,
    DEFAULT_POLICY,
    HUAWEI,
    POLICIES,
    Policy,
    policy_by_name,
)
from scheduler_core.engine.products import PRODUCTS, Product, product_by_name, product_for_selector
from scheduler_core.engine.session import Session, check_node_chips, filter_node
from scheduler_core.engine.validation import JobInvalid, validate_job

__all__ = [
    "BINPACK",
    "CHIP_PREFIX",
    "DEFAULT_POLICY",
    "HUAWEI",
    "POLICIES",
    "PRODUCTS",
    "RESOURCE_NAME",
    "Decision",
    "Holding",
    "InvalidInput",
    "Job",
    "JobInvalid",
    "NodeState",
    "Placement",
    "Policy",
    "Product",
    "Session",
    "SessionLedger",
    "Status",
    "Task",
    "check_node_chips",
    "chip_name",
    "filter_node",
    "parse_chip_name",
    "policy_by_name",
    "product_by_name",
    "product_for_selector",
    "validate_job",
]
