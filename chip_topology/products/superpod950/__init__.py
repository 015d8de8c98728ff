"""Atlas 950 SuperPoD (``chip8-node8-ra64-sp``, MindCluster ``policy/chip8node8ra64sp``): 8
``huawei.com/npu`` chips a server, the base handler's pick (the handler keeps the base
UseAnnotation). Its servers carry no ``accelerator-type``, so it also takes an Atlas 850
SuperPoD's nodes; its network rules (``network="racks950"``, racks of 64 NPUs) are
``scheduler_core.engine.racks``'s."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from chip_topology.products.base.rules import BASE_REASON, RULES, base_product
from chip_topology.products.product import Product, Refusal
from contract.chip_names import NPU

# ``policy/chip8node8ra64sp/node.go`` checkNodeNPUNums wraps the base handler's words.
RACKS_REASON = (
    "checkNodeNPUByTask the npus on this node don't satisfy the schedulable topology err: "
)


def refuse(
    product: Product, usable: Sequence[int], mask: int, req: int, network_unhealthy: frozenset[int]
) -> Refusal:
    return Refusal(RACKS_REASON + BASE_REASON.format(req=req, idle=mask.bit_count()))


SUPERPOD_950X8 = base_product(
    "superpod950x8",
    "950-SuperPod-Atlas-8",
    8,
    kind=NPU,
    rules=dataclasses.replace(RULES, refuse=refuse, network="racks950"),
    serves_nodes=frozenset({"superpod850x8"}),
)

PRODUCTS = (SUPERPOD_950X8,)
