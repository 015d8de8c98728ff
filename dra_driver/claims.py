"""What a ResourceClaim allocated on this node gives: read back from the API server and
checked before anything is prepared (``shared/reference/dra.md`` §2.4, after the Go helper's
``kubeletplugin`` and the example driver): the UID the kubelet names (a claim deleted and
made again under the same name is another claim), an allocation, results of this driver on
this node's pool only, devices that are chips of this node, and the product's rule on each
request (on a ring product 1, 2 or 4 chips on one HCCS ring, or the whole node; on an A3
whole dies; on a mesh product one mesh or whole meshes): the allocator enforces it only when
the claim carries the constraint, so the prepare step checks it again on what it receives.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from chip_topology.products import MESH_CHIPS, Product, Rule, mesh_affine
from contract.objects import Obj
from dra_driver.slices import chip_of

# Why a claim was not prepared: the label of ``ascend_dra_driver_prepare_failures_total``
# (a bounded set; the message, which names the claim, goes to the kubelet and the log).
INVALID, NOT_FOUND, API_ERROR, UNHEALTHY, TAKEN, CHECKPOINT = (
    "invalid_claim",
    "not_found",
    "api_error",
    "unhealthy",
    "taken",
    "checkpoint",
)
FAILURE_REASONS = (INVALID, NOT_FOUND, API_ERROR, UNHEALTHY, TAKEN, CHECKPOINT)


class ClaimRefused(Exception):
    """This claim cannot be prepared here; the message says why (the kubelet shows it),
    ``reason`` which of ``FAILURE_REASONS``."""

    def __init__(self, message: str, reason: str = INVALID) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Grant:
    """One chip of a claim: the request it serves (a ``firstAvailable`` subrequest's name
    stripped, as the kubelet matches containers' requests by the base name)."""

    request: str
    pool: str
    device: str
    chip: int


def granted(
    claim: Obj,
    ref: ClaimRef,
    *,
    driver: str,
    node: str,
    chips: Collection[int],
    product: Product | None,
) -> tuple[Grant, ...]:
    """The chips the claim's allocation gives this driver on this node; ClaimRefused says
    what is wrong."""
    meta = claim.get("metadata") or {}
    if meta.get("uid") != ref.uid:
        raise ClaimRefused(
            f"claim {ref} got replaced: its UID is {meta.get('uid')!r}, the kubelet asked "
            f"for {ref.uid!r}"
        )
    allocation = (claim.get("status") or {}).get("allocation")
    if not isinstance(allocation, dict):
        raise ClaimRefused(f"claim {ref} is not allocated")
    results = (allocation.get("devices") or {}).get("results") or []
    if not isinstance(results, list):
        raise ClaimRefused(f"claim {ref}: status.allocation.devices.results is not a list")
    grants = []
    for result in results:
        if not isinstance(result, dict) or result.get("driver") != driver:
            continue  # another driver's device: its own plugin prepares it
        device, pool = str(result.get("device", "")), str(result.get("pool", ""))
        if pool != node:
            raise ClaimRefused(f"claim {ref}: device {device!r} is in pool {pool!r}, not {node}'s")
        chip = chip_of(device)
        if chip is None or chip not in chips:
            raise ClaimRefused(f"claim {ref}: {device!r} is not a chip of {node}")
        request = str(result.get("request", "")).split("/", 1)[0]
        grants.append(Grant(request, pool, device, chip))
    if len({g.chip for g in grants}) != len(grants):
        raise ClaimRefused(f"claim {ref}: a chip is allocated twice in it")
    if product is not None:
        for request in sorted({g.request for g in grants}):
            check_ring_rule(ref, request, [g.chip for g in grants if g.request == request], product)
    return tuple(grants)


def check_ring_rule(ref: ClaimRef, request: str, chips: list[int], product: Product) -> None:
    """A request takes chips the scheduler could give it on this product
    (``chip_topology.products``): on a ring product a legal count of one ring, or the whole
    node; on an A3 one chip or whole dies; on a mesh product up to 4 chips of one mesh, or
    whole meshes for a multiple of 4."""
    if product.rule is Rule.RING:
        _check_rings(ref, request, chips, product)
    elif product.rule is Rule.DIES:
        _check_whole(ref, request, chips, product, "die", from_count=2)
    elif product.rule is Rule.MESH:
        n = len(chips)
        if n <= MESH_CHIPS:
            _check_one_mesh(ref, request, chips, product)
        elif mesh_affine(n):
            _check_whole(ref, request, chips, product, "mesh", from_count=n)


def _check_count(ref: ClaimRef, request: str, chips: list[int], product: Product) -> None:
    n = len(chips)
    legal = ", ".join(map(str, product.single_task_requests))
    if n not in product.single_task_requests:
        raise ClaimRefused(
            f"claim {ref}: request {request!r} has {n} chips; a {product.name} node gives {legal}"
        )


def _check_rings(ref: ClaimRef, request: str, chips: list[int], product: Product) -> None:
    _check_count(ref, request, chips, product)
    rings = {product.group_of(c) for c in chips}
    if len(chips) < product.capacity and len(rings) > 1:
        raise ClaimRefused(
            f"claim {ref}: request {request!r} spans HCCS rings {sorted(rings)} (chips "
            f"{sorted(chips)}); add the hccsRing matchAttribute constraint to the claim"
        )


def _check_one_mesh(ref: ClaimRef, request: str, chips: list[int], product: Product) -> None:
    meshes = {product.group_of(c) for c in chips}
    if len(meshes) > 1:
        raise ClaimRefused(
            f"claim {ref}: request {request!r} spans meshes {sorted(meshes)} (chips "
            f"{sorted(chips)}); add the mesh matchAttribute constraint to the claim"
        )


def _check_whole(
    ref: ClaimRef, request: str, chips: list[int], product: Product, group: str, *, from_count: int
) -> None:
    """From ``from_count`` chips on, every group the request touches is taken whole."""
    _check_count(ref, request, chips, product)
    if len(chips) < from_count:
        return
    touched = {product.group_of(c) for c in chips}
    split = sorted(g for g in touched if not set(product.groups[g]) <= set(chips))
    if split:
        raise ClaimRefused(
            f"claim {ref}: request {request!r} takes part of {group} {split} (chips "
            f"{sorted(chips)}); a {product.name} node gives whole {group}s: ask them as "
            f"requests each with the {group} matchAttribute constraint"
        )
