"""The registry of products: which products exist (``PRODUCTS``, a row each), which handler a
job gets and which product a node is, as MindCluster's Volcano plugin routes them: one table,
pure, read by the scheduler, ``place``, the trace replay, the agent and the DRA driver. A
product's rules are in its family's folder (``chip_topology.products``); adding a product is
its folder (or a product in an existing family's) and its rows here.

A job (Ascend/mind-cluster ``component/ascend-for-volcano/internal/npu/factory.go``
``get910CardHandlerName``, ``common/util/constants.go``, ``common/util/type_v2.go``): its
``huawei.com/schedule_policy`` annotation first (``huawei.com/npu`` requires one); then an
``sp-block`` annotation (an A3 SuperPoD job); then its ``accelerator-type`` selector (absent:
``module``; any value containing ``card``: the one card handler). 310 by label
``npu-310-strategy``, 310P by label ``duo`` (``factory.go`` ``init310*CardPolicyHandler``).

A node: its product from its ``accelerator-type`` label, as Huawei's device plugin writes it
(``ascend-common/api/consts.go``, ``const_v2.go``). Upstream's plugin never reads that label
(``plugin/node.go`` NodePredicate: only the handler's chip rules; Volcano's nodeSelector
predicate matches the job's selector): we keep it for the node's chips and topology, and a
handler serves the nodes of its hardware (``constants.go``'s comments name it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from chip_topology.products import (
    ASCEND_310P,
    ATLAS_350_4PX8,
    ATLAS_350_4PX16,
    ATLAS_350X8,
    ATLAS_350X16,
    ATLAS_850_8P,
    CARD_310PX2,
    CARD_310X4,
    CARD_910X2,
    CHIP_310PX2,
    CHIP_310PX2_DISTRIBUTED,
    CHIP_310X4,
    HALF_910X4,
    MESH_910X8,
    MODULE_910A3X8,
    MODULE_910A3X16,
    MODULE_910BX8,
    MODULE_910BX16,
    MODULE_910X8,
    SUPERPOD_850X8,
    SUPERPOD_910A3X8,
    SUPERPOD_910A3X16,
    SUPERPOD_950X8,
    Product,
)
from contract.annotations import (
    ACCELERATOR_TYPE_LABEL,
    DISTRIBUTED_LABEL,
    DUO_CARD_TYPE,
    DUO_LABEL,
    INFER_CARD_TYPE_LABEL,
    SCHEDULE_POLICY_ANNOTATION,
    SP_BLOCK_ANNOTATION,
    STRATEGY_310_LABEL,
)
from contract.chip_names import (
    ASCEND310,
    ASCEND910,
    KIND_OF_RESOURCE,
    NPU,
    ChipKind,
    InvalidInput,
)

# Every product, a row each (the order is the one ``product_by_name`` lists them in).
PRODUCTS: Mapping[str, Product] = {
    p.name: p
    for p in (
        MODULE_910X8,
        HALF_910X4,
        CARD_910X2,
        MODULE_910BX8,
        MODULE_910BX16,
        MODULE_910A3X16,
        MODULE_910A3X8,
        SUPERPOD_910A3X16,
        SUPERPOD_910A3X8,
        ATLAS_850_8P,
        ATLAS_350X8,
        ATLAS_350X16,
        ATLAS_350_4PX8,
        ATLAS_350_4PX16,
        SUPERPOD_850X8,
        SUPERPOD_950X8,
        MESH_910X8,
        CARD_310X4,
        CHIP_310X4,
        ASCEND_310P,
        CARD_310PX2,
        CHIP_310PX2,
        CHIP_310PX2_DISTRIBUTED,
    )
}


def product_by_name(name: str) -> Product:
    try:
        return PRODUCTS[name]
    except KeyError:
        known = ", ".join(PRODUCTS)
        raise InvalidInput(f"unknown product {name!r} (known: {known})") from None


DEFAULT_ACCELERATOR_TYPE = "module"
CARD_ACCELERATOR_VALUE = "card"  # ``factory.go`` cardAcceleratorValue
A3X16 = MODULE_910A3X16.name
A3X8 = MODULE_910A3X8.name
SP_A3X16 = SUPERPOD_910A3X16.name
SP_A3X8 = SUPERPOD_910A3X8.name
A3X8_SUPER_POD_TYPE = SUPERPOD_910A3X8.accelerator_type


@dataclass(frozen=True, slots=True)
class Policy:
    """One value of ``huawei.com/schedule_policy``: the product it routes each chip kind to,
    or, for a policy this scheduler does not build, why not (what it is upstream)."""

    products: Mapping[str, str]  # chip kind name → product name
    hardware: str
    unsupported: bool = False


# ``constants.go`` "value of schedule_policy annotation" and ``factory.go`` policy910HandlerMap.
POLICIES: Mapping[str, Policy] = {
    "chip1-node2": Policy({ASCEND910.name: CARD_910X2.name}, "910 card servers"),
    "chip4-node4": Policy({ASCEND910.name: HALF_910X4.name}, "910 half servers"),
    "chip8-node8": Policy({ASCEND910.name: MODULE_910BX8.name}, "910B x8 (Atlas 800T/800I A2)"),
    "chip8-node16": Policy({ASCEND910.name: MODULE_910BX16.name}, "910B x16"),
    "module-a3-16": Policy({ASCEND910.name: A3X16}, "A3 x16 (Atlas 800T/800I A3)"),
    "chip2-node16": Policy({ASCEND910.name: A3X16}, "A3 x16 (Atlas 800T/800I A3)"),
    "chip2-node8": Policy({ASCEND910.name: A3X8}, "A3 x8"),
    "chip2-node16-sp": Policy({ASCEND910.name: SP_A3X16}, "Atlas 900 A3 SuperPoD x16"),
    "chip2-node8-sp": Policy({ASCEND910.name: SP_A3X8}, "Atlas 900 A3 SuperPoD x8"),
    "chip4-node8": Policy(
        {ASCEND910.name: MESH_910X8.name, NPU.name: ATLAS_350_4PX8.name},
        "Atlas 350 4p-8 and 910 module servers",
    ),
    "chip4-node16": Policy({NPU.name: ATLAS_350_4PX16.name}, "Atlas 350 4p-16"),
    "chip1-node8": Policy({NPU.name: ATLAS_350X8.name}, "Atlas 350 8"),
    "chip1-node16": Policy({NPU.name: ATLAS_350X16.name}, "Atlas 350 16"),
    "chip8-node8-sp": Policy(
        {NPU.name: SUPERPOD_850X8.name}, "Atlas 850 SuperPoD, logical super-pods of 8-NPU nodes"
    ),
    "chip8-node8-ra64-sp": Policy(
        {NPU.name: SUPERPOD_950X8.name}, "Atlas 950 SuperPoD, racks of 64 NPUs"
    ),
    "chip1-softShareDev": Policy({}, "one chip shared by several pods by quota", True),
    "multilevel": Policy({}, "a topology tree from resource-level-config", True),
}

# A policy's network rules (``Rules.network``) are those of the products it routes to, keyed
# by the policy: the engine's network placement reads a job's annotations, not its product.
_NETWORK_OF_POLICY: Mapping[str, str] = {
    policy: network
    for policy, entry in POLICIES.items()
    for network in {PRODUCTS[name].rules.network for name in entry.products.values()}
    if network
}


def policy_network(policy: str | None) -> str:
    """The network rules (``Rules.network``) a ``huawei.com/schedule_policy`` value routes a
    job to; "" for none (no policy, or a policy whose products have none)."""
    return _NETWORK_OF_POLICY.get(policy or "", "")


# ``factory.go``: ``huawei.com/Ascend910<accelerator-type>`` handlers of card910Factory.
_BY_SELECTOR: Mapping[str, str] = {
    DEFAULT_ACCELERATOR_TYPE: MODULE_910X8.name,
    "half": HALF_910X4.name,
    CARD_ACCELERATOR_VALUE: CARD_910X2.name,
    "module-910b-8": MODULE_910BX8.name,
    "module-910b-16": MODULE_910BX16.name,
    "module-a3-16": A3X16,
    # factory.go registers the SuperPoD handlers under their accelerator-type too
    # (superpod/type.go A3x16SchedulerName, A3x8SchedulerName): a job may name them without
    # sp-block.
    SUPERPOD_910A3X16.accelerator_type: SP_A3X16,
    A3X8_SUPER_POD_TYPE: SP_A3X8,
    "850-Atlas-8p-8": ATLAS_850_8P.name,
}

# A node's ``accelerator-type`` label → its product (absent on a 910 node: ``module``).
_NODE_910: Mapping[str, str] = {
    DEFAULT_ACCELERATOR_TYPE: MODULE_910X8.name,
    "half": HALF_910X4.name,
    "module-910b-8": MODULE_910BX8.name,
    "module-910b-16": MODULE_910BX16.name,
    MODULE_910A3X16.accelerator_type: A3X16,
    MODULE_910A3X8.accelerator_type: A3X8,
    SUPERPOD_910A3X16.accelerator_type: SP_A3X16,
    A3X8_SUPER_POD_TYPE: SP_A3X8,
    "850-Atlas-8p-8": ATLAS_850_8P.name,
}
_NODE_NPU: Mapping[str, str] = {
    p.accelerator_type: p.name
    for p in (
        ATLAS_350X8,
        ATLAS_350X16,
        ATLAS_350_4PX8,
        ATLAS_350_4PX16,
        SUPERPOD_850X8,
        SUPERPOD_950X8,
    )
}
# An Atlas 850 / 950 SuperPoD server: the device plugin labels it ``accelerator=huawei-npu``
# and gives it no ``accelerator-type`` (Ascend/mind-cluster component/ascend-device-plugin/pkg/
# server/manager.go setAcceleratorLabel); its 8 NPUs serve either SuperPoD handler.
_UNLABELLED_NPU = SUPERPOD_850X8.name


def _product(name: str, why: str) -> Product:
    product = PRODUCTS.get(name)
    if product is None:
        raise InvalidInput(f"{why}: handler {name} is not built into this scheduler")
    return product


def policy_product(kind: ChipKind, policy: str) -> Product:
    """The product a ``huawei.com/schedule_policy`` value routes ``kind`` chips to."""
    entry = POLICIES.get(policy)
    if entry is None:
        known = ", ".join(POLICIES)
        raise InvalidInput(
            f"{SCHEDULE_POLICY_ANNOTATION} {policy!r} names no MindCluster handler (known: {known})"
        )
    if entry.unsupported:
        raise InvalidInput(
            f"schedule policy {policy} is not supported by this scheduler ({entry.hardware})"
        )
    name = entry.products.get(kind.name)
    if name is None:
        wanted = " or ".join(k for k in entry.products)
        raise InvalidInput(
            f"schedule policy {policy} ({entry.hardware}) is for {wanted} chips, "
            f"not {kind.resource}"
        )
    return _product(name, f"schedule policy {policy}")


def product_for_910(
    kind: ChipKind, annotations: Mapping[str, str], selector: Mapping[str, str]
) -> Product:
    """``get910CardHandlerName``: policy, then ``sp-block``, then ``accelerator-type``."""
    policy = annotations.get(SCHEDULE_POLICY_ANNOTATION)
    if policy is not None:
        return policy_product(kind, policy)
    if kind is NPU:
        raise InvalidInput(
            f"{NPU.resource} asks for a {SCHEDULE_POLICY_ANNOTATION} annotation (chip1-node8, "
            "chip1-node16, chip4-node8, chip4-node16): without one MindCluster's plugin has no "
            "handler (validNPUJob fail by policyHandler is nil)"
        )
    accelerator_type = selector.get(ACCELERATOR_TYPE_LABEL)
    if SP_BLOCK_ANNOTATION in annotations:
        super_pod = SP_A3X8 if accelerator_type == A3X8_SUPER_POD_TYPE else SP_A3X16
        return _product(super_pod, f"annotation {SP_BLOCK_ANNOTATION}")
    if accelerator_type is None:
        accelerator_type = DEFAULT_ACCELERATOR_TYPE
    elif CARD_ACCELERATOR_VALUE in accelerator_type:
        accelerator_type = CARD_ACCELERATOR_VALUE
    name = _BY_SELECTOR.get(accelerator_type)
    if name is None:
        raise InvalidInput(f"not support {ASCEND910.resource}{accelerator_type}")
    return _product(name, f"{ACCELERATOR_TYPE_LABEL} {accelerator_type}")


def product_for_job(
    kind: ChipKind,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    selector: Mapping[str, str],
) -> Product:
    """The handler of a job asking for ``kind`` chips (its merged labels and annotations, its
    pods' nodeSelector). 310 by its ``npu-310-strategy`` label (``chip`` by default); 310P:
    the 300I Duo handlers under label ``duo: "true"`` (``duochip`` with ``distributed:
    "true"`` taking whole cards), the base handler otherwise."""
    if kind is ASCEND910 or kind is NPU:
        return product_for_910(kind, annotations, selector)
    strategy = labels.get(STRATEGY_310_LABEL, "chip")
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


def product_for_resource(
    resource: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    selector: Mapping[str, str],
) -> Product:
    """``product_for_job`` for a resource name (``huawei.com/Ascend910``, ``huawei.com/npu``…)."""
    kind = KIND_OF_RESOURCE.get(resource)
    if kind is None:
        raise InvalidInput(f"{resource} is not a whole-chip NPU resource")
    return product_for_job(kind, labels, annotations, selector)


def product_of_node(kind: ChipKind, labels: Mapping[str, str]) -> Product:
    """The product a node of ``kind`` chips is, from its ``accelerator-type`` label (a 910 node
    without one: ``module``; any value containing ``card``: a card server of up to 8 chips).
    A 310 node serves both 310 handlers; a 310P node labelled ``infer-card-type:
    card-300i-duo`` is of Atlas 300I Duo cards."""
    label = labels.get(ACCELERATOR_TYPE_LABEL)
    if kind is ASCEND910:
        value = label if label is not None else DEFAULT_ACCELERATOR_TYPE
        if CARD_ACCELERATOR_VALUE in value:
            return CARD_910X2
        name = _NODE_910.get(value)
        if name is None:
            raise InvalidInput(f"not support {ASCEND910.resource}{value}")
        return _product(name, f"node label {ACCELERATOR_TYPE_LABEL}={value}")
    if kind is NPU:
        name = _NODE_NPU.get(label) if label is not None else _UNLABELLED_NPU
        if name is None:
            known = ", ".join(_NODE_NPU)
            raise InvalidInput(
                f"{NPU.resource} node label {ACCELERATOR_TYPE_LABEL}={label or ''!r} is not a "
                f"product this scheduler knows ({known})"
            )
        return PRODUCTS[name]
    if kind is ASCEND310:
        return CHIP_310X4
    return CHIP_310PX2 if labels.get(INFER_CARD_TYPE_LABEL) == DUO_CARD_TYPE else ASCEND_310P


def serves(node_product: Product, job_product: Product) -> bool:
    """Whether a node's chips can host a handler's task (its family's ``Rules.serves``)."""
    return job_product.rules.serves(node_product, job_product)
