"""The seam between the plugin server and whoever decides which chips a container gets."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from agent.chips import Chip, NodeChips


class InvalidRequest(ValueError):
    """A kubelet request the plugin refuses; the message names the offending part."""


class AllocationFailed(RuntimeError):
    """A valid request that cannot be served now (no pod waiting for it, chips refused, API
    server unreachable); the kubelet fails the pod's admission with this message."""


class Allocator(Protocol):
    """Which chips a container gets, and which chips to suggest to the kubelet."""

    def allocate(self, requested: list[Chip], node: NodeChips) -> list[Chip]: ...

    def preferred(
        self, node: NodeChips, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]: ...
