"""The session ledger: chips that the published free lists do not know are gone yet.

Chips chosen for a task in this session, so the next pod of the round is not offered them;
releasing a task returns its chips. (Chips of terminating pods need no entry: the cluster
view counts every pod that is not finished as holding its chips.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from contract.chip_names import InvalidInput


@dataclass(frozen=True, slots=True)
class Holding:
    job: str
    task: str
    node: str
    chips: tuple[int, ...]


@dataclass
class SessionLedger:
    _holdings: dict[tuple[str, str], Holding] = field(default_factory=dict)
    _tasks_of_job: dict[str, set[str]] = field(default_factory=dict)
    _held: dict[str, set[int]] = field(default_factory=dict)

    def take(self, job: str, task: str, node: str, chips: Iterable[int]) -> Holding:
        chosen = tuple(chips)
        key = (job, task)
        if key in self._holdings:
            raise InvalidInput(
                f"task {job}/{task} already holds chips on {self._holdings[key].node}"
            )
        held = self._held.setdefault(node, set())
        clash = held.intersection(chosen)
        if clash:
            raise InvalidInput(f"node {node}: chips {sorted(clash)} are already held this session")
        held.update(chosen)
        holding = Holding(job, task, node, chosen)
        self._holdings[key] = holding
        self._tasks_of_job.setdefault(job, set()).add(task)
        return holding

    def release_task(self, job: str, task: str) -> Holding | None:
        holding = self._holdings.pop((job, task), None)
        if holding is not None:
            self._held[holding.node].difference_update(holding.chips)
            tasks = self._tasks_of_job[job]
            tasks.discard(task)
            if not tasks:
                del self._tasks_of_job[job]
        return holding

    def release_job(self, job: str) -> list[Holding]:
        tasks = sorted(self._tasks_of_job.get(job, ()))
        return [h for h in (self.release_task(job, t) for t in tasks) if h is not None]

    def unavailable(self, node: str) -> frozenset[int]:
        """Chips of ``node`` that must not be offered, whatever its free list says."""
        return frozenset(self._held.get(node, ()))

    def holds(self, job: str) -> bool:
        return job in self._tasks_of_job
