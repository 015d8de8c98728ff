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

from chip_topology.products import Product
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
    """A request takes chips the scheduler could give it on this product (its family's
    ``Rules.claim_refusal``): on a ring product a legal count of one ring, or the whole
    node; on an A3 one chip or whole dies; on a mesh product up to 4 chips of one mesh, or
    whole meshes for a multiple of 4."""
    refusal = product.rules.claim_refusal(product, chips)
    if refusal is not None:
        raise ClaimRefused(f"claim {ref}: request {request!r} {refusal}")
