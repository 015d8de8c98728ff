"""The ResourceSlice a node's DRA driver publishes: one pool named after the node, one slice,
one device per chip, listed in group order (the stock allocator is first-fit over that order).

Each device is ``npu-<physical id>`` with attributes in the driver's own domain: ``model``
(the chip kind, ``Ascend910`` or ``npu`` on the Ascend 950 family), ``physicalID``,
``logicID``, ``healthy`` (an unhealthy chip stays listed, false: the DeviceClasses select
healthy chips only; taints need the DRADeviceTaints gate of 1.36), ``serverIndex`` and
``superPodID`` on SuperPoD servers, ``torIP`` (its leaf switch, from the imported ToR
topology), and what the node's product (``chip_topology.products``) says of the chip:
``topology`` (the product's name), ``acceleratorType`` (the node label value its handler is
named by) and its group, under the attribute a claim's ``matchAttribute`` keeps one request
in (``group_attributes``), with ``ringFree`` (the healthy chips of that group not prepared
for a claim: the hint the exact-fit ladder's ``firstAvailable`` rungs select on). The product
is the chip driver's, else the one ``chip_topology.routing.product_of_node`` reads from the
node's labels, as the scheduler does. Each device also carries ``group`` (its product's group
whatever the product: what a request of up to one group's chips is kept in) and, for claims
written for Huawei's DRA driver, that driver's attributes in its domain (``huawei_attributes``).
Shapes: ``shared/reference/dra.md`` §3.1, §3.2, §6.1 (from ``k8s.io/api``
``resource/v1/types.go``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from chip_drivers.chips import Chip, NodeChips
from chip_topology.products import Product
from chip_topology.routing import product_by_name, product_of_node
from contract.chip_names import NPU, InvalidInput
from contract.dra import slice_name
from contract.objects import Obj

DEVICE_PREFIX = "npu-"
MAX_DEVICES = 128  # a slice's limit without taints or counters


def device_name(chip: int) -> str:
    return f"{DEVICE_PREFIX}{chip}"


def chip_of(device: str) -> int | None:
    """The physical id a device name stands for (None: not one of ours)."""
    number = device.removeprefix(DEVICE_PREFIX)
    if device == number or not number.isascii() or not number.isdigit() or len(number) > 4:
        return None
    return int(number)


def product_of(chips: NodeChips, labels: Mapping[str, str] | None = None) -> Product | None:
    """The node's product: the one the chip driver names, else the one the scheduler reads
    from the node's labels (``product_of_node``); None when neither knows the hardware."""
    try:
        if chips.product is not None:
            return product_by_name(chips.product)
        return product_of_node(chips.kind, labels or {})
    except InvalidInput:
        return None


# The same group under one name on every product: a constraint on it keeps a request in its
# node's group whichever kind of chip it gets (the chart's MutatingAdmissionPolicy adds it to
# claims written for Huawei's DeviceClass, which selects 910 and 950 chips alike).
GROUP = "group"

# Huawei's DRA driver (Ascend/mind-cluster component/ascend-dynamic-resource-allocation,
# pkg/consts/consts.go, internal/device/generation_common.go): driver and DeviceClass
# npu.huawei.com, each device with deviceType (the device manager's chip type) and physicId.
HUAWEI_DOMAIN = "npu.huawei.com"
HUAWEI_DEVICE_TYPE, HUAWEI_PHYSIC_ID = "deviceType", "physicId"
# ascend-common devmanager's DevType of the 950 generation (ascend-common/cdi/mount/
# profile.go); the others' is their family's (``Family.device_type``).
HUAWEI_950_DEV_TYPE = "Ascend910A5"


def group_attribute(product: Product) -> str:
    """The attribute a chip's group goes by on this product (its family's
    ``Rules.group_attribute``)."""
    return product.rules.group_attribute(product)


def group_of(product: Product | None, chip: int) -> int | None:
    """The product's group a chip is on (its ring, die, mesh or card); None without one."""
    if product is None or not product.groups or chip >= product.capacity:
        return None
    return product.group_of(chip)


def group_attributes(product: Product | None, chip: int) -> dict[str, int]:
    """The attributes that let a claim ask the groups the scheduler gives on this product:
    the group under its kind's name (``group_attribute``) and the others its family names
    (``Rules.more_groups``: on an A3 ``die``, its NPU module of two chips, whole dies for 2
    chips or more; on a product placed by meshes ``mesh``, also on a 910 (``chip4-node8``))."""
    group = group_of(product, chip)
    if product is None or group is None:
        return {}
    return {group_attribute(product): group, **product.rules.more_groups(product, chip)}


def huawei_device_type(chips: NodeChips, product: Product | None) -> str:
    """The ``deviceType`` Huawei's DRA driver publishes for this node's chips."""
    if chips.resource == NPU.name:
        return HUAWEI_950_DEV_TYPE
    if product is not None and product.family.device_type:
        return product.family.device_type
    return chips.resource  # Ascend310P, Ascend310 (as Huawei's), or an unknown 910's kind


def huawei_attributes(driver: str, chips: NodeChips, product: Product | None, chip: Chip) -> Obj:
    """Huawei's attributes, in Huawei's domain: bare when this driver runs under Huawei's
    name, else qualified (``npu.huawei.com/deviceType``), so that a selector written for
    Huawei's driver, ``device.attributes["npu.huawei.com"].deviceType``, reads them either
    way (a name's domain is the driver's unless it says another: resource/v1 QualifiedName)."""
    prefix = "" if driver == HUAWEI_DOMAIN else f"{HUAWEI_DOMAIN}/"
    return {
        f"{prefix}{HUAWEI_DEVICE_TYPE}": {"string": huawei_device_type(chips, product)},
        f"{prefix}{HUAWEI_PHYSIC_ID}": {"int": chip.id},
    }


def ring_free(
    chips: NodeChips, prepared: Collection[int], labels: Mapping[str, str] | None = None
) -> dict[int, int]:
    """Per group of the node's product: its healthy chips not prepared for any claim."""
    product = product_of(chips, labels)
    free: dict[int, int] = {}
    for chip in chips.chips:
        group = group_of(product, chip.id)
        if group is not None:
            free.setdefault(group, 0)
            free[group] += chip.healthy and chip.id not in prepared
    return free


def _device(
    chip: Chip,
    chips: NodeChips,
    product: Product | None,
    free: Mapping[int, int] | None,
    tor_ip: str | None,
    *,
    driver: str,
) -> Obj:
    attributes: dict[str, Any] = {
        "model": {"string": chips.resource},
        "physicalID": {"int": chip.id},
        "logicID": {"int": chip.logic_id},
        "healthy": {"bool": chip.healthy},
    }
    if product is not None:
        attributes["topology"] = {"string": product.name}
        if product.rules.labelled:  # not an inference handler, named by a job's strategy
            attributes["acceleratorType"] = {"string": product.accelerator_type}
    elif chips.product is not None:
        attributes["topology"] = {"string": chips.product}
    for name, value in group_attributes(product, chip.id).items():
        attributes[name] = {"int": value}
    group = group_of(product, chip.id)
    if group is not None:
        attributes[GROUP] = {"int": group}
    if group is not None and free is not None:
        attributes["ringFree"] = {"int": free.get(group, 0)}
    if chips.super_pod_id is not None:
        attributes["superPodID"] = {"int": chips.super_pod_id}
    if chips.server_index is not None:
        attributes["serverIndex"] = {"int": chips.server_index}
    if tor_ip:
        attributes["torIP"] = {"string": tor_ip}
    attributes.update(huawei_attributes(driver, chips, product, chip))
    return {"name": device_name(chip.id), "attributes": attributes}


def desired_slice(
    driver: str,
    node: str,
    node_uid: str,
    chips: NodeChips,
    *,
    labels: Mapping[str, str] | None = None,
    generation: int = 1,
    free: Mapping[int, int] | None = None,
    tor_ip: str | None = None,
) -> Obj:
    """The node's one slice (``labels``: the Node's, for its product when the chip driver
    names none; ``free``: the ``ringFree`` hint per group, when published; ``tor_ip``: the
    node's leaf switch, when known); owned by the Node, so deleting the Node collects it."""
    product = product_of(chips, labels)
    ordered = sorted(chips.chips, key=lambda c: (group_of(product, c.id) or 0, c.id))
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": slice_name(node, driver),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node,
                    "uid": node_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                _device(c, chips, product, free, tor_ip, driver=driver)
                for c in ordered[:MAX_DEVICES]
            ],
        },
    }


def dropped_fields(sent: Any, stored: Any, path: str = "spec") -> list[str]:
    """Fields of what was sent that the API server did not store (it drops the fields of a
    feature gate it has off, silently): their paths."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path]
        return [
            p
            for key, value in sent.items()
            for p in (
                [f"{path}.{key}"]
                if key not in stored
                else dropped_fields(value, stored[key], f"{path}.{key}")
            )
        ]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) != len(sent):
            return [path]
        return [p for i, v in enumerate(sent) for p in dropped_fields(v, stored[i], f"{path}[{i}]")]
    return []


def same_spec(current: Obj | None, wanted: Obj) -> bool:
    return current is not None and current.get("spec") == wanted["spec"]
