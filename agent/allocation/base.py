"""The seam between the plugin server and whoever decides which chips a container gets."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Protocol

from chip_drivers.chips import Chip, NodeChips


class FailureReason(Enum):
    """Why an Allocate failed: the label of the failure metric, the log's ``reason`` field
    and the reason of the pod's Event."""

    INVALID_REQUEST = "invalid_request"  # the kubelet's request is malformed
    NO_POD = "no_pod"  # no pending pod of this node carries chips for it
    CHIPS_REFUSED = "chips_refused"  # the pod's chips are missing, unhealthy or held
    # a pending pod of the resource on this node carries no scheduler's choice: the Allocate
    # may be its own, so none is decided (``handshake_rules.unchosen``)
    POD_NOT_SCHEDULED_BY_ASCEND = "pod_not_scheduled_by_ascend"
    API_ERROR = "api_error"  # the API server refused or could not be reached

    @property
    def event_reason(self) -> str:
        return "NPU" + "".join(word.capitalize() for word in self.value.split("_"))


class InvalidRequest(ValueError):
    """A kubelet request the plugin refuses; the message names the offending part."""

    reason = FailureReason.INVALID_REQUEST


class AllocationFailed(RuntimeError):
    """A valid request that cannot be served now; the kubelet fails the pod's admission with
    this message."""

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Allocator(Protocol):
    """Which chips a container gets, and which chips to suggest to the kubelet."""

    def give_chips(self, requested: list[Chip], node: NodeChips) -> list[Chip]:
        """The chips the container asking ``requested`` (the kubelet's IDs) really gets."""
        ...

    def preferred(
        self, node: NodeChips, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]: ...
