"""The ResourceSlice a node's DRA driver publishes: one pool named after the node, one slice,
one device per chip, listed in ring order (the stock allocator is first-fit over that order).

Each device is ``npu-<physical id>`` with attributes in the driver's own domain: ``model``
(the chip, ``Ascend910``), ``topology`` (the product: ring size and legal requests),
``physicalID``, ``logicID``, ``hccsRing`` (the HCCS ring the chip is on: what a claim's
``matchAttribute`` keeps one request in), ``healthy`` (an unhealthy chip stays listed, false:
the DeviceClass selects healthy chips only; taints need the DRADeviceTaints gate of 1.36),
``serverIndex`` and ``superPodID`` on SuperPoD servers, ``torIP`` (its leaf switch, from the
imported ToR topology), and ``ringFree`` (the healthy chips of
its ring not prepared for a claim: the hint the exact-fit ladder's ``firstAvailable`` rungs
select on). Shapes: ``shared/reference/dra.md`` §3.1, §3.2, §6.1 (from ``k8s.io/api``
``resource/v1/types.go``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from chip_drivers.chips import Chip, NodeChips
from chip_topology.products import Product, product_by_name
from contract.chip_names import InvalidInput
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


def product_of(chips: NodeChips) -> Product | None:
    if chips.product is None:
        return None
    try:
        return product_by_name(chips.product)
    except InvalidInput:
        return None


def ring_of(product: Product | None, chip: int) -> int | None:
    """The HCCS ring (the product's group) a chip is on; None without a ring rule."""
    if product is None or not product.groups or chip >= product.capacity:
        return None
    return product.group_of(chip)


def ring_free(chips: NodeChips, prepared: Collection[int]) -> dict[int, int]:
    """Per ring: its healthy chips not prepared for any claim."""
    product = product_of(chips)
    free: dict[int, int] = {}
    for chip in chips.chips:
        ring = ring_of(product, chip.id)
        if ring is not None:
            free.setdefault(ring, 0)
            free[ring] += chip.healthy and chip.id not in prepared
    return free


def _device(
    chip: Chip,
    chips: NodeChips,
    product: Product | None,
    free: Mapping[int, int] | None,
    tor_ip: str | None,
) -> Obj:
    attributes: dict[str, Any] = {
        "model": {"string": chips.resource},
        "physicalID": {"int": chip.id},
        "logicID": {"int": chip.logic_id},
        "healthy": {"bool": chip.healthy},
    }
    if chips.product is not None:
        attributes["topology"] = {"string": chips.product}
    ring = ring_of(product, chip.id)
    if ring is not None:
        attributes["hccsRing"] = {"int": ring}
        if free is not None:
            attributes["ringFree"] = {"int": free.get(ring, 0)}
    if chips.super_pod_id is not None:
        attributes["superPodID"] = {"int": chips.super_pod_id}
    if chips.server_index is not None:
        attributes["serverIndex"] = {"int": chips.server_index}
    if tor_ip:
        attributes["torIP"] = {"string": tor_ip}
    return {"name": device_name(chip.id), "attributes": attributes}


def desired_slice(
    driver: str,
    node: str,
    node_uid: str,
    chips: NodeChips,
    *,
    generation: int = 1,
    free: Mapping[int, int] | None = None,
    tor_ip: str | None = None,
) -> Obj:
    """The node's one slice (``free``: the ``ringFree`` hint per ring, when published;
    ``tor_ip``: the node's leaf switch, when known); owned by the Node, so deleting the Node
    collects it."""
    product = product_of(chips)
    ordered = sorted(chips.chips, key=lambda c: (ring_of(product, c.id) or 0, c.id))
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
            "devices": [_device(c, chips, product, free, tor_ip) for c in ordered[:MAX_DEVICES]],
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
