"""Publishes this node's DeviceInfo ConfigMap (``kube-system/mindx-dl-deviceinfo-<node>``):
its content (free = healthy chips no live pod holds, unhealthy, network-unhealthy, faults)
and the publishing loop.

Written when its content changes and at least once per heartbeat (60 s), with the last
written resourceVersion as precondition: an unchanged node costs one write a heartbeat and
no read. A failed write is retried on the next wake-up with a growing delay. Never written
while the pod cache is not synced: an unknown set of held chips could publish a free list
that contradicts a live pod.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import grpc

from agent.allocation.handshake_rules import held_chips, reserved_chips
from agent.faults.escalation import FaultMachine, Observation
from agent.faults.pipeline import FaultPipeline
from agent.faults.table import FaultConfig, default_config
from agent.pod_cache import PodCache
from chip_drivers.chips import NodeChips
from chip_drivers.state import DeviceState
from contract import deviceinfo
from contract.chip_names import InvalidInput, parse_chip_list
from contract.deviceinfo import DeviceInfo
from contract.objects import Obj
from infra.kube.port import Conflict, Forbidden, KubeError, KubeGateway, NotFound

log = logging.getLogger(__name__)


def device_info(
    node: NodeChips,
    held: Iterable[int],
    update_time: int,
    sub_health_codes: frozenset[str] = frozenset(),
    *,
    seen: Observation | None = None,
    recovering: Iterable[int] = (),
) -> DeviceInfo:
    """Free = healthy chips no live pod holds and no vNPU is cut from; a held chip is never
    listed free. Unhealthy lists and fault entries come from the fault pipeline's
    observation ``seen`` (without one: a fresh machine with Huawei's default table)."""
    held = set(held)
    if seen is None:
        defaults = default_config()
        config = FaultConfig(
            defaults.table.with_sub_health(sub_health_codes), defaults.customization
        )
        seen = FaultMachine(config).observe(node, held, update_time * 1000)
    taken = held | {v.phy for v in node.vnpus}
    return DeviceInfo(
        free=frozenset(
            c.id
            for c in node.chips
            if c.id not in seen.unhealthy and c.healthy and c.id not in taken
        ),
        unhealthy=seen.unhealthy,
        network_unhealthy=seen.network_unhealthy,
        faults=seen.faults,
        update_time=update_time,
        super_pod_id=node.super_pod_id,
        server_index=node.server_index,
        rack_id=node.rack_id,
        kind=node.kind,
        recovering=frozenset(recovering),
    )


def configmap(
    node_name: str, info: DeviceInfo, separated: Iterable[int] = (), reasons: str | None = None
) -> dict[str, Any]:
    """The ConfigMap object the agent writes (label ``mx-consumer-cim: "true"`` for MindCluster
    Volcano, data as Huawei's device plugin writes it)."""
    label, value = deviceinfo.CONSUMER_LABEL
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": deviceinfo.configmap_name(node_name),
            "namespace": deviceinfo.NAMESPACE,
            "labels": {label: value},
        },
        "data": deviceinfo.encode(info, separated, reasons),
    }


MAX_BACKOFF = 30.0
HEARTBEAT = 60.0  # seconds: well inside the 300 s after which schedulers call a node stale
MAX_CONFLICTS = 3


class DeviceInfoPublisher:
    def __init__(
        self,
        gateway: KubeGateway,
        node: str,
        *,
        state: DeviceState,
        cache: PodCache,
        period: float,
        heartbeat: float = HEARTBEAT,
        sub_health_codes: frozenset[str] = frozenset(),
        faults: FaultPipeline | None = None,
        recovering: Callable[[], Iterable[int]] = lambda: (),
        clock: Callable[[], float] = time.time,
        extra_held: Callable[[], Iterable[int]] | None = None,
        wake: threading.Event | None = None,
        on_api_error: Callable[[], None] = lambda: None,
        on_loop_error: Callable[[str], None] = lambda loop: None,
    ) -> None:
        self._gateway = gateway
        self._node = node
        self._state = state
        self._cache = cache
        self._period = period  # how often to look again (the kubelet's records are not evented)
        self._heartbeat = heartbeat  # written at least this often, changed or not
        # Levels, escalation and fault Events; by default Huawei's table (plus the agent's
        # sub-health codes) without the override ConfigMap's Events.
        self.faults = faults or FaultPipeline(gateway, sub_health_codes=sub_health_codes)
        self._recovering = recovering  # chips being hot-reset (the reset manager's)
        self._restored = False  # the separated chips and reasons taken back from the ConfigMap
        self._clock = clock
        # Chips held by pods that carry no record yet (the kubelet's PodResources), when the
        # kubelet's choice is the chip; raises when that source cannot be read.
        self._extra_held = extra_held
        self._last: tuple[dict[str, str], frozenset[int], str] | None = None
        self._last_time = 0.0
        # The ConfigMap as last written or read: its resourceVersion is the next write's
        # precondition, so an unchanged node costs no read (a Conflict re-reads it).
        self._current: Obj | None = None
        self._known = False
        # Set by whoever sees a change (chips, pods): publish soon.
        self._wake = wake or threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.writes = 0
        self._on_api_error = on_api_error
        self._on_loop_error = on_loop_error  # an unexpected failure, survived and counted

    def _separated(self, current: dict[str, str]) -> set[int]:
        text = current.get(deviceinfo.SEPARATED_KEY, "")
        try:
            return set(parse_chip_list(text, kind=self._state.node.kind))
        except InvalidInput as bad:
            log.warning("ignoring a malformed %s: %s", deviceinfo.SEPARATED_KEY, bad)
            return set()

    def publish_once(self) -> bool:
        """Write the ConfigMap if its lists changed or the heartbeat is due; True when
        written. Someone else's write in between (a Conflict) is read and decided again."""
        if not self._cache.synced:
            return False
        for _ in range(MAX_CONFLICTS):
            if not self._known:
                self._read()
            try:
                return self._write_if_due()
            except Conflict:
                self._known = False  # an admin's ManuallySeparateNPU, another writer: read it
        raise Conflict(f"DeviceInfo of {self._node}: {MAX_CONFLICTS} conflicts in a row")

    def _read(self) -> None:
        name = deviceinfo.configmap_name(self._node)
        try:
            # Not a get: the agent's Role gets only ConfigMaps it can name, and this one's
            # name is its node's (agent-rbac.yaml); its policy pins the patch to its own.
            # Under Huawei's own DaemonSet and ClusterRole (get, no patch) a get does it.
            try:
                self._current = self._gateway.read_configmap_by_patch(deviceinfo.NAMESPACE, name)
            except Forbidden:
                self._current = self._gateway.get_configmap(deviceinfo.NAMESPACE, name)
        except NotFound:
            self._current = None
        self._known = True

    def _write_if_due(self) -> bool:
        data = dict((self._current or {}).get("data") or {})
        listed = self._separated(data)
        pods = self._cache.pods()
        held = set(held_chips(pods))
        if self._extra_held is not None:
            try:
                held |= set(self._extra_held())
            except grpc.RpcError as failed:
                log.warning(
                    "not publishing: the kubelet's PodResources are unreadable (%s)", failed.code()
                )
                return False
        now = self._clock()
        node = self._state.node
        machine = self.faults.machine
        if not self._restored:  # a restarted agent keeps upstream's escalations
            reasons_text = data.get(deviceinfo.REASON_KEY, "")
            machine.restore(listed, reasons_text, node.kind, int(now * 1000))
            self._restored = True
        # Before the poll: an admin's edits of the list count in its levels; after it: a chip
        # this poll escalated or released is written (or left out) at once, as upstream's
        # DeleteManuallyFaultInfo and its escalation change the list of the same write.
        machine.separated(listed, int(now * 1000))
        seen = self.faults.observe(node, held, now)
        separated = machine.separated(listed, int(now * 1000))
        taken = held | reserved_chips(pods) | separated
        info = device_info(node, taken, int(now), seen=seen, recovering=self._recovering())
        reasons = machine.reasons_text(node.kind)
        lists = (info.device_list(), separated, reasons)
        if lists == self._last and now - self._last_time < self._heartbeat:
            return False
        body = configmap(self._node, info, separated, reasons)
        body["data"] = {**data, **body["data"]}  # keys written by others are kept
        try:
            if self._current is None:
                self._current = self._gateway.create_configmap(body)
            else:
                version = self._current["metadata"].get("resourceVersion", "")
                body["metadata"]["resourceVersion"] = version
                self._current = self._gateway.update_configmap(body)
        except NotFound:  # deleted meanwhile
            self._known = False
            raise Conflict("the DeviceInfo ConfigMap was deleted meanwhile") from None
        self._last, self._last_time = lists, now
        self.writes += 1
        self.faults.written(node.kind)
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="deviceinfo", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        delay = 0.0
        while not self._stop.is_set():
            try:
                self.publish_once()
                delay = 0.0
            except KubeError as failed:
                self._on_api_error()
                delay = min(max(delay * 2, 0.5), MAX_BACKOFF)
                log.warning("DeviceInfo not written (%s); retrying in %.1f s", failed, delay)
            except Exception:
                self._on_loop_error("deviceinfo")
                delay = min(max(delay * 2, 0.5), MAX_BACKOFF)
                log.exception("DeviceInfo not written; retrying in %.1f s", delay)
            self._wake.wait(delay or self._period)
            self._wake.clear()
