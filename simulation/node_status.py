"""What a kubelet writes about its node, for simulated nodes on a real API server.

A kubelet registers its Node (``pkg/kubelet/kubelet_node_status.go``: ``registerWithAPIServer``,
labels ``kubernetes.io/hostname``, ``kubernetes.io/os``, ``kubernetes.io/arch``), reports its
capacity and allocatable (the device plugins' healthy devices among them, from
``pkg/kubelet/cm/devicemanager``), its addresses and a ``Ready`` condition, and renews its Lease in
``kube-node-lease`` every 10 s (``pkg/kubelet/nodelease``), which kube-controller-manager's
node-lifecycle controller reads as the node's heartbeat: without it the node is tainted
``node.kubernetes.io/unreachable`` after the grace period and its pods are evicted.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

log = logging.getLogger(__name__)

LEASE_SECONDS = 40  # the kubelet's default nodeLeaseDurationSeconds
RENEW_EVERY = 10.0  # a quarter of it, as the kubelet renews
# Each write's deadline: without one, a request stalled on a busy machine holds the loop, and
# the node, its Lease not renewed, is tainted unreachable (seen beside three other workers).
REQUEST_SECONDS = 10.0
NODE_RESOURCES = {"cpu": "192", "memory": "1536Gi", "pods": "110"}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_status(devices: Mapping[str, int], address: str) -> dict[str, object]:
    """The status a kubelet reports: its resources with the device plugins' healthy devices,
    its address, and Ready."""
    resources = {**NODE_RESOURCES, **{name: str(count) for name, count in devices.items()}}
    now = _now()
    return {
        "capacity": resources,
        "allocatable": resources,
        "addresses": [
            {"type": "InternalIP", "address": address},
            {"type": "Hostname", "address": address},
        ],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
        "nodeInfo": {
            "architecture": "arm64",
            "operatingSystem": "linux",
            "kubeletVersion": "v1.36.3",
            "containerRuntimeVersion": "containerd://2.1.0",
            "kernelVersion": "5.10.0",
            "osImage": "EulerOS 2.0",
            "kubeProxyVersion": "",
            "machineID": "",
            "systemUUID": "",
            "bootID": "",
        },
    }


@dataclass(frozen=True)
class RegisteredNode:
    name: str
    labels: Mapping[str, str]
    address: str


class NodeRegistration:
    """One node's kubelet side toward the API server: register the Node, report its devices,
    keep its Lease renewed."""

    def __init__(
        self, api: client.ApiClient, node: RegisteredNode, devices: Callable[[], Mapping[str, int]]
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._coordination = client.CoordinationV1Api(api)
        self.name = node.name
        self._labels = {
            "kubernetes.io/hostname": node.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "arm64",
            **node.labels,
        }
        self._address = node.address
        self._devices = devices
        self._reported: dict[str, int] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self) -> None:
        node: Any = {"metadata": {"name": self.name, "labels": self._labels}}
        try:
            self._core.create_node(node, _preload_content=False)
        except client.ApiException as exists:
            if exists.status != 409:
                raise
        self.report()
        self.renew()

    def report(self) -> None:
        """Patch the node's status when its devices changed (and the first time)."""
        devices = dict(self._devices())
        if devices == self._reported:
            return
        self._core.patch_node_status(
            self.name,
            {"status": node_status(devices, self._address)},
            _preload_content=False,
            _request_timeout=REQUEST_SECONDS,
        )
        self._reported = devices

    def renew(self) -> None:
        body: Any = {
            "metadata": {"name": self.name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": _micro_now(),
            },
        }
        try:
            # A merge patch: an update (PUT) of a Lease must name its resourceVersion (422
            # otherwise, so every renewal failed and nodes were tainted unreachable once the
            # grace ran out); the kubelet's own renewal sends the one it last read.
            self._coordination.patch_namespaced_lease(
                self.name,
                "kube-node-lease",
                {"spec": body["spec"]},
                _preload_content=False,
                _request_timeout=REQUEST_SECONDS,
            )
        except client.ApiException as missing:
            if missing.status != 404:
                raise
            self._coordination.create_namespaced_lease(
                "kube-node-lease", body, _preload_content=False, _request_timeout=REQUEST_SECONDS
            )

    def start(self) -> None:
        self.register()
        self._thread = threading.Thread(target=self._loop, name=f"node {self.name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        renewed = time.monotonic()
        while not self._stop.wait(1.0):
            # Any failure (a refusal, a timeout, a dropped connection) is tried again at the
            # next pass, as the kubelet's loops do: the thread ending would end the heartbeat.
            # The Lease first: it is what keeps the node from being tainted.
            try:
                if time.monotonic() - renewed >= RENEW_EVERY:
                    self.renew()
                    renewed = time.monotonic()
                self.report()
            except Exception as failed:
                log.warning("node %s: %s; trying again", self.name, failed)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
