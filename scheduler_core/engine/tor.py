"""Switch (ToR) affinity 1.0 for multi-node jobs (Volcano plugin v5
``plugin/job.go CheckNetSliceIsMeetJobRequire``, MindCluster ``internal/nslb/nslbv1.go``). Pure.

Servers hang under leaf switches (ToRs) ``tor_count`` at a time; a server's ``slice_id`` is
its position under its ToR, and servers at the same position of different ToRs share a net
slice. A job of ``n`` pods (one a server) is placed:

- a *fill* job (``n < tor_count``) inside one ToR, best fit: the ToR with the fewest free
  servers that still fits;
- otherwise ``row`` whole ToRs plus ``column + 1`` servers of the next one
  (``row = n // tor_count``, one less when it divides; ``column = (n % tor_count +
  tor_count − 1) % tor_count``: 22 pods on ToRs of 4 → 5 whole ToRs + 2 servers), taken from
  whole free ToRs when enough exist, else from *logical* ToRs built across slices;
- a ``normal-schema`` job that fits none of these takes servers ToR by ToR (greedy); a
  ``large-model-schema`` job waits.
A *single-layer* fabric (``tor_level: single_layer``: ToRs with no spine above them) has no
net slices across ToRs, so no logical ToRs: whole ToRs or, for a normal job, greedy.
The chosen servers get consecutive ranks, by ToR then slice; the node whose rank equals a
pod's ``hccl/rankIndex`` scores ``RANK_SCORE`` (200) for that pod (the extender's gangs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from contract.annotations import TOR_AFFINITY_LABEL
from contract.tor_topology import Server, Topology

LARGE_MODEL, NORMAL, DISABLED = "large-model-schema", "normal-schema", "null"
RANK_SCORE = 200.0


class TorInvalid(ValueError):
    """A job's ToR affinity request cannot be honoured; the message is upstream's."""


@dataclass(frozen=True, slots=True)
class Selection:
    servers: tuple[Server, ...]  # in rank order
    how: str  # fill, whole-tors, logical-tors, greedy


def affinity_of(labels: Mapping[str, str], topology: Topology | None) -> str:
    """The job's schema (``DISABLED`` without the label), or upstream's validation error."""
    value = labels.get(TOR_AFFINITY_LABEL)
    if value is None or value == DISABLED:
        return DISABLED
    if value not in (LARGE_MODEL, NORMAL):
        raise TorInvalid(f"job tor affinity label check failed,tor-affinity label value is {value}")
    if topology is None:
        raise TorInvalid("job tor affinity check failed, cluster basic-tor-node-cm is not imported")
    return value


def row_and_column(n: int, tor_count: int) -> tuple[int, int]:
    row = n // tor_count - (1 if n % tor_count == 0 else 0)
    return row, (n % tor_count + tor_count - 1) % tor_count


def select(topology: Topology, candidates: Iterable[str], n: int, schema: str) -> Selection | None:
    """The servers for an ``n``-pod job among the candidate server IPs, or None (wait)."""
    free = set(candidates)
    tors = [[s for s in tor if s.ip in free] for tor in topology.tors]
    tors.sort(key=lambda t: -len(t))  # stable: equal ToRs keep their id order
    size = topology.tor_count
    if n < size:
        fitting = [t for t in reversed(tors) if len(t) >= n]
        if fitting:
            return Selection(tuple(fitting[0][:n]), "fill")
        if schema == LARGE_MODEL:
            return None
    row, column = row_and_column(n, size)
    whole = [t for t in tors if len(t) == size]
    if row + 1 < len(whole):
        chosen = [s for t in whole[:row] for s in t] + whole[row][: column + 1]
        return Selection(tuple(chosen), "whole-tors")
    # Without a spine (``single_layer``) servers at one slice of different ToRs share no
    # switch plane: there are no logical ToRs to build.
    logical = (
        None
        if topology.single_layer
        else _logical_tors([s for t in tors for s in t], size, row, column)
    )
    if logical is not None:
        chosen = [s for t in logical[:row] for s in t] + logical[row][: column + 1]
        return Selection(tuple(chosen), "logical-tors")
    if schema == NORMAL:
        greedy = [s for t in tors for s in t][:n]
        return Selection(tuple(greedy), "greedy") if len(greedy) == n else None
    return None


def _logical_tors(
    servers: Sequence[Server], size: int, row: int, column: int
) -> list[list[Server]] | None:
    """ToRs rebuilt across net slices: logical ToR j takes the j-th server of every slice."""
    slices = [[s for s in servers if s.slice_id == i] for i in range(size)]
    slices.sort(key=lambda s: -len(s))
    if len(slices[column]) < row + 1 or (row > 0 and len(slices[-1]) < row):
        return None
    depth = max(len(s) for s in slices)
    return [[s[j] for s in slices if j < len(s)] for j in range(depth)]
