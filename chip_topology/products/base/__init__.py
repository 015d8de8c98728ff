"""The base handler's products: the 910 half and card servers, 910B x8, Atlas 850 x8 and the
Atlas 350 of one chip per group (MindCluster ``internal/npu/base``, ``factory.go``)."""

from __future__ import annotations

import dataclasses

from chip_topology.products.base.rules import base_product
from chip_topology.products.product import Family, reset_alone
from contract.chip_names import NPU

# ``chip4-node4``: the 910 "A" half server, base max 4 without 3.
HALF_910X4 = base_product("half910x4", "half", 4, family=Family.ASCEND910, invalid=frozenset({3}))
# ``chip1-node2`` and every ``accelerator-type`` containing ``card`` (``card``, ``card-910b-2``,
# ``card-910b-infer``): one handler of up to 8 chips per node, blind to network faults.
CARD_910X2 = base_product("card910x2", "card", 8, family=Family.ASCEND910, network_fault=False)
# ``chip8-node8`` / ``module-910b-8``: Atlas 800T A2 / 800I A2.
MODULE_910BX8 = base_product("module910bx8", "module-910b-8", 8)
# ``850-Atlas-8p-8``: Atlas 850 (A5) 8-NPU servers, named ``huawei.com/Ascend910`` upstream
# (``common/util/type_v2.go`` ``Ascend800ia5x8SchedulerName``).
# Its A5 chips reset alone (``getRingSize``: Ascend910A5RingsNum = 1).
ATLAS_850_8P = dataclasses.replace(
    base_product("atlas850x8", "850-Atlas-8p-8", 8), own_reset_ring=reset_alone
)
# Atlas 350 (Ascend 950PR) servers of ``huawei.com/npu`` chips (``chip1-node8/16`` base; the
# meshes of 4 are ``mesh``'s), their nodes labelled with Huawei's product names
# (``ascend-common/api/const_v2.go``). Huawei's installation guide labels an Atlas 350 node
# ``accelerator=huawei-npu`` only, and upstream's base handler takes any node of its
# resource: so ``chip1-node8`` also takes an unlabelled 8-NPU server (read as an 850/950
# SuperPoD one), where any chips are a legal placement.
ATLAS_350X8 = base_product(
    "atlas350x8",
    "350-Atlas-8",
    8,
    kind=NPU,
    network_fault=False,
    serves_nodes=frozenset({"superpod850x8", "superpod950x8"}),
)
ATLAS_350X16 = base_product("atlas350x16", "350-Atlas-16", 16, kind=NPU, network_fault=False)

PRODUCTS = (HALF_910X4, CARD_910X2, MODULE_910BX8, ATLAS_850_8P, ATLAS_350X8, ATLAS_350X16)
