"""Which handler a job gets and which product a node is (Volcano's plugin choice), from
their resource, labels and selector: the products themselves are ``products``."""

from __future__ import annotations

from collections.abc import Mapping

from chip_topology.products import (
    ASCEND_310P,
    CARD_310PX2,
    CARD_310X4,
    CHIP_310PX2,
    CHIP_310PX2_DISTRIBUTED,
    CHIP_310X4,
    PRODUCTS,
    Family,
    Product,
)
from contract.annotations import (
    ACCELERATOR_TYPE_LABEL,
    DISTRIBUTED_LABEL,
    DUO_CARD_TYPE,
    DUO_LABEL,
    INFER_CARD_TYPE_LABEL,
    STRATEGY_310_LABEL,
)
from contract.chip_names import ASCEND310, ASCEND910, ChipKind, InvalidInput

_BY_ACCELERATOR_TYPE: Mapping[str, Product] = {
    p.accelerator_type: p for p in PRODUCTS.values() if p.family is not Family.INFERENCE
}

DEFAULT_ACCELERATOR_TYPE = "module"


def product_for_selector(selector: Mapping[str, str]) -> Product:
    """Volcano's handler choice: the job's ``accelerator-type`` selector, default ``module``."""
    accelerator_type = selector.get(ACCELERATOR_TYPE_LABEL, DEFAULT_ACCELERATOR_TYPE)
    try:
        return _BY_ACCELERATOR_TYPE[accelerator_type]
    except KeyError:
        raise InvalidInput(f"not support huawei.com/Ascend910{accelerator_type}") from None


def product_for_job(
    kind: ChipKind, labels: Mapping[str, str], selector: Mapping[str, str]
) -> Product:
    """The handler of a job asking for ``kind`` chips: 910 by its ``accelerator-type``
    selector; 310 by its ``npu-310-strategy`` label (``chip`` by default); 310P as
    MindCluster routes it: the 300I Duo handlers under label ``duo: "true"`` (``duochip``
    with ``distributed: "true"`` taking whole cards), the base handler otherwise."""
    strategy = labels.get(STRATEGY_310_LABEL, "chip")
    if kind is ASCEND910:
        return product_for_selector(selector)
    if kind is ASCEND310:
        handlers = {"chip": CHIP_310X4, "card": CARD_310X4}
        if strategy not in handlers:
            raise InvalidInput(f"not support {ASCEND310.resource}{strategy}")
        return handlers[strategy]
    if labels.get(DUO_LABEL) != "true":
        return ASCEND_310P
    if strategy == "card":
        return CARD_310PX2
    if strategy == "chip":
        distributed = labels.get(DISTRIBUTED_LABEL) == "true"
        return CHIP_310PX2_DISTRIBUTED if distributed else CHIP_310PX2
    return ASCEND_310P


def product_of_node(kind: ChipKind, labels: Mapping[str, str]) -> Product:
    """The product a node of ``kind`` chips is: 910 by its ``accelerator-type`` label
    (``module`` by default); a 310 node serves both 310 handlers; a 310P node labelled
    ``infer-card-type: card-300i-duo`` is of Atlas 300I Duo cards."""
    if kind is ASCEND910:
        return product_for_selector(
            {ACCELERATOR_TYPE_LABEL: labels.get(ACCELERATOR_TYPE_LABEL, DEFAULT_ACCELERATOR_TYPE)}
        )
    if kind is ASCEND310:
        return CHIP_310X4
    return CHIP_310PX2 if labels.get(INFER_CARD_TYPE_LABEL) == DUO_CARD_TYPE else ASCEND_310P


def serves(node_product: Product, job_product: Product) -> bool:
    """Whether a node's chips can host a handler's task: the 910 handler of the node's
    ``accelerator-type``; any inference handler of the node's chip kind (the job picks the
    handler), a Duo chip handler only on a node labelled as a Duo."""
    if job_product.family is not Family.INFERENCE:
        return node_product is job_product
    return node_product.kind is job_product.kind and job_product.node_product in (
        None,
        node_product.name,
    )
