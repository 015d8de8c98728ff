"""Atlas A3 (MindCluster ``internal/npu/ascend910/ascend910a3``): chips in dies of two
(``dies``), the 800T/800I A3 servers and the Atlas 900 A3 SuperPoD nodes."""

from __future__ import annotations

from chip_topology.products.a3 import dies
from chip_topology.products.a3.rules import RULES, SUPER_POD_RULES
from chip_topology.products.product import Family, Product, Rule, Rules


def _a3(name: str, accelerator_type: str, capacity: int, rules: Rules = RULES) -> Product:
    """An Atlas A3 handler: dies of two, upstream's checks and scores in ``dies``; requests 1
    and the even counts up to 16 (``a3×16`` validation, also on 8-chip nodes, whose filter
    then refuses what does not fit)."""
    return Product(
        name=name,
        accelerator_type=accelerator_type,
        family=Family.ASCEND910A3,
        rules=rules,
        capacity=capacity,
        groups=tuple((c, c + 1) for c in range(0, capacity, dies.DIE)),
        aff_table=(),
        impossible=dies.SHORT,
        score_weight=float(dies.TABLE_CHIPS),
        allocatable_multiplier=1,
        sort_term=False,
        priorities={},
        single_task_requests=(1, *range(2, capacity + 1, 2)),
        rule=Rule.DIES,
    )


# Atlas 800T/800I A3 (``chip2-node16``, ``module-a3-16``) and A3 x8 (``chip2-node8``).
MODULE_910A3X16 = _a3("module910a3x16", "module-a3-16", 16)
MODULE_910A3X8 = _a3("module910a3x8", "module-a3-8", 8)
# Atlas 900 A3 SuperPoD nodes (``chip2-node16-sp`` / ``chip2-node8-sp``, or ``sp-block``):
# the node label upstream's routing reads (``common/util/constants.go``).
SUPERPOD_910A3X16 = _a3("superpod910a3x16", "module-a3-16-super-pod", 16, SUPER_POD_RULES)
SUPERPOD_910A3X8 = _a3("superpod910a3x8", "module-a3-8-super-pod", 8, SUPER_POD_RULES)
SUPER_POD_PRODUCTS = frozenset({SUPERPOD_910A3X16.name, SUPERPOD_910A3X8.name})

PRODUCTS = (MODULE_910A3X16, MODULE_910A3X8, SUPERPOD_910A3X16, SUPERPOD_910A3X8)
