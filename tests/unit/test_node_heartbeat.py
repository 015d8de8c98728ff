"""The simulated kubelet's heartbeat outlives a failed write: a timeout or a dropped connection
once ended its thread, the node's Lease was no longer renewed and the node-lifecycle
controller tainted it unreachable (seen on the real control plane beside three other test
workers)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import urllib3
from kubernetes import client

from simulation import node_status
from simulation.node_status import NodeRegistration, RegisteredNode


class FlakyApi:
    """The two API groups the registration writes through: the first Lease renewal after
    registering fails as a stalled connection does, every write carries a deadline."""

    def __init__(self) -> None:
        self.renewals = 0
        self.failed = 0
        self.deadlines: list[float] = []
        self.renewed = threading.Event()

    def _deadline(self, kwargs: dict[str, Any]) -> None:
        self.deadlines.append(kwargs["_request_timeout"])

    def create_node(self, body: Any, **kwargs: Any) -> None:
        pass

    def patch_node_status(self, name: str, body: Any, **kwargs: Any) -> None:
        self._deadline(kwargs)

    def patch_namespaced_lease(self, name: str, namespace: str, body: Any, **kwargs: Any) -> None:
        self._deadline(kwargs)
        self.renewals += 1
        if self.renewals == 2:  # the first renewal of the loop; the first is registering's
            self.failed += 1
            raise urllib3.exceptions.ReadTimeoutError(None, "/leases", "read timed out")  # type: ignore[arg-type]
        if self.renewals >= 3:
            self.renewed.set()


def test_a_failed_renewal_is_tried_again_and_every_write_has_a_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = FlakyApi()
    monkeypatch.setattr(node_status, "RENEW_EVERY", 0.0)
    monkeypatch.setattr(client, "CoreV1Api", lambda _: api)
    monkeypatch.setattr(client, "CoordinationV1Api", lambda _: api)
    registration = NodeRegistration(
        client.ApiClient(), RegisteredNode("node-0", {}, "10.0.0.1"), lambda: {"x/y": 1}
    )
    registration.start()
    try:
        assert api.renewed.wait(30), "the heartbeat ended with the failed renewal"
    finally:
        registration.stop()
    assert api.failed == 1
    assert api.deadlines and all(d == node_status.REQUEST_SECONDS for d in api.deadlines)
