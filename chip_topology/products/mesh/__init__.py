"""The meshes of 4 (MindCluster ``policy/chip4nodex``): Atlas 350 4p servers and, under
``chip4-node8``, 910 module servers."""

from __future__ import annotations

from chip_topology.products.base.rules import base_product
from chip_topology.products.mesh.rules import MESH_CHIPS, RULES
from chip_topology.products.product import Family, Rule
from contract.chip_names import NPU

# The meshes of 4 are chips 4k..4k+3 (``chip4nodex/utils.go`` getNodeMeshInfo).
ATLAS_350_4PX8 = base_product(
    "atlas350-4px8", "350-Atlas-4p-8", 8, kind=NPU, rules=RULES, rule=Rule.MESH, group=MESH_CHIPS
)
ATLAS_350_4PX16 = base_product(
    "atlas350-4px16", "350-Atlas-4p-16", 16, kind=NPU, rules=RULES, rule=Rule.MESH, group=MESH_CHIPS
)
# ``chip4-node8`` on 910 "A" module servers (MindCluster 5b8d73f0 "chip4-node8 must also
# support 910A"): meshes of 4 on ``module`` nodes.
MESH_910X8 = base_product(
    "chip4-node8",
    "module",
    8,
    family=Family.ASCEND910,
    rules=RULES,
    rule=Rule.MESH,
    group=MESH_CHIPS,
    serves_nodes=frozenset({"module910x8"}),
)

PRODUCTS = (ATLAS_350_4PX8, ATLAS_350_4PX16, MESH_910X8)
