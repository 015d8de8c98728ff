"""Atlas 950 SuperPoD (``chip8-node8-ra64-sp``, MindCluster ``policy/chip8node8ra64sp``): 8
``huawei.com/npu`` chips a server, the base handler's pick (the handler keeps the base
UseAnnotation). Its servers carry no ``accelerator-type``, so it also takes an Atlas 850
SuperPoD's nodes; its network rules (racks of 64 NPUs) are ``scheduler_core.engine.racks``'s."""

from __future__ import annotations

from chip_topology.products.base.rules import base_product
from contract.chip_names import NPU

SUPERPOD_950X8 = base_product(
    "superpod950x8",
    "950-SuperPod-Atlas-8",
    8,
    kind=NPU,
    serves_nodes=frozenset({"superpod850x8"}),
)

PRODUCTS = (SUPERPOD_950X8,)
