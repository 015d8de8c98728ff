"""MindCluster ``policy/chip4nodex``: meshes of 4 chips (chip id // 4), on the base handler."""

from __future__ import annotations

from collections.abc import Sequence

from chip_topology.products.groups import mask_of, split_refusal
from chip_topology.products.jobs import JobAsk, JobInvalid, job_id
from chip_topology.products.product import MESH, Product, Refusal, Rules
from contract.chip_names import chip_name

MESH_CHIPS = 4  # ``chip4nodex/type.go`` cardsNumPerMesh
_MESHES = 4  # ``getNodeMeshInfo`` counts meshes 0..3 only
# ``policy/chip4nodex/frame.go`` CheckNodeNPUByTask (and the Atlas 850's, ``superpod850``).
MESH_REASON = (
    "checkNodeNPUByTask the npus on this node don't satisfy the schedulable topology, "
    "network unhealthy card is [ {} ]"
)


def mesh_affine(req: int) -> bool:
    """``is4PmeshAffinity``: up to one mesh, or whole meshes."""
    return req <= MESH_CHIPS or req % MESH_CHIPS == 0


def _mesh_counts(mask: int) -> list[int]:
    whole = (1 << MESH_CHIPS) - 1
    return [(mask >> (MESH_CHIPS * m) & whole).bit_count() for m in range(_MESHES)]


def fits(product: Product, mask: int, req: int, distributed: bool) -> bool:
    """``judgeNodeAndTaskNPU``: a mesh with ``req`` free, ``req / 4`` whole free meshes, or
    (a request that is neither) enough chips."""
    if req <= 0:
        return False
    if not mesh_affine(req):
        return req <= mask.bit_count()
    counts = _mesh_counts(mask)
    if req >= MESH_CHIPS:
        return counts.count(MESH_CHIPS) >= req // MESH_CHIPS
    return any(n >= req for n in counts)


def score(product: Product, mask: int, allocatable: int, req: int, distributed: bool) -> float:
    """``scoreNodeFor4Pmesh`` / ``scoreNodeForGeneral``; 0 where upstream's best score errs."""
    size = product.capacity
    free = mask.bit_count()
    if not (1 <= req <= size and 1 <= free <= size):
        return 0.0
    card = free - req if free >= req else size  # ``createAffScoreList``
    if not mesh_affine(req):
        return float(size * (size - card))
    counts = _mesh_counts(mask)
    if req >= MESH_CHIPS:
        need, available = req // MESH_CHIPS, counts.count(MESH_CHIPS)
    else:
        need, available = 1, sum(1 for n in counts if n >= req)
    best = size * (available - need) + card
    weight = 16 if size == 8 else 64  # scoreWeightX16 on x8, scoreWeightX64 on x16
    return float(weight * (weight - best))


def select(product: Product, usable: Sequence[int], req: int, distributed: bool) -> tuple[int, ...]:
    """``selectNPUFromNode``: below a mesh, the mesh with the least surplus (the lowest on a
    tie); whole meshes from the lowest; otherwise the first ``req`` chips."""
    ordered = sorted(usable)
    if len(ordered) < req:
        return ()
    if not mesh_affine(req):
        return tuple(ordered[:req])
    counts = _mesh_counts(mask_of(ordered))
    if req >= MESH_CHIPS:
        chips = [
            c
            for m, n in enumerate(counts)
            if n == MESH_CHIPS
            for c in range(m * MESH_CHIPS, m * MESH_CHIPS + MESH_CHIPS)
        ]
        return tuple(chips[:req]) if len(chips) >= req else ()
    fitting = [(n - req, m) for m, n in enumerate(counts) if n >= req]
    if not fitting:
        return ()
    chosen = min(fitting)[1]
    return tuple([c for c in ordered if c // MESH_CHIPS == chosen][:req])


def validate(job: JobAsk, product: Product) -> None:
    """``policy/chip4nodex/job.go`` checkJobMode: the job's NPUs per NPU task, on average
    (Go's integer division), at most the node's; named by the handler's plugin name
    (``4p-8``, ``4p-16``, ``chip4nodex/type.go``)."""
    tasks = job.npu_tasks
    if sum(t.npu for t in tasks) // len(tasks) > product.capacity:
        raise JobInvalid(
            f"{MESH_CHIPS}p-{product.capacity} checkJobMode {job_id(job)} req "
            f"npu is invalid, task require npu can not bigger than {product.capacity}"
        )


def refuse(
    product: Product, usable: Sequence[int], mask: int, req: int, network_unhealthy: frozenset[int]
) -> Refusal:
    listed = ",".join(chip_name(c, product.kind) for c in sorted(network_unhealthy))
    return Refusal(MESH_REASON.format(listed))


def mesh_of(product: Product, chip: int) -> dict[str, int]:
    """A chip's mesh, under ``mesh`` also on a 910 (whose group attribute is the ring's)."""
    return {MESH: product.group_of(chip)}


def claim_refusal(product: Product, chips: Sequence[int]) -> str | None:
    """Up to 4 chips of one mesh, or whole meshes for a multiple of 4."""
    n = len(chips)
    if n <= MESH_CHIPS:
        meshes = {product.group_of(c) for c in chips}
        if len(meshes) <= 1:
            return None
        return (
            f"spans meshes {sorted(meshes)} (chips {sorted(chips)}); add the {MESH} "
            "matchAttribute constraint to the claim"
        )
    if mesh_affine(n):
        return split_refusal(product, chips, MESH, from_count=n)
    return None


RULES = Rules(
    fits=fits,
    score=score,
    select=select,
    select_tightest=select,
    validate=validate,
    refuse=refuse,
    more_groups=mesh_of,
    claim_refusal=claim_refusal,
)
