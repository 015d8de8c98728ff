"""The products, one folder per product family, as Huawei's plugin keeps a package per
handler family (``internal/npu/ascend910/...``, ``base``, ``policy/chip4nodex``...):

``module910`` (the HCCS ring handlers), ``base`` (MindCluster's base handler and the products
built on it), ``mesh`` (meshes of 4), ``a3`` (Atlas A3, dies of two), ``superpod850`` and
``superpod950`` (the Atlas 850 / 950 SuperPoD servers), ``inference`` (310, 310P, 300I Duo).

A family folder holds its products (``Product``, data) and what the family decides behind the
``Rules`` interface (``product``) that every product carries; callers go through
``product.rules`` (or ``fits``, ``huawei_score``, ``select_*``) and never branch on a family.
The routing table (``chip_topology.routing``) is the one registry: which products exist,
which handler a job gets and which product a node is.

The folders live in ``chip_topology`` because everyone reads a product's chip rules: the
scheduler's engine, the node agent's preferred allocation, the DRA driver and the trace
replay; ``chip_topology`` is the layer all of them may import, and imports only ``contract``.

Every rule is a function of a product and a *bitmask* of usable chips, so callers can cache
answers per mask instead of rescanning chip lists for every pod. Chip order only matters when
chips are picked (``select_*``), and those take the ordered list.
"""

from __future__ import annotations

from chip_topology.products.a3 import (
    MODULE_910A3X8,
    MODULE_910A3X16,
    SUPER_POD_PRODUCTS,
    SUPERPOD_910A3X8,
    SUPERPOD_910A3X16,
)
from chip_topology.products.base import (
    ATLAS_350X8,
    ATLAS_350X16,
    ATLAS_850_8P,
    CARD_910X2,
    HALF_910X4,
    MODULE_910BX8,
)
from chip_topology.products.groups import group_free, mask_of
from chip_topology.products.inference import (
    ASCEND_310P,
    CARD_310PX2,
    CARD_310X4,
    CHIP_310PX2,
    CHIP_310PX2_DISTRIBUTED,
    CHIP_310X4,
)
from chip_topology.products.mesh import ATLAS_350_4PX8, ATLAS_350_4PX16, MESH_910X8
from chip_topology.products.mesh.rules import MESH_CHIPS, mesh_affine
from chip_topology.products.module910 import MODULE_910BX16, MODULE_910X8
from chip_topology.products.product import (
    Family,
    Product,
    Rule,
    Rules,
    fits,
    huawei_score,
    select_huawei,
    select_tightest,
)
from chip_topology.products.superpod850 import SUPERPOD_850X8
from chip_topology.products.superpod950 import SUPERPOD_950X8

__all__ = [
    "ASCEND_310P",
    "ATLAS_350X8",
    "ATLAS_350X16",
    "ATLAS_350_4PX8",
    "ATLAS_350_4PX16",
    "ATLAS_850_8P",
    "CARD_310PX2",
    "CARD_310X4",
    "CARD_910X2",
    "CHIP_310PX2",
    "CHIP_310PX2_DISTRIBUTED",
    "CHIP_310X4",
    "HALF_910X4",
    "MESH_910X8",
    "MESH_CHIPS",
    "MODULE_910A3X8",
    "MODULE_910A3X16",
    "MODULE_910BX8",
    "MODULE_910BX16",
    "MODULE_910X8",
    "SUPERPOD_850X8",
    "SUPERPOD_910A3X8",
    "SUPERPOD_910A3X16",
    "SUPERPOD_950X8",
    "SUPER_POD_PRODUCTS",
    "Family",
    "Product",
    "Rule",
    "Rules",
    "fits",
    "group_free",
    "huawei_score",
    "mask_of",
    "mesh_affine",
    "select_huawei",
    "select_tightest",
]
