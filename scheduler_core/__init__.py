"""The scheduling core: HCCS-affine placement of NPU jobs on Ascend 910 / 910B servers.

The engine is pure: it takes plain values (nodes, jobs) and returns decisions; adapters
around it (CLI, extenders, Kubernetes state readers) are the only parts with I/O.
"""

from scheduler_core.engine import Session, check_node_chips, filter_node
from scheduler_core.ledger import Holding, SessionLedger
from scheduler_core.model import (
    CHIP_PREFIX,
    RESOURCE_NAME,
    Decision,
    InvalidInput,
    Job,
    NodeState,
    Placement,
    Status,
    Task,
    chip_name,
    parse_chip_name,
)
from scheduler_core.policies import (
    BINPACK,
    DEFAULT_POLICY,
    HUAWEI,
    POLICIES,
    Policy,
    policy_by_name,
)
from scheduler_core.products import PRODUCTS, Product, product_by_name, product_for_selector
from scheduler_core.validation import JobInvalid, validate_job

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
