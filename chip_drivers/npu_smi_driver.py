"""The real driver: chips from ``npu-smi``, polled for health changes, and its vNPUs.

Apart from ``chip_drivers.fake`` (the port and the fake harness) so that an agent on the fake
driver loads none of npu-smi's parsers.
"""

from __future__ import annotations

import dataclasses
import logging

from chip_drivers.chips import DriverError, NodeChips, VirtualDevice
from chip_drivers.fake import OnChange
from chip_drivers.npu_smi import Runner, read_chips, run_npu_smi
from chip_drivers.npu_smi_vnpu import NpuSmiVnpus
from infra.periodic import Periodic

log = logging.getLogger(__name__)


class NpuSmiDriver:
    """Chips from npu-smi, polled every ``period`` seconds for health changes."""

    def __init__(
        self, run: Runner = run_npu_smi, period: float = 5.0, product: str | None = None
    ) -> None:
        self._run = run
        self._period = period
        self._product = product
        self._poll: Periodic | None = None
        self._last: NodeChips | None = None
        self.vnpu = NpuSmiVnpus(run)

    def read(self) -> NodeChips:
        chips = read_chips(self._run)
        if self._product is not None:
            chips = dataclasses.replace(chips, product=self._product)
        if chips.resource == "Ascend310P":
            chips = self.vnpu.with_vnpus(chips)
        self._last = chips
        return chips

    def create_vnpu(self, chip: int, template: str) -> VirtualDevice:
        return self.vnpu.create(self._node(), chip, template)

    def destroy_vnpu(self, vnpu: VirtualDevice) -> None:
        self.vnpu.destroy(self._node(), vnpu)

    def list_vnpus(self) -> tuple[VirtualDevice, ...]:
        return self.vnpu.list_all(self._node())

    def reset_chip(self, chip: int) -> None:
        self.vnpu.reset(self._node(), chip)

    def _node(self) -> NodeChips:
        return self._last if self._last is not None else self.read()

    def watch(self, on_change: OnChange) -> None:
        def poll() -> None:
            before = self._last
            try:
                state = self.read()
            except DriverError as bad:
                log.warning("npu-smi poll failed, keeping the last state: %s", bad)
                return
            if state != before:
                on_change(state)

        self._poll = Periodic("npu-smi-poll", self._period, poll, join_timeout=self._period + 1)
        self._poll.start()

    def close(self) -> None:
        if self._poll is not None:
            self._poll.stop()
