"""The ring handlers: Atlas 800 910 ``module910x8`` (two HCCS rings of 4) and 910B x16 (two
rings of 8, pairs across them). Volcano plugin v5 ``module910x8``, ``module910bx16``;
MindCluster ``internal/npu/ascend910/ascend910old/module910x8``,
``ascend910b/module910bx16``."""

from __future__ import annotations

from chip_topology.products.module910.rules import RULES
from chip_topology.products.product import Family, Product


def _distance_table(size: int) -> tuple[tuple[int, ...], ...]:
    """910B: aff[i][j] = j − i, and ``size`` where fewer chips are free than requested."""
    return tuple(
        tuple(j - i if j >= i else size for j in range(1, size + 1)) for i in range(1, size + 1)
    )


_RING_TABLE = ((0, 2, 1, 3), (4, 0, 2, 1), (4, 4, 4, 4), (4, 4, 4, 0))

MODULE_910X8 = Product(
    name="module910x8",
    accelerator_type="module",
    family=Family.ASCEND910,
    rules=RULES,
    capacity=8,
    groups=((0, 1, 2, 3), (4, 5, 6, 7)),
    aff_table=_RING_TABLE,
    impossible=4,
    score_weight=8.0,
    allocatable_multiplier=4,
    sort_term=True,
    priorities={1: (1, 3, 2, 4), 2: (2, 4, 3), 4: (4,)},
    single_task_requests=(1, 2, 4, 8),
    # MindCluster's module910x8 keeps the base handler's ValidNPUJob with these counts left
    # out (``internal/npu/ascend910/ascend910old/module910x8/frame.go`` New), for every pod of
    # a job of any size: VOL-v5's 8-per-pod rule for distributed jobs is gone.
    invalid_requests=frozenset({3, 5, 6, 7}),
    # The default handler (a job naming no policy and no accelerator-type) also takes 910B x8
    # servers, as upstream, which never checks a node's label (Volcano's nodeSelector does): a
    # placement inside one ring of 4 is legal on a 910B's full mesh too. Huawei's own system
    # test runs such a job on 910B nodes (mind-cluster tests/st basic_training_1x8).
    serves_nodes=frozenset({"module910bx8"}),
)

MODULE_910BX16 = Product(
    name="module910bx16",
    accelerator_type="module-910b-16",
    family=Family.ASCEND910B,
    rules=RULES,
    capacity=16,
    groups=(tuple(range(8)), tuple(range(8, 16))),
    aff_table=_distance_table(8),
    impossible=8,
    score_weight=16.0,
    allocatable_multiplier=1,
    sort_term=True,
    priorities={},
    single_task_requests=tuple(n for n in range(1, 17) if n not in {9, 11, 13, 15}),
    invalid_requests=frozenset({9, 11, 13, 15}),
    cross_pairs=True,
)

PRODUCTS = (MODULE_910X8, MODULE_910BX16)
