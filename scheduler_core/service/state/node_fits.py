"""Which nodes each pod's own constraints keep it off (``contract.node_affinity``), kept for
the verbs: every NPU node's labels and taints as the watches report them, and, per distinct
set of constraints, the nodes they rule out, computed once per change of any node's labels or
taints (the filter is on kube-scheduler's hot path: thousands of candidates a call, and the
pods of one job share their constraints).

Not thread-safe: the extender calls it under its state's lock."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from contract.node_affinity import NodeFacts, PodConstraints, misfit

MAX_REMEMBERED = 64  # distinct constraints whose ruled-out nodes are kept
NONE: Mapping[str, str] = MappingProxyType({})


class NodeFits:
    def __init__(self, max_remembered: int = MAX_REMEMBERED) -> None:
        self._facts: dict[str, NodeFacts] = {}
        self._tainted: dict[str, NodeFacts] = {}  # the nodes with a taint that keeps pods off
        self._generation = 0  # bumped when any node's labels or taints change
        self._max = max_remembered
        # constraints → (the generation it was computed at, node → why it is ruled out)
        self._ruled_out: OrderedDict[PodConstraints, tuple[int, Mapping[str, str]]] = OrderedDict()

    def set(self, name: str, facts: NodeFacts | None) -> None:
        """The node's labels and taints now (None: it is gone, or not an NPU node)."""
        if facts == self._facts.get(name):
            return
        self._generation += 1
        self._ruled_out.clear()
        self._tainted.pop(name, None)
        if facts is None:
            self._facts.pop(name, None)
            return
        self._facts[name] = facts
        if facts.taints:
            self._tainted[name] = facts

    def names(self) -> list[str]:
        """Every NPU node's name."""
        return list(self._facts)

    def misfit(self, pod: PodConstraints, node: str) -> str | None:
        """Why the pod may not go to ``node``; "" when it may, None when the node is not
        known (not an NPU node)."""
        facts = self._facts.get(node)
        return None if facts is None else misfit(pod, facts)

    def misfits(self, pod: PodConstraints, names: Iterable[str]) -> dict[str, str]:
        """Those of ``names`` the pod may not go to, with why (unknown nodes are not named:
        the handlers fail them as not NPU nodes)."""
        if pod.selects:
            ruled_out = self._ruled_out_by(pod)
            if not ruled_out:
                return {}
            return {n: ruled_out[n] for n in ruled_out.keys() & names}
        # Only a taint can keep a pod that selects nothing off a node: the few tainted ones.
        tainted = self._tainted
        if not tainted:
            return {}
        found = {n: misfit(pod, tainted[n]) for n in tainted.keys() & names}
        return {n: why for n, why in found.items() if why}

    def _ruled_out_by(self, pod: PodConstraints) -> Mapping[str, str]:
        remembered = self._ruled_out.get(pod)
        if remembered is not None and remembered[0] == self._generation:
            self._ruled_out.move_to_end(pod)
            return remembered[1]
        found = {n: why for n, facts in self._facts.items() if (why := misfit(pod, facts))}
        ruled_out = MappingProxyType(found) if found else NONE
        self._ruled_out[pod] = (self._generation, ruled_out)
        while len(self._ruled_out) > self._max:
            self._ruled_out.popitem(last=False)
        return ruled_out
