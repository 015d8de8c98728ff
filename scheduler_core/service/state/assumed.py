"""Assumed binds: chips given to pods that the cluster view does not show yet.

A bind is assumed from the moment its chips are chosen (before the API call, so a change
seen in between cannot offer them again) until the view shows the pod holding them, the pod
is gone, or for at most ``ttl`` seconds. Each names the session's ledger entry that holds
its chips, to be released then.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.pods import PodView


@dataclass(frozen=True, slots=True)
class Assumed:
    uid: str  # the pod they were given to, not a later pod of the same name
    node: str
    chips: tuple[int, ...]
    since: float
    job: str  # the ledger entry holding the chips: (job, task)
    task: str


class AssumedBinds:
    def __init__(self, ttl: float) -> None:
        self._ttl = ttl
        self._binds: dict[str, Assumed] = {}  # pod key → its chips

    def add(self, pod: str, bind: Assumed) -> None:
        self._binds[pod] = bind

    def given(self, pod: str) -> Assumed | None:
        return self._binds.get(pod)

    def drop(self, pod: str) -> Assumed | None:
        return self._binds.pop(pod, None)

    def settled(self, key: str, pod: PodView | None) -> Assumed | None:
        """Forget the bind of ``key`` if the view now shows it (the pod holds its chips on
        its node) or shows its pod gone (None, or another pod of that name)."""
        bind = self._binds.get(key)
        if bind is None:
            return None
        ours = pod is not None and pod.uid == bind.uid
        if (
            ours
            and pod is not None
            and not (pod.node == bind.node and set(bind.chips) <= set(pod.chips))
        ):
            return None  # not yet: still pending, or not yet showing its chips
        return self._binds.pop(key)

    def expired(self, now: float) -> list[Assumed]:
        """Forget the binds that waited longer than the ttl."""
        old = [pod for pod, bind in self._binds.items() if now - bind.since > self._ttl]
        return [self._binds.pop(pod) for pod in old]
