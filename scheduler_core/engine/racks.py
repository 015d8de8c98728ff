"""The Atlas 950 SuperPoD (``huawei.com/schedule_policy: chip8-node8-ra64-sp``), as MindCluster's
Volcano plugin places it (Ascend/mind-cluster ``component/ascend-for-volcano/internal/npu/policy/
chip8node8ra64sp/``: ``job.go``, ``frame.go``, ``schedule.go``, ``base.go``, ``utils.go``). Pure.

Servers of 8 NPUs sit in racks of 8 (64 NPUs); each node's DeviceInfo names its SuperPoD and
rack (``SuperPodID``, ``RackID``); 16 racks share one UB-memory domain (``RackID // 16``). A job
asks ``sp-block`` NPUs per logical block (default: all its NPUs) and ``ra-block`` NPUs that must
share a rack (default 8; a power of two up to 64, i.e. 1, 2, 4 or 8 nodes). Blocks are taken by
a chain of strategies, each tried when the one before fails:

1. *one rack* (jobs of at most 8 pods): one rack holding the whole job, a rack with exactly
   the job's nodes free first, else the smallest with more;
2. *one UB-memory domain* (more than 8 pods, annotation ``huawei.com/schedule_ubmemory:
   "true"``): the domain of one SuperPoD whose racks hold every block in whole ra-blocks,
   the fewest free nodes first; no further strategy;
3. *one SuperPoD* (more than 8 pods, at most ``super-pod-size``): one SuperPoD whose racks
   hold every block in whole ra-blocks;
4. *several SuperPoDs*: block by block, from the SuperPoDs with the most free nodes down, on
   nodes without network-unhealthy chips.

SuperPoDs are visited in a grid by their free nodes (row ``(free − 1) % block``, column
``(free − 1) // block``) from the cell of the job's size up (steps 1–3), or from the cell of
``super-pod-size`` down (step 4). Inside a SuperPoD a block takes whole ra-blocks from its racks,
the racks with the fewest free nodes first. Where upstream walks a Go map (SuperPoDs of one
cell, racks of equal size, a rack's nodes) we go by id and name. Rank ``r`` runs on node
``r % block`` of block ``r // block``; steps 2–4 number their blocks from the last.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from contract.annotations import RA_BLOCK_ANNOTATION, UB_MEMORY_ANNOTATION
from scheduler_core.engine.superpod import (
    Block,
    SuperPodChoice,
    SuperPodInvalid,
    SuperPodUnplaceable,
)

NODE_NPU = 8  # ``const.go`` nodeNPUNum
RACK_NPU = 64  # rackNPUNumber
DEFAULT_RA_BLOCK = 8  # ``common/util`` DefaultTpBlockNum
MAX_SUPER_POD_NPU = 8192  # maxSuperPodNPUNum
UB_MEMORY_RACKS = 16  # uBMemRackNumber
MAX_UB_MEMORY_NPU = 1024  # maxNpuNumInUBMemScene
RACK_JOB_TASKS = 8  # npuTaskNum8: a job this small goes in one rack first
# Where a pod-level fault job's ranks go again (``reschedule.go`` selectNodesByRack): each
# into its old rack, then (from tpRescheduleStage) each ra-block into one rack.
SAME_RACK, WHOLE_RACK = "same-rack", "whole-rack"


@dataclass(frozen=True, slots=True)
class RackJob:
    """A 950 SuperPoD job's blocks, read from its annotations."""

    tasks: int
    block: int  # nodes of one sp-block
    ra_block: int  # nodes of one ra-block (upstream's tpBlock)
    ra_block_npu: int  # the annotation's NPUs, as upstream's messages name them
    ub_memory: bool


def _number(text: str | None, default: int) -> int:
    """``strconv.Atoi`` as upstream reads the annotation: absent → the default, not a
    number → 0 (the field left unset)."""
    if text is None:
        return default
    stripped = text[1:] if text[:1] in "+-" else text
    if not (stripped.isascii() and stripped.isdigit()):
        return 0
    return int(text)


def rack_job(annotations: Mapping[str, str], npus: Sequence[int], super_pod_size: int) -> RackJob:
    """The job's blocks, or SuperPodInvalid with upstream's message (``frame.go``
    ValidNPUJob's checkers in order: checkSpBlock, checkSuperPodSizeValid, checkTpBlockNum,
    calculateTpBlockAndCheck, checkJobReqNpuNum, checkJobInUBMemScene). ``npus``: each NPU
    task's request; ``super_pod_size``: the configured ``super-pod-size``."""
    tasks, required = len(npus), sum(npus)
    sp_npu = _number(annotations.get("sp-block"), required)
    if sp_npu <= 0:
        raise SuperPodInvalid(f"Parameter sp-block({sp_npu}) is invalid.")
    if sp_npu < NODE_NPU:
        block = 1
    elif sp_npu % NODE_NPU:
        raise SuperPodInvalid(
            f"Parameter sp-block({sp_npu}) is not multiple of node npu ({NODE_NPU})"
        )
    else:
        block = sp_npu // NODE_NPU
    if tasks % block:
        raise SuperPodInvalid(
            f"job require total Pod({tasks}) should be multiple of a sp-block size {block}"
        )
    if super_pod_size <= 0 or super_pod_size * NODE_NPU > MAX_SUPER_POD_NPU:
        raise SuperPodInvalid(
            f"Parameter super-pod-size({super_pod_size}) in volcano.yaml is invalid which "
            "should be in range [1,1024]"
        )
    if block > super_pod_size:
        raise SuperPodInvalid(
            f"Parameter spBlock({sp_npu}/8={block}) is bigger than size of "
            f"super-pod-size({super_pod_size})"
        )
    ra_npu = _number(annotations.get(RA_BLOCK_ANNOTATION), DEFAULT_RA_BLOCK)
    if not 1 <= ra_npu <= RACK_NPU:
        raise SuperPodInvalid(
            "Parameter ra-block is invalid, it should be a number in the range from 1 to "
            f"{RACK_NPU}"
        )
    if ra_npu & (ra_npu - 1):
        raise SuperPodInvalid(f"Parameter ra-block({ra_npu}) must be the power of 2")
    ra_block = (ra_npu + NODE_NPU - 1) // NODE_NPU
    if ra_block > block:
        raise SuperPodInvalid(
            f"Parameter ra-block({ra_npu})/{NODE_NPU} could not be bigger than "
            f"sp-block({sp_npu})/{NODE_NPU}"
        )
    if tasks % ra_block:
        raise SuperPodInvalid(
            f"number of tasks({tasks}) must be multiple of nodes occupied by ra-block({ra_block})"
        )
    if block % ra_block:
        raise SuperPodInvalid(f"spBlock= {sp_npu} / 8 must be multiple of tpBlock= {ra_npu} / 8")
    _check_requests(npus, sp_npu, ra_npu)
    ub_memory = annotations.get(UB_MEMORY_ANNOTATION) == "true"
    if ub_memory:
        total = 0
        for npu in npus:
            total += npu
            if total > MAX_UB_MEMORY_NPU:
                raise SuperPodInvalid(
                    "in ubmem scene, task require npu nums should smaller than "
                    f"{MAX_UB_MEMORY_NPU}, but recevice {total}"
                )
    return RackJob(tasks, block, ra_block, ra_npu, ub_memory)


def _check_requests(npus: Sequence[int], sp_npu: int, ra_npu: int) -> None:
    """``job.go`` checkJobReqNpuNum."""
    required = sum(npus)
    if len(npus) == 1:
        if not 0 < required <= NODE_NPU:
            raise SuperPodInvalid(f"single super-pod job require npu [1, 8], instead of {required}")
        if required != sp_npu:
            raise SuperPodInvalid(
                "single super-pod job sp-block annotation should equal require npu num"
            )
        return
    if required % sp_npu:
        raise SuperPodInvalid(
            "distributed super-pod job require npu should be multiple of sp-block, instead "
            f"of {required}"
        )
    if required % ra_npu:
        raise SuperPodInvalid(
            f"distributed super-pod job require npu({required}) should be multiple of ra-block"
        )
    for npu in npus:
        if npu != NODE_NPU:
            raise SuperPodInvalid(f"distributed job require npu {NODE_NPU}, instead of {npu}")


def ra_block_nodes(annotations: Mapping[str, str]) -> int:
    """The nodes of the job's ra-block (at least 1; validated where the job was placed)."""
    return max(1, -(-_number(annotations.get(RA_BLOCK_ANNOTATION), DEFAULT_RA_BLOCK) // NODE_NPU))


def refill(
    stage: str,
    ranks: Sequence[int],
    previous: Sequence[Where],
    ra_block: int,
    free: Mapping[str, Where],
) -> tuple[str, ...]:
    """Nodes for the ``ranks`` of a pod-level fault job placed again, ``previous`` the place
    each ran in, ``free`` the candidates (best first) and their places, as
    ``chip8node8ra64sp/reschedule.go`` selectNodesByRack: SAME_RACK, each rank a free node
    of its old rack (getSameRackNodes); WHOLE_RACK, the ranks of each ra-block together in
    one rack of their SuperPoD, the old one if it has room, else the one with the fewest
    free nodes that has (getRackId, getAnotherRackNodes). SuperPodUnplaceable when a rank or
    block has no room: the job waits for the next stage."""
    left = dict(free)
    chosen: list[str] = []
    if stage == SAME_RACK:
        for rank, place in zip(ranks, previous, strict=True):
            node = next((n for n, w in left.items() if w == place), None)
            if node is None:
                raise SuperPodUnplaceable(
                    f"rank {rank}: no free node in rack {place.rack} of super-pod "
                    f"{place.super_pod}, where it ran"
                )
            chosen.append(node)
            del left[node]
        return tuple(chosen)
    groups: dict[int, list[tuple[int, Where]]] = {}
    for rank, place in zip(ranks, previous, strict=True):
        groups.setdefault(rank // ra_block, []).append((rank, place))
    by_rank: dict[int, str] = {}
    for members in groups.values():
        super_pod = members[0][1].super_pod
        racks: dict[int, list[str]] = {}
        for node, where in left.items():
            if where.super_pod == super_pod:
                racks.setdefault(where.rack, []).append(node)
        roomy = {r: nodes for r, nodes in racks.items() if len(nodes) >= len(members)}
        old = next((p.rack for _, p in members if p.rack in roomy), None)
        if old is None and not roomy:
            raise SuperPodUnplaceable("there is no enough nodes for whole rack schedule")
        rack = old if old is not None else min(roomy, key=lambda r: (len(roomy[r]), r))
        for (rank, _), node in zip(members, roomy[rack], strict=False):
            by_rank[rank] = node
            del left[node]
    return tuple(by_rank[r] for r in ranks)


def unplaced(node: str, super_pod: int | None) -> str:
    """``node.go`` checkNodeStaticParams's refusal of a node without a SuperPoD or, having
    one, without a rack (either unset reads as the device plugin's -1): no place for a 950
    SuperPoD job."""
    if super_pod is None:
        return f"the super-pod-id of node is invalid for node={node}, id=-1"
    return f"node rack-id is invalid for node={node}, id=-1"


@dataclass(frozen=True, slots=True)
class Where:
    """A candidate node's place: its SuperPoD and rack."""

    super_pod: int
    rack: int


class _Search:
    """One run of the strategy chain over the candidates' SuperPoDs."""

    def __init__(
        self,
        job: RackJob,
        where: Mapping[str, Where],
        unready: Sequence[int],
        super_pod_size: int,
        network_unhealthy: Collection[str],
    ) -> None:
        self.job = job
        self.size = super_pod_size
        self.unready = list(unready)
        self.network_unhealthy = network_unhealthy
        self.pods: dict[int, list[str]] = {}
        for node in sorted(where):
            self.pods.setdefault(where[node].super_pod, []).append(node)
        self.where = where
        self.table: dict[tuple[int, int], list[int]] = {}
        self.count = 0
        for sp in sorted(self.pods):
            free = len(self.pods[sp])
            if free > super_pod_size:  # ``utils.go`` getSuperPodsInfo
                raise SuperPodUnplaceable("super-pod-size is smaller than superPod's node size")
            self.count += free // job.block
            cell = ((free - 1) % job.block, (free - 1) // job.block)
            self.table.setdefault(cell, []).append(sp)
        self.rows, self.columns = job.block, super_pod_size // job.block + 1
        self.chosen: list[Block] = []

    def _racks(self, sp: int) -> dict[int, list[str]]:
        racks: dict[int, list[str]] = {}
        for node in self.pods[sp]:
            racks.setdefault(self.where[node].rack, []).append(node)
        return racks

    def _upward(self, pods: int) -> list[int]:
        """``searchTable`` of steps 1–3: from the cell of ``pods`` nodes, column by column."""
        row, column = (pods - 1) % self.job.block, (pods - 1) // self.job.block
        order = []
        for j in range(column, self.columns):
            for i in range(row if j == column else 0, self.rows):
                order += self.table.get((i, j), [])
        return order

    def _downward(self) -> list[int]:
        """Step 4's ``searchTable``: from the cell of ``super-pod-size`` down."""
        size = self.size
        row, column = (size - 1) % self.job.block, (size - 1) // self.job.block
        order = []
        for j in range(column, -1, -1):
            for i in range(row if j == column else self.rows - 1, -1, -1):
                order += self.table.get((i, j), [])
        return order

    def _take_block(self, sp: int, racks: dict[int, list[str]]) -> None:
        """``base.go`` selectOneSpBlock: the next block (numbered from the last unready id)
        in whole ra-blocks, the racks with the fewest free nodes first."""
        vid = self.unready.pop()
        ra = self.job.ra_block
        wanted = self.job.block // ra
        nodes: list[str] = []
        for rack in sorted(racks, key=lambda r: (len(racks[r]), r)):
            if wanted == 0:
                break
            take = min(wanted, len(racks[rack]) // ra)
            wanted -= take
            nodes += racks[rack][: take * ra]
            racks[rack] = racks[rack][take * ra :]
        self.pods[sp] = [n for n in self.pods[sp] if n not in nodes]
        self.chosen.append(Block(vid, sp, tuple(nodes)))

    def one_rack(self) -> bool:
        """``oneRackStrategy``: the whole job in one rack."""
        tasks = self.job.tasks
        for sp in self._upward(tasks):
            racks = self._racks(sp)
            exact = [r for r in sorted(racks) if len(racks[r]) == tasks]
            larger = sorted((len(racks[r]), r) for r in racks if len(racks[r]) > tasks)
            if not exact and not larger:
                continue
            nodes = racks[exact[0] if exact else larger[0][1]][:tasks]
            block = self.job.block
            for i, vid in enumerate(self.unready):
                self.chosen.append(Block(vid, sp, tuple(nodes[i * block : (i + 1) * block])))
            self.unready = []
            return True
        return False

    def one_ub_memory(self) -> bool:
        """``oneUBMemStrategy``: every block in one UB-memory domain of one SuperPoD, the
        domain with the fewest free nodes among those that hold them."""
        ra, need = self.job.ra_block, self.job.block * len(self.unready)
        for sp in self._upward(self.job.tasks):
            domains: dict[int, dict[int, list[str]]] = {}
            for rack, nodes in self._racks(sp).items():
                domains.setdefault(rack // UB_MEMORY_RACKS, {})[rack] = nodes
            fitting = [
                (sum(len(n) for n in racks.values()), domain)
                for domain, racks in sorted(domains.items())
                if sum(len(n) // ra * ra for n in racks.values()) >= need
            ]
            if fitting:
                racks = domains[min(fitting)[1]]
                while self.unready:
                    self._take_block(sp, racks)
                return True
        return False

    def one_super_pod(self) -> bool:
        """``oneSuperPodStrategy``: every block in the first SuperPoD whose racks hold them."""
        ra = self.job.ra_block
        for sp in self._upward(self.job.tasks):
            racks = self._racks(sp)
            whole = sum(len(nodes) // ra for nodes in racks.values())
            if whole < len(self.unready) * self.job.block // ra:
                continue
            while self.unready:
                self._take_block(sp, racks)
            return True
        return False

    def several_super_pods(self) -> bool:
        """``mulSuperPodsStrategy``: block by block from the fullest SuperPoDs, on nodes
        without network-unhealthy chips."""
        ra = self.job.ra_block
        for sp in self._downward():
            racks = {
                rack: [n for n in nodes if n not in self.network_unhealthy]
                for rack, nodes in self._racks(sp).items()
            }
            while self.unready and sum(len(n) // ra for n in racks.values()) >= (
                self.job.block // ra
            ):
                self._take_block(sp, racks)
            if not self.unready:
                return True
        return False


def select(
    job: RackJob,
    where: Mapping[str, Where],
    *,
    super_pod_size: int,
    soft: bool = False,
    network_unhealthy: Collection[str] = frozenset(),
    unready: Sequence[int] | None = None,
) -> SuperPodChoice:
    """The job's blocks among the candidate nodes (``where``: each one's SuperPoD and rack),
    or SuperPodUnplaceable with upstream's message (``frame.go`` selectNodesBySpecStrategy).
    ``unready``: the block ids still to place (all unless a restart kept some).

    ``super-pod-affinity: soft`` lifts the up-front count and the one-rack refusal as upstream
    does; its last resort (partial blocks over any SuperPoDs) is not built: such a job waits
    with step 4's message."""
    ids = list(range(job.tasks // job.block)) if unready is None else sorted(unready)
    search = _Search(job, where, ids, super_pod_size, network_unhealthy)
    steps: tuple[Callable[[], bool], ...]
    if job.tasks <= RACK_JOB_TASKS:
        if search.count < len(ids) and not soft:
            raise SuperPodUnplaceable(
                f"before scheduling, required sp-block count={len(ids)}, but total sp-block "
                f"count={search.count}"
            )
        if search.one_rack():
            return _choice(search)
        if job.tasks // job.ra_block == 1 and not soft:
            raise SuperPodUnplaceable(
                f"not found the 1 count of ra-block:{job.ra_block_npu} in all racks of every "
                "super-pod, exit select process"
            )
        steps = (search.one_super_pod, search.several_super_pods)
    elif job.ub_memory:
        if search.one_ub_memory():
            return _choice(search)
        raise SuperPodUnplaceable("scheduling failed in UBMemSchedule strategy")
    elif job.tasks <= super_pod_size:
        steps = (search.one_super_pod, search.several_super_pods)
    else:
        steps = (search.several_super_pods,)
    for step in steps:
        if step():
            return _choice(search)
    raise SuperPodUnplaceable("scheduling failed in MultiSuperPodsSchedule strategy")


def _choice(search: _Search) -> SuperPodChoice:
    return SuperPodChoice(tuple(sorted(search.chosen, key=lambda b: b.vid)))
