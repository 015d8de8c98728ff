"""The chips' upkeep, every period: vNPUs no pod uses are destroyed (dynamic vNPU, upstream's
``DestroyNotUsedVNPU`` in each polling cycle), and with ``-hotReset`` 0 or 2 faulty chips are
hot-reset by reset group once the group is idle (``agent/hot_reset.py`` decides; Ascend/
mind-cluster ``component/ascend-device-plugin/pkg/server/hot_reset_manager.go``).

A reset runs on a thread of its own (upstream: ``go executeReset``) while the cycle goes on;
its group is listed by ``recovering()`` (the DeviceInfo's ``<res>-Recovering``) until it ends.
Chips needing external ops are written to the node annotation ``ResetInfo``; each reset is
recorded as Events on the Node (HotResetStart, then HotResetComplete or HotResetFailed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping

import grpc

from agent import hot_reset
from agent.allocation.cores import CoreHandshake
from agent.allocation.handshake_rules import held_chips, reserved_chips
from agent.pod_cache import PodCache
from chip_drivers.chips import DriverError, NodeChips
from chip_drivers.fake import NpuDriver
from contract.chip_names import InvalidInput, parse_chip_name
from contract.pods import PodView
from infra.events import EventRecorder, ObjectRef
from infra.kube.port import KubeError, KubeGateway
from infra.periodic import Periodic

log = logging.getLogger(__name__)


def held(node: NodeChips, pods: Iterable[PodView], kubelet_ids: Iterable[str]) -> set[int]:
    """Chips a pod holds by its record or the kubelet's devices, the scheduler gave to a pod
    not admitted yet, or a vNPU is cut from."""
    pods = list(pods)
    used = set(held_chips(pods)) | reserved_chips(pods) | {v.phy for v in node.vnpus}
    for device in kubelet_ids:
        try:
            used.add(parse_chip_name(device, node.kind))
        except InvalidInput:
            continue
    return used


class HotReset:
    """Resets faulty chips by group (``-hotReset`` 0 or 2). ``levels`` gives each chip's fault
    level (the fault pipeline's); ``on_change`` is called when ``recovering()`` changes."""

    def __init__(
        self,
        driver: NpuDriver,
        cache: PodCache,
        *,
        levels: Callable[[], Mapping[int, str]],
        kubelet_devices: Callable[[], Iterable[str]],
        gateway: KubeGateway,
        node_name: str,
        third_party_scan_delay: float = 300.0,
        on_change: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        idle_seconds: float = hot_reset.IDLE_SECONDS,  # shorter only in tests
        events: EventRecorder | None = None,
    ) -> None:
        self._driver = driver
        self._cache = cache
        self._levels = levels
        self._kubelet_devices = kubelet_devices
        self._gateway = gateway
        self._node_name = node_name
        self._delay = third_party_scan_delay
        self._on_change = on_change
        self._clock = clock
        self._idle = idle_seconds
        self._events = events
        self._lock = threading.Lock()
        self._book = hot_reset.Book()
        self._written: str | None = None  # the ResetInfo last written
        self._threads: list[threading.Thread] = []
        self.resets = 0  # finished resets, successful or not

    def recovering(self) -> frozenset[int]:
        """The chips of every group being reset now."""
        with self._lock:
            return self._book.resetting

    def run_once(self) -> None:
        if not self._cache.synced:
            return
        node = self._driver.read()
        try:
            kubelet_ids = list(self._kubelet_devices())
            busy = held(node, self._cache.pods(), kubelet_ids)
            busy |= {c for c, pids in self._driver.processes().items() if pids}
        except grpc.RpcError as failed:
            log.warning("no hot reset this round: PodResources unreadable (%s)", failed.code())
            return
        except DriverError as failed:
            log.warning("no hot reset this round: the chips' processes are unknown (%s)", failed)
            return
        cycle = hot_reset.Cycle(
            node, self._levels(), frozenset(busy), self._clock(), idle_seconds=self._idle
        )
        with self._lock:
            self._book, started = hot_reset.decide(self._book, cycle)
            tokens = {r.fault: self._book.tokens(r.fault, cycle.now) for r in started}
        for reset in started:
            log.info("hot reset of chip %s with its group %s", reset.fault, sorted(reset.group))
            self._event(
                node,
                "Warning",
                "HotResetStart",
                f"hot reset start, nodeName:{self._node_name}, "
                f"ringDevs:{_logic_ids(node, reset.group)}, "
                f"faultDev:{_logic_ids(node, {reset.fault})}, tokensLeft:{tokens[reset.fault]}",
            )
            thread = threading.Thread(
                target=self._reset, args=(node, reset), name=f"hot-reset-{reset.fault}"
            )
            self._threads.append(thread)
            thread.start()
        if started:
            self._on_change()
        self._write_reset_info(node)

    def _reset(self, node: NodeChips, reset: hot_reset.Reset) -> None:
        try:
            self._driver.reset_chips(reset.fault, reset.group)
            ok = True
        except DriverError as failed:
            log.warning("hot reset of chip %s failed: %s", reset.fault, failed)
            ok = False
            self._event(
                node,
                "Warning",
                "HotResetFailed",
                f"hot reset failed, nodeName:{self._node_name}, "
                f"devices:{_logic_ids(node, reset.group)}, err:{failed}",
            )
        else:
            self._event(
                node,
                "Normal",
                "HotResetComplete",
                f"hot reset complete, nodeName:{self._node_name}, "
                f"devices:{_logic_ids(node, reset.group)}",
            )
        with self._lock:
            self._book = hot_reset.finished(
                self._book, reset, ok, self._clock(), a3=node.die_size > 0, delay=self._delay
            )
            self.resets += 1
        self._on_change()
        self._write_reset_info(node)

    def _event(self, node: NodeChips, kind: str, reason: str, message: str) -> None:
        """The Events of upstream's built-in reset plugin, on the Node (Ascend/mind-cluster
        component/ascend-device-plugin pkg/plugin/builtin/reset_record_plugin.go)."""
        if self._events is not None:
            about = ObjectRef("Node", "", self._node_name)
            self._events.record(about, kind, reason, message, action=reason)

    def _write_reset_info(self, node: NodeChips) -> None:
        with self._lock:
            text = hot_reset.reset_info(node, self._book.third_party, self._book.manual)
            if text == self._written:
                return
            self._written = text
        try:
            self._gateway.patch_node_annotations(
                self._node_name, {hot_reset.RESET_INFO_ANNOTATION: text}
            )
        except KubeError as failed:
            log.warning("node %s: ResetInfo not written (%s)", self._node_name, failed)
            with self._lock:
                self._written = None  # try again next round

    def restore(self) -> None:
        """Chips a previous agent listed in ResetInfo stay listed until healthy (upstream
        InitResetInfoMgr reads the annotation at start)."""
        try:
            node = self._gateway.get_node(self._node_name)
        except KubeError as failed:
            log.warning("node %s: ResetInfo not read (%s)", self._node_name, failed)
            return
        text = (node.get("metadata", {}).get("annotations") or {}).get(
            hot_reset.RESET_INFO_ANNOTATION
        )
        if not text:
            return
        try:
            third, manual = hot_reset.parse_reset_info(text)
        except ValueError as bad:
            log.warning("node %s: ResetInfo %r ignored (%s)", self._node_name, text[:200], bad)
            return
        with self._lock:
            scan = self._clock() + self._delay
            self._book = hot_reset.Book(
                third_party=dict.fromkeys(third, scan), manual=frozenset(manual)
            )
            self._written = text

    def join(self, timeout: float) -> None:
        """Wait for the resets under way (the agent stops)."""
        for thread in self._threads:
            thread.join(timeout)


def _logic_ids(node: NodeChips, chips: Iterable[int]) -> str:
    """The chips' logic ids, comma-joined, as upstream's Events list them."""
    by_id = {c.id: c.logic_id for c in node.chips}
    return ",".join(str(by_id.get(c, c)) for c in sorted(chips))


class Upkeep:
    def __init__(
        self,
        cores: CoreHandshake | None,
        reset: HotReset | None,
        *,
        period: float,
        on_loop_error: Callable[[str], None] = lambda loop: None,
    ) -> None:
        self._cores = cores
        self.reset = reset
        self._loop = Periodic("upkeep", period, self.run_once, lambda: on_loop_error("upkeep"))

    def run_once(self) -> None:
        if self._cores is not None:
            self._cores.destroy_unused()
        if self.reset is not None:
            self.reset.run_once()

    def start(self) -> None:
        if self.reset is not None:
            self.reset.restore()
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
