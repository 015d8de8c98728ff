"""Which nodes passed this service's filter, per pod UID, lately: ``/bind`` binds a pod only
to one of them, so that a caller cannot name any node it likes."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

# Bounds: kube-scheduler binds a pod within its scheduling cycle of the filter, so only the
# pods in flight matter; these keep a flood of filters (50,000 pods, thousands of candidate
# nodes each) to tens of MiB (a name held is its string of the filter's body and a pointer:
# ~70 bytes).
MAX_PODS = 50_000
MAX_NAMES = 1_000_000


class FilterPasses:
    """The passing nodes of each pod's latest filter, for ``ttl`` seconds; beyond
    ``max_pods`` pods or ``max_names`` names in all, the oldest filters are forgotten first
    (their pods are filtered again by kube-scheduler's next cycle). Not thread-safe: the
    extender calls it under its lock."""

    def __init__(self, ttl: float, max_pods: int = MAX_PODS, max_names: int = MAX_NAMES) -> None:
        self._ttl = ttl
        self._max_pods = max_pods
        self._max_names = max_names
        # The names as a tuple, not a set: recording is then a copy of pointers, inside the
        # filter's time (hashing or interning 5,000 names took 0.2-0.6 ms of every /filter,
        # more than deciding them); the one lookup per bind scans it (~0.1 ms, off the cycle).
        self._passes: OrderedDict[str, tuple[float, tuple[str, ...]]] = OrderedDict()
        self._names = 0

    def __len__(self) -> int:
        return len(self._passes)

    def record(self, uid: str, nodes: Iterable[str], now: float) -> None:
        """The pod ``uid`` passed on ``nodes`` at ``now`` (replacing its earlier filter)."""
        self._forget(uid)
        passing = tuple(nodes)
        if uid and passing:
            self._passes[uid] = (now, passing)
            self._names += len(passing)
        self._evict(now)

    def passed(self, uid: str, node: str, now: float) -> bool:
        """Whether ``node`` passed the filter of pod ``uid`` within ``ttl`` seconds."""
        entry = self._passes.get(uid)
        return entry is not None and now - entry[0] <= self._ttl and node in entry[1]

    def _forget(self, uid: str) -> None:
        entry = self._passes.pop(uid, None)
        if entry is not None:
            self._names -= len(entry[1])

    def _evict(self, now: float) -> None:
        while self._passes:
            uid, (when, _) = next(iter(self._passes.items()))
            full = len(self._passes) > self._max_pods or self._names > self._max_names
            if not full and now - when <= self._ttl:
                return
            self._forget(uid)
