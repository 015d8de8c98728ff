"""Atlas 850 SuperPoD (``chip8-node8-sp``, MindCluster ``policy/chip8node8sp``): 8
``huawei.com/npu`` chips a server, picked as the base handler picks them (a distributed task
takes all 8; ``frame.go`` selectNPUFromNode). Its servers carry no ``accelerator-type`` (the
device plugin labels them ``accelerator=huawei-npu`` only), so it also takes an Atlas 950
SuperPoD's nodes; its network rules (``network="superpod850"``) are
``scheduler_core.engine.superpod``'s."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from chip_topology.products.base.rules import RULES, base_product
from chip_topology.products.mesh.rules import MESH_REASON
from chip_topology.products.product import Product, Refusal
from contract.chip_names import NPU, chip_name


def refuse(
    product: Product, usable: Sequence[int], mask: int, req: int, network_unhealthy: frozenset[int]
) -> Refusal:
    """``policy/chip8node8sp/frame.go`` CheckNodeNPUByTask."""
    listed = ",".join(chip_name(c, product.kind) for c in sorted(network_unhealthy))
    return Refusal(MESH_REASON.format(listed))


SUPERPOD_850X8 = base_product(
    "superpod850x8",
    "850-SuperPod-Atlas-8",
    8,
    kind=NPU,
    rules=dataclasses.replace(RULES, refuse=refuse, network="superpod850"),
    serves_nodes=frozenset({"superpod950x8"}),
)

PRODUCTS = (SUPERPOD_850X8,)
