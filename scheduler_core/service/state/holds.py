"""What waiting gangs hold: the wait as each gang's last try saw it, the holds themselves,
a namespace's backoff after holds that ended unused, and the plan of which nodes each
gang's members are held on (``plan_holds``). Values and pure functions; ``gangs.Gangs``
keeps the state they are computed from (the module's docstring says the rules)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from chip_topology.routing import product_by_name
from contract.node_affinity import EVERYWHERE, PodConstraints

# Why a gang waits, as a bounded class (``ascend_scheduler_waiting_gangs{reason}``): members
# not all created yet, too few nodes with room for one member, room but not where the network
# lets the gang go, room lacking while its namespace's holds are backed off, anything else.
MEMBERS_MISSING, NO_ROOM, NETWORK, BACKOFF, OTHER = (
    "members_missing",
    "no_room",
    "network",
    "backoff",
    "other",
)
WAIT_CLASSES = (MEMBERS_MISSING, NO_ROOM, NETWORK, BACKOFF, OTHER)


@dataclass(frozen=True, slots=True)
class WaitingGang:
    """A gang waiting for its reservation, as its last try saw it."""

    since: float
    namespace: str
    product: str
    npu: int  # chips of each member
    missing: int  # members not running
    stated: bool  # its size is stated by a PodGroup
    reason: str = ""  # why its last try found no reservation (the NPU map shows it)
    reason_class: str = "other"  # that reason as one of WAIT_CLASSES (a metric's label)
    pending: int = 0  # members not running whose pods exist: what it may hold for
    # Its pods' nodeSelector, required node affinity and tolerations: where it may hold.
    constraints: PodConstraints = EVERYWHERE

    @property
    def held_for(self) -> int:
        """The members it may hold nodes for: those not running whose pods exist (a member
        its PodGroup declares but nobody created holds nothing)."""
        return max(0, min(self.pending, self.missing))


@dataclass(frozen=True, slots=True)
class Hold:
    """Chips kept from one-pod jobs on one node: one member's ``npu`` chips of ``product``
    for a waiting gang, or (``npu`` 0) the whole node, for a fault job to come back."""

    why: str
    npu: int = 0
    product: str = ""

    @property
    def whole(self) -> bool:
        return self.npu == 0


@dataclass(frozen=True, slots=True)
class Backoff:
    """A namespace's holds ended unused ``ends`` times in a row; it holds nothing until
    ``until``."""

    ends: int
    until: float


# A namespace's waiting gangs hold at most this share of the cluster's chips together (each
# held node counted whole), and all namespaces' gangs together as much (``Gangs``).
DEFAULT_HOLD_SHARE = 0.25
# The longest backoff: 2**4 hold limits (2 h 40 min at the default 600 s).
BACKOFF_DOUBLINGS = 4
# Namespaces whose backoff is kept at most (the first backed off is forgotten first): a
# namespace quiet for a longest backoff after its own ended is forgotten anyway.
BACKOFF_NAMESPACES = 10_000


def backoff_after(previous: Backoff | None, now: float, hold_limit: float) -> Backoff:
    """A namespace's backoff once one more of its holds ended unused: a hold limit, doubled
    for each end before it, capped."""
    ends = 1 if previous is None else previous.ends + 1
    return Backoff(ends, now + hold_limit * 2 ** min(ends - 1, BACKOFF_DOUBLINGS))


def plan_holds(
    waiting: Mapping[str, WaitingGang],
    *,
    now: float,
    hold_limit: float,
    budget: int,
    total: int,
    backoff: Mapping[str, Backoff],
    candidates: Callable[[str, WaitingGang], Iterable[str]],
    taken: Collection[str],
) -> dict[str, list[str]]:
    """The nodes where each waiting gang's members are held (gang → nodes), oldest gang
    first: only gangs whose size a PodGroup states, within the hold limit, whose namespace is
    not backing off; each member whose pod exists and does not run (``held_for``) on a node
    of its own among the gang's ``candidates`` not ``taken`` (held for a fault job) or held
    already. A held node costs its whole server (``capacity`` of the gang's product: a node
    partly held is no longer whole for others, whatever the member asks); a namespace's
    holds together cost at most ``budget`` chips, all namespaces' together at most
    ``total`` (a gang past either holds the members that fit in it)."""
    held: dict[str, list[str]] = {}
    used: set[str] = set()
    spent: dict[str, int] = {}
    spent_all = 0
    for gang, wait in sorted(waiting.items(), key=lambda item: (item[1].since, item[0])):
        if not wait.stated or now - wait.since > hold_limit:
            continue
        if (back := backoff.get(wait.namespace)) is not None and now < back.until:
            continue
        server = capacity(wait.product)
        left = min(budget - spent.get(wait.namespace, 0), total - spent_all)
        count = max(0, min(wait.held_for, left // server))
        if count == 0:
            continue
        free = (n for n in candidates(gang, wait) if n not in used and n not in taken)
        nodes = list(itertools.islice(free, count))
        if nodes:
            held[gang] = nodes
            used.update(nodes)
            spent[wait.namespace] = spent.get(wait.namespace, 0) + len(nodes) * server
            spent_all += len(nodes) * server
    return held


def capacity(product: str) -> int:
    return product_by_name(product).capacity
