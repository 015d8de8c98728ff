"""The inference handlers (Volcano's ``internal/ascend310``, ``internal/ascend310p``,
MindCluster's 300I Duo ``card310px2`` / ``chip310px2`` and the 310P base handler of
``internal/npu/factory.go``), whose "rings" are cards (``cards``); none minds network faults
(none calls ``SetIsNetworkFaultAttention``)."""

from __future__ import annotations

from collections.abc import Mapping

from chip_topology.products.inference import rules
from chip_topology.products.product import Family, Product, Rule, Rules
from contract.chip_names import ASCEND310, ASCEND310P, ChipKind


def _inference(  # noqa: PLR0917 (a table of handlers reads best positionally)
    name: str,
    kind: ChipKind,
    card: int,
    capacity: int,
    rule: Rule,
    handler_rules: Rules,
    strategy: str,
    *,
    aff: tuple[tuple[int, ...], ...] = (),
    priorities: Mapping[int, tuple[int, ...]] | None = None,
    node_product: str | None = None,
    max_request: int = 0,
    duo: bool = False,
) -> Product:
    return Product(
        name=name,
        accelerator_type=strategy,
        family=Family.INFERENCE,
        rules=handler_rules,
        capacity=capacity,
        groups=tuple(tuple(range(i, i + card)) for i in range(0, capacity, card)),
        aff_table=aff,
        impossible=card,
        score_weight=8.0,
        allocatable_multiplier=1,
        sort_term=False,
        priorities=priorities or {},
        single_task_requests=tuple(range(1, card + 1)),
        kind=kind,
        rule=rule,
        node_product=node_product,
        network_fault=False,
        max_request=max_request,
        duo=duo,
    )


CARD_310X4 = _inference(
    "card310x4",
    ASCEND310,
    4,
    64,
    Rule.CARD,
    rules.CARD,
    "card",
    aff=((0, 2, 1, 3), (4, 0, 1, 2), (4, 4, 0, 1), (4, 4, 4, 0)),
    priorities={1: (1, 3, 2, 4), 2: (2, 3, 4), 3: (3, 4), 4: (4,)},
)
CHIP_310X4 = _inference("chip310x4", ASCEND310, 4, 64, Rule.BUCKETS, rules.BUCKETS, "chip")
ASCEND_310P = _inference("ascend310p", ASCEND310P, 2, 64, Rule.FIRST, rules.FIRST, "")
CARD_310PX2 = _inference(
    "card310px2",
    ASCEND310P,
    2,
    64,
    Rule.CARD,
    rules.CARD,
    "duocard",
    aff=((0, 1), (2, 0)),
    priorities={1: (1, 2), 2: (2,)},
    max_request=32,  # ``ascend310p/card310px2/type.go`` maxNodeNPUNum
    duo=True,
)
CHIP_310PX2 = _inference(
    "chip310px2",
    ASCEND310P,
    2,
    16,
    Rule.HALF_FIRST,
    rules.HALF_FIRST,
    "duochip",
    node_product="chip310px2",
    duo=True,
)
CHIP_310PX2_DISTRIBUTED = _inference(
    "chip310px2-distributed",
    ASCEND310P,
    2,
    16,
    Rule.DUO_DISTRIBUTED,
    rules.DUO_DISTRIBUTED,
    "duochip",
    node_product="chip310px2",
    duo=True,
)

PRODUCTS = (
    CARD_310X4,
    CHIP_310X4,
    ASCEND_310P,
    CARD_310PX2,
    CHIP_310PX2,
    CHIP_310PX2_DISTRIBUTED,
)
