"""The node's current chips, shared by the agent's device plugin and the DRA driver: each
daemon feeds it from its driver's change callback and its servers read it (one resource
manager under both, as NVIDIA's k8s-device-plugin and k8s-dra-driver-gpu share theirs)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from chip_drivers.chips import NodeChips


class DeviceState:
    """The current chips, and a condition that wakes every ListAndWatch on a change."""

    def __init__(self, node: NodeChips, on_change: Sequence[Callable[[], None]] = ()) -> None:
        self._node = node
        self._version = 0
        self._changed = threading.Condition()
        # Called after every change of the chips (e.g. to republish DeviceInfo).
        self._listeners = tuple(on_change)

    @property
    def node(self) -> NodeChips:
        with self._changed:
            return self._node

    def update(self, node: NodeChips) -> None:
        with self._changed:
            if node == self._node:
                return
            self._node = node
            self._version += 1
            self._changed.notify_all()
        for listener in self._listeners:
            listener()

    def wait_change(self, seen: int, timeout: float) -> tuple[int, NodeChips]:
        with self._changed:
            self._changed.wait_for(lambda: self._version != seen, timeout=timeout)
            return self._version, self._node

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
