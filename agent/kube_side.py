"""The agent's Kubernetes side on one node: pod cache, handshake allocator, DeviceInfo."""

from __future__ import annotations

import logging
from pathlib import Path

from agent.annotation_allocator import AnnotationAllocator
from agent.chips import NodeChips
from agent.plugin import DeviceState
from agent.pod_cache import PodCache
from agent.publisher import DeviceInfoPublisher
from agent.repair import RepairLoop, kubelet_devices
from scheduler_core.kube.port import KubeError, KubeGateway, node_address

log = logging.getLogger(__name__)

SERVER_TYPE_LABEL = "servertype"


class KubeSide:
    def __init__(self, gateway: KubeGateway, node: str, period: float) -> None:
        self.gateway = gateway
        self.node = node
        self.period = period
        self.cache = PodCache(gateway, node)
        self.publisher: DeviceInfoPublisher | None = None
        self.repair: RepairLoop | None = None

    def server_id(self) -> str:
        """The node's InternalIP for the rank table ("" when the API server cannot tell)."""
        try:
            return node_address(self.gateway.get_node(self.node))
        except KubeError as failed:
            log.warning("node %s: no InternalIP for the rank table (%s)", self.node, failed)
            return ""

    def label_node(self, chips: NodeChips) -> bool:
        """Set ``servertype`` when the node lacks it and the driver knows it (never overwrite
        an admin's value). True when a label was written."""
        if chips.server_type is None:
            return False
        try:
            labels = self.gateway.get_node(self.node).get("metadata", {}).get("labels") or {}
            if SERVER_TYPE_LABEL in labels:
                return False
            self.gateway.patch_node_labels(self.node, {SERVER_TYPE_LABEL: chips.server_type})
        except KubeError as failed:
            log.warning("node %s: label %s not set (%s)", self.node, SERVER_TYPE_LABEL, failed)
            return False
        return True

    def allocator(self) -> AnnotationAllocator:
        return AnnotationAllocator(self.gateway, self.cache, self.server_id())

    def start_cache(self) -> None:
        self.cache.start()

    def start_repair(self, state: DeviceState, socket: Path) -> RepairLoop:
        """Write missing chip records from the kubelet's PodResources every period."""
        self.repair = RepairLoop(
            self.gateway,
            self.cache,
            node=lambda: state.node,
            server_id=self.server_id(),
            socket=socket,
            period=self.period,
        )
        self.repair.start()
        return self.repair

    def start_publisher(
        self, state: DeviceState, pod_resources: Path | None = None
    ) -> DeviceInfoPublisher:
        """``pod_resources``: also count the chips the kubelet gave (the kubelet's choice mode)."""
        extra = None
        if pod_resources is not None:
            socket = pod_resources

            def extra() -> set[int]:
                by_device = state.node.by_device_id()
                return {
                    by_device[d].id
                    for ids in kubelet_devices(socket).values()
                    for d in ids
                    if d in by_device
                }

        publisher = DeviceInfoPublisher(
            self.gateway,
            self.node,
            state=state,
            cache=self.cache,
            period=self.period,
            extra_held=extra,
        )
        self.cache.subscribe(publisher.nudge)
        state.subscribe(publisher.nudge)
        publisher.start()
        self.publisher = publisher
        return publisher

    def stop(self) -> None:
        if self.repair is not None:
            self.repair.stop()
        if self.publisher is not None:
            self.publisher.stop()
        self.cache.stop()
