"""Repairs pods that miss the chip records, from the kubelet's PodResources.

Allocate writes ``AscendReal`` / ``kltDev`` / the rank table in the same patch that consumes
the pod, so our own pods never miss them. Pods that do: pods consumed by another device
plugin (its records come later), and every pod when the kubelet's choice is the chip
(``--kube`` without ``--volcano-type``: Allocate cannot know the pod). The kubelet's
PodResources API says which device IDs each pod holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

from agent.allocation.handshake_rules import pod_rank_table
from agent.pod_cache import PodCache
from chip_drivers.chips import NodeChips
from contract.annotations import (
    KUBELET_ANNOTATION,
    REAL_ANNOTATION,
)
from contract.chip_names import RESOURCE_NAME, format_chip_list
from contract.pods import PodView
from deviceplugin_api.podresources.v1 import api_pb2 as pr
from deviceplugin_api.podresources.v1 import api_pb2_grpc as pr_grpc
from infra.kube.port import Conflict, KubeError, KubeGateway
from infra.periodic import Periodic

log = logging.getLogger(__name__)

POD_RESOURCES_SOCKET = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
MAX_MESSAGE = 16 * 1024 * 1024
TIMEOUT = 2.0


@dataclass(frozen=True, slots=True)
class Repair:
    pod: PodView
    annotations: dict[str, str]


def kubelet_devices(socket: Path, resource: str = RESOURCE_NAME) -> dict[str, list[str]]:
    """``namespace/name`` → the kubelet's device IDs of ``resource`` (PodResources List)."""
    options = [("grpc.max_receive_message_length", MAX_MESSAGE)]
    with grpc.insecure_channel(f"unix://{socket}", options=options) as channel:
        answer = pr_grpc.PodResourcesListerStub(channel).List(
            pr.ListPodResourcesRequest(), timeout=TIMEOUT
        )
    held: dict[str, list[str]] = {}
    for pod in answer.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if devices.resource_name == resource:
                    held.setdefault(f"{pod.namespace}/{pod.name}", []).extend(devices.device_ids)
    return held


def repairs(
    pods: Sequence[PodView],
    devices: Mapping[str, list[str]],
    node: NodeChips,
    host_ip: str,
) -> list[Repair]:
    """The records to write on live pods that hold devices but have no ``AscendReal``."""
    by_device = node.by_device_id()
    kind = node.kind
    found = []
    for pod in pods:
        kubelet_ids = devices.get(pod.key)
        if not pod.live or REAL_ANNOTATION in pod.annotations or not kubelet_ids:
            continue
        if kind.resource in pod.annotations:
            if not pod.consumed:
                continue  # still waiting for its Allocate: not ours to record yet
            bad = pod.malformed.get(kind.resource)
            if bad is not None:
                log.warning("cannot repair %s: %s: %s", pod.key, kind.resource, bad)
                continue
            real = pod.given
        else:
            real = tuple(by_device[d].id for d in kubelet_ids if d in by_device)
        chips = [c for c in node.chips if c.id in set(real)]
        written = {
            REAL_ANNOTATION: format_chip_list(real, kind),
            KUBELET_ANNOTATION: ",".join(kubelet_ids),
        }
        found.append(Repair(pod, written | pod_rank_table(pod, chips, host_ip, node)))
    return found


class RepairLoop:
    """Every period: read PodResources, write the missing records (with a precondition)."""

    def __init__(
        self,
        gateway: KubeGateway,
        cache: PodCache,
        *,
        node: Callable[[], NodeChips],
        host_ip: Callable[[], str],
        socket: Path = POD_RESOURCES_SOCKET,
        period: float = 5.0,
        on_loop_error: Callable[[str], None] = lambda loop: None,
    ) -> None:
        self._gateway = gateway
        self._cache = cache
        self._node = node
        self._host_ip = host_ip
        self._socket = socket
        self._loop = Periodic(
            "repair",
            period,
            self.run_once,
            lambda: on_loop_error("repair"),  # an unexpected failure, survived and counted
            join_timeout=TIMEOUT + 1,
        )

    def run_once(self) -> int:
        if not self._cache.synced:
            return 0
        try:
            devices = kubelet_devices(self._socket, self._node().kind.resource)
        except grpc.RpcError as failed:
            log.warning("PodResources unavailable (%s): no repairs this round", failed.code())
            return 0
        done = 0
        for repair in repairs(self._cache.pods(), devices, self._node(), self._host_ip()):
            try:
                updated = self._gateway.patch_pod_annotations(
                    repair.pod.namespace,
                    repair.pod.name,
                    repair.annotations,
                    repair.pod.resource_version,
                )
            except Conflict:
                continue  # changed meanwhile: the next round sees the new version
            except KubeError as failed:
                log.warning("repair of %s failed: %s", repair.pod.key, failed)
                return done
            self._cache.apply(updated)
            done += 1
        return done

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
