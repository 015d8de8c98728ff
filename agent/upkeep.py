"""The inference chips' upkeep, every period: vNPUs no pod uses are destroyed (dynamic vNPU,
upstream's ``DestroyNotUsedVNPU`` in each polling cycle), and with ``-hotReset=0`` an
unhealthy 310 / 310P chip that no pod uses is reset through the driver (``chipHotReset``,
``vnpu-and-inference.md`` §6). A chip is reset once per unhealthy spell.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import grpc

from agent.allocation.cores import CoreHandshake
from agent.allocation.handshake_rules import held_chips
from agent.pod_cache import PodCache
from chip_drivers.chips import DriverError, NodeChips
from chip_drivers.fake import NpuDriver
from contract.chip_names import ASCEND910, NPU, InvalidInput, parse_chip_name
from contract.pods import PodView
from infra.periodic import Periodic

log = logging.getLogger(__name__)


def to_reset(
    node: NodeChips, pods: Iterable[PodView], kubelet_ids: Iterable[str], done: set[int]
) -> list[int]:
    """Unhealthy inference chips no pod holds (by its record or the kubelet's devices), no
    vNPU is cut from, and not reset already in this spell."""
    if node.kind in (ASCEND910, NPU):  # hot reset is the inference chips' (training: no)
        return []
    used = set(held_chips(pods)) | {v.phy for v in node.vnpus}
    for device in kubelet_ids:
        try:
            used.add(parse_chip_name(device, node.kind))
        except InvalidInput:
            continue
    return [c.id for c in node.chips if not c.healthy and c.id not in used and c.id not in done]


class Upkeep:
    def __init__(
        self,
        driver: NpuDriver,
        cache: PodCache,
        *,
        cores: CoreHandshake | None,
        hot_reset: bool,
        kubelet_devices: Callable[[], Iterable[str]],
        period: float,
        on_loop_error: Callable[[str], None] = lambda loop: None,
    ) -> None:
        self._driver = driver
        self._cache = cache
        self._cores = cores
        self._hot_reset = hot_reset
        self._kubelet_devices = kubelet_devices
        self._reset: set[int] = set()  # reset in this unhealthy spell
        self.resets = 0
        self._loop = Periodic("upkeep", period, self.run_once, lambda: on_loop_error("upkeep"))

    def run_once(self) -> None:
        if self._cores is not None:
            self._cores.destroy_unused()
        if not self._hot_reset or not self._cache.synced:
            return
        node = self._driver.read()
        self._reset &= {c.id for c in node.chips if not c.healthy}
        try:
            kubelet_ids = list(self._kubelet_devices())
        except grpc.RpcError as failed:
            log.warning("no hot reset this round: PodResources unreadable (%s)", failed.code())
            return
        for chip in to_reset(node, self._cache.pods(), kubelet_ids, self._reset):
            try:
                self._driver.reset_chip(chip)
            except DriverError as failed:
                log.warning("hot reset of chip %s failed: %s", chip, failed)
                continue
            log.info("hot reset chip %s (unhealthy, no pod uses it)", chip)
            self._reset.add(chip)
            self.resets += 1

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()
