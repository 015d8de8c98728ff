"""Assumed binds: chips given to pods that the cluster view does not show yet.

A bind is assumed from the moment its chips are chosen (before the API call, so a refresh in
between cannot offer them again) until a view shows the pod holding them, or for at most
``ttl`` seconds. Each new view's session holds them again.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler_core.engine.session import Session


@dataclass(frozen=True, slots=True)
class Assumed:
    uid: str  # the pod they were given to, not a later pod of the same name
    node: str
    chips: tuple[int, ...]
    since: float


class AssumedBinds:
    def __init__(self, ttl: float) -> None:
        self._ttl = ttl
        self._binds: dict[str, Assumed] = {}  # pod key → its chips

    def add(self, pod: str, uid: str, node: str, chips: tuple[int, ...], now: float) -> None:
        self._binds[pod] = Assumed(uid, node, chips, now)

    def given(self, pod: str) -> Assumed | None:
        return self._binds.get(pod)

    def drop(self, pod: str) -> None:
        self._binds.pop(pod, None)

    def hold_in(self, session: Session, now: float) -> None:
        """Hold every assumed bind in a new view's session; forget those the view shows (its
        chips are no longer usable there) or that waited longer than the ttl."""
        for pod, bind in list(self._binds.items()):
            if now - bind.since > self._ttl or not session.take(pod, "pod", bind.node, bind.chips):
                del self._binds[pod]
