"""The agent's Kubernetes side on one node: pod cache, handshake allocator, DeviceInfo."""

from __future__ import annotations

import logging

from agent.annotation_allocator import AnnotationAllocator
from agent.chips import NodeChips
from agent.kube import KubeError, KubeGateway, node_address
from agent.plugin import DeviceState
from agent.pod_cache import PodCache
from agent.publisher import DeviceInfoPublisher

log = logging.getLogger(__name__)

SERVER_TYPE_LABEL = "servertype"


class KubeSide:
    def __init__(self, gateway: KubeGateway, node: str, period: float) -> None:
        self.gateway = gateway
        self.node = node
        self.period = period
        self.cache = PodCache(gateway, node)
        self.publisher: DeviceInfoPublisher | None = None

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

    def start_publisher(self, state: DeviceState) -> DeviceInfoPublisher:
        publisher = DeviceInfoPublisher(
            self.gateway, self.node, state=state, cache=self.cache, period=self.period
        )
        self.cache.subscribe(publisher.nudge)
        publisher.start()
        self.publisher = publisher
        return publisher

    def stop(self) -> None:
        if self.publisher is not None:
            self.publisher.stop()
        self.cache.stop()
