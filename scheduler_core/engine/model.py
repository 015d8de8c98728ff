"""Plain values the decision engine takes and returns.

Chips are physical IDs (ints); their names on the wire are the contract's
(``contract.chip_names``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from contract.chip_names import InvalidInput, chip_name

_NO_STRINGS: Mapping[str, str] = MappingProxyType({})
_NO_FLOATS: Mapping[str, float] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NodeState:
    """One NPU node as the scheduler sees it.

    ``free`` keeps the order of the DeviceInfo list (the chips are picked from it sorted by
    id, as MindCluster's handlers sort it). ``allocatable`` is kubelet's healthy chip count;
    fewer than the product's capacity lowers the node's priority (the capacity-7 rule).
    """

    name: str
    product: str
    free: tuple[int, ...]
    allocatable: int
    unhealthy: frozenset[int] = frozenset()
    network_unhealthy: frozenset[int] = frozenset()
    card_type: str = ""  # the node's infer-card-type label, which upstream's refusals name
    # Sub-health (MindCluster ``internal/rescheduling/node.go``): a chip fault handled as
    # ``SubHealthFault`` (card) or the node's switch reporting sub-health (switch).
    card_sub_healthy: bool = False
    switch_sub_healthy: bool = False

    @property
    def sub_healthy(self) -> bool:
        return self.card_sub_healthy or self.switch_sub_healthy

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidInput("node name is empty")
        if len(set(self.free)) != len(self.free):
            raise InvalidInput(f"node {self.name}: free list names a chip twice")
        if self.allocatable < 0:
            raise InvalidInput(f"node {self.name}: allocatable {self.allocatable} is negative")


@dataclass(frozen=True, slots=True)
class Task:
    """One pod of a job. ``npu`` = 0 marks a task that needs no NPU (it is not placed)."""

    name: str
    npu: int

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidInput("task name is empty")
        if self.npu < 0:
            raise InvalidInput(f"task {self.name}: npu {self.npu} is negative")


@dataclass(frozen=True, slots=True)
class Job:
    """An NPU job: its product handler, its pods and the metadata the rules read.

    ``labels`` are PodGroup ∪ pod labels, ``selector`` the pods' merged nodeSelector.
    """

    name: str
    product: str
    tasks: tuple[Task, ...]
    namespace: str = "default"
    labels: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
    selector: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidInput("job name is empty")
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            raise InvalidInput(f"job {self.key}: two tasks share a name")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def npu_tasks(self) -> tuple[Task, ...]:
        return tuple(t for t in self.tasks if t.npu > 0)

    @property
    def distributed(self) -> bool:
        """Upstream's ``NPUTaskNum > 1``: network health only matters for these."""
        return len(self.npu_tasks) > 1


@dataclass(frozen=True, slots=True)
class Status:
    """A filter verdict: success, or the human reason a node cannot host a task."""

    ok: bool
    reason: str = ""
    # The reason names the node ({node}, {card_type}) or lists its chips ({top}): verdicts are
    # cached per node signature, which many nodes share, and each node's own words are filled
    # in last.
    per_node: bool = False
    # The node can never host the task, whatever is evicted from it (another chip kind or
    # accelerator type): kube-scheduler's FailedAndUnresolvableNodes, Volcano's code 3.
    unresolvable: bool = False

    @staticmethod
    def success() -> Status:
        return _SUCCESS

    @staticmethod
    def unschedulable(reason: str, *, per_node: bool = False, unresolvable: bool = False) -> Status:
        return Status(False, reason, per_node, unresolvable)

    def named(self, node: NodeState, top: str = "") -> Status:
        """This verdict in the words of ``node`` (``top``: its usable chips as the handler
        printed them, for a reason that lists them)."""
        if not self.per_node:
            return self
        reason = self.reason.replace("{node}", node.name).replace("{card_type}", node.card_type)
        return Status(False, reason.replace("{top}", top), unresolvable=self.unresolvable)


_SUCCESS = Status(True)


@dataclass(frozen=True, slots=True)
class Placement:
    task: str
    node: str
    chips: tuple[int, ...]

    @property
    def chip_names(self) -> tuple[str, ...]:
        return tuple(chip_name(c) for c in self.chips)


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer for one job: every NPU task placed, or a reason and nothing placed.

    ``scores`` and ``rejected`` explain the choice for the job's first NPU task: the score
    of every node that passed the filter, and why every other node did not.
    """

    job: str
    feasible: bool
    placements: tuple[Placement, ...] = ()
    reason: str = ""
    scores: Mapping[str, float] = field(default_factory=lambda: _NO_FLOATS)
    rejected: Mapping[str, str] = field(default_factory=lambda: _NO_STRINGS)
