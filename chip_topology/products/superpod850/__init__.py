"""Atlas 850 SuperPoD (``chip8-node8-sp``, MindCluster ``policy/chip8node8sp``): 8
``huawei.com/npu`` chips a server, picked as the base handler picks them (a distributed task
takes all 8; ``frame.go`` selectNPUFromNode). Its servers carry no ``accelerator-type`` (the
device plugin labels them ``accelerator=huawei-npu`` only), so it also takes an Atlas 950
SuperPoD's nodes; its network rules are ``scheduler_core.engine.superpod``'s."""

from __future__ import annotations

from chip_topology.products.base.rules import base_product
from contract.chip_names import NPU

SUPERPOD_850X8 = base_product(
    "superpod850x8",
    "850-SuperPod-Atlas-8",
    8,
    kind=NPU,
    serves_nodes=frozenset({"superpod950x8"}),
)

PRODUCTS = (SUPERPOD_850X8,)
