"""The real driver: chips from ``npu-smi``, polled for health changes, and its vNPUs.

Apart from ``chip_drivers.fake`` (the port and the fake harness) so that an agent on the fake
driver loads none of npu-smi's parsers.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping

from chip_drivers.chips import DriverError, NodeChips, VirtualDevice
from chip_drivers.fake import OnChange
from chip_drivers.npu_smi import (
    NpuSmiError,
    Runner,
    parse_board_id,
    parse_processes,
    read_chips,
    run_npu_smi,
)
from chip_drivers.npu_smi_readings import ChipReading, chip_readings
from chip_drivers.npu_smi_vnpu import NpuSmiVnpus
from infra.periodic import Periodic

log = logging.getLogger(__name__)

# hot_reset_manager.go bootStatusPollInterval / bootStatusPollTimeout
BOOT_POLL = 1.0
BOOT_TIMEOUT = 180.0


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
        self._board: int | None = None
        self._board_asked = False  # asked once: the board does not change
        self._info: str | None = None  # the last ``npu-smi info``, for readings()
        self.vnpu = NpuSmiVnpus(run)

    def _remember(self, args: list[str]) -> str | None:
        out = self._run(args)
        if args == ["info"]:
            self._info = out
        return out

    def readings(self) -> dict[tuple[int, int], ChipReading]:
        """Power, temperature, usage of each chip as the last poll's table printed them
        (``--npu-exporter-series``); none before a poll or when it was not understood."""
        try:
            return {} if self._info is None else chip_readings(self._info)
        except NpuSmiError:
            return {}

    def read(self) -> NodeChips:
        chips = read_chips(self._remember)
        if self._product is not None:
            chips = dataclasses.replace(chips, product=self._product)
        if chips.resource == "Ascend310P":
            chips = self.vnpu.with_vnpus(chips)
        chips = dataclasses.replace(chips, board_id=self._board_id(chips))
        self._last = chips
        return chips

    def _board_id(self, chips: NodeChips) -> int | None:
        """The board id of the first NPU (``npu-smi info -t board -i``), asked once; an 800I
        A2 without HCCS or a 300I A2 resets its chips one by one (agent/hot_reset.py). None
        when npu-smi does not print one (the hot reset then takes the product's ring)."""
        if not self._board_asked:
            self._board_asked = True
            card = next((c.card for c in chips.chips if c.card is not None), None)
            try:
                text = (
                    None if card is None else self._run(["info", "-t", "board", "-i", str(card[0])])
                )
                self._board = None if text is None else parse_board_id(text)
            except NpuSmiError as failed:
                log.warning("npu-smi: no board id (%s)", failed)
        return self._board

    def create_vnpu(self, chip: int, template: str) -> VirtualDevice:
        return self.vnpu.create(self._node(), chip, template)

    def destroy_vnpu(self, vnpu: VirtualDevice) -> None:
        self.vnpu.destroy(self._node(), vnpu)

    def list_vnpus(self) -> tuple[VirtualDevice, ...]:
        return self.vnpu.list_all(self._node())

    def processes(self) -> Mapping[int, tuple[int, ...]]:
        info = self._run(["info"])
        if info is None:
            raise NpuSmiError("no npu-smi info output: the chips' processes are unknown")
        by_card = parse_processes(info)
        node = self._node()
        return {c.id: by_card[c.card] for c in node.chips if c.card in by_card}

    def reset_chips(self, fault: int, group: frozenset[int]) -> None:
        """``npu-smi set -t reset`` of the faulty chip (upstream's one in-band DCMI reset,
        ``dcmi_set_device_reset``), then npu-smi is read until every chip of the group is
        listed again. npu-smi has no boot-status query (upstream polls
        ``dcmi_get_device_boot_status`` for up to 180 s): a chip listed again counts as booted."""
        self.vnpu.reset(self._node(), fault)
        deadline = time.monotonic() + BOOT_TIMEOUT
        while True:
            try:
                listed = {c.id for c in self.read().chips}
            except DriverError as bad:
                listed, why = set(), str(bad)
            else:
                why = f"chips {sorted(group - listed)} not listed"
            if group <= listed:
                return
            if time.monotonic() >= deadline:
                raise NpuSmiError(f"reset chip {fault}: not back after {BOOT_TIMEOUT:.0f} s: {why}")
            time.sleep(BOOT_POLL)

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
