"""vNPUs and hot resets through ``npu-smi`` (the real driver's half of dynamic vNPU).

The commands the device plugin's DCMI calls correspond to: ``npu-smi info -t info-vnpu -i
<card> -c <chip>`` lists a chip's vNPUs, ``npu-smi set -t create-vnpu … -f <template>``
creates one (its id is the one the list shows afterwards), ``npu-smi set -t destroy-vnpu …
-v <id>`` destroys one, ``npu-smi set -t reset -i <card> -c <chip>`` hot-resets a chip.
Chips are addressed by npu-smi's (NPU ID, chip index), which ``discover`` records per chip.
Parsing is pure and tested on the outputs in ``tests/data/npu_smi_vnpu`` (not captured from
hardware: see the README there).
"""

from __future__ import annotations

import dataclasses

from chip_drivers.chips import DriverError, NodeChips, VirtualDevice
from chip_drivers.npu_smi import NpuSmiError, Runner
from contract.vnpu import CORE_SPECS


def parse_vnpus(text: str, chip: int) -> tuple[VirtualDevice, ...]:
    """The vNPU rows of ``info -t info-vnpu``: Vnpu ID, Vgroup ID, …, Template Name."""
    found = []
    in_table = False
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == "Vnpu ID":
            in_table = True
            continue
        if not in_table or len(cells) < 5 or not cells[0].isdigit():
            continue
        template = cells[-1]
        if template not in CORE_SPECS:
            raise NpuSmiError(f"npu-smi info-vnpu: unknown template {template!r} in {line.strip()}")
        group = int(cells[1]) if cells[1].isdigit() else 0
        found.append(VirtualDevice(int(cells[0]), chip, template, group))
    return tuple(found)


def check_status(text: str, what: str) -> None:
    """``Status : OK``, else NpuSmiError with npu-smi's Message."""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("Status") != "OK":
        raise NpuSmiError(f"npu-smi {what}: {fields.get('Message') or text.strip()[:200]}")


class NpuSmiVnpus:
    def __init__(self, run: Runner) -> None:
        self._run = run

    def _call(self, args: list[str], what: str) -> str:
        text = self._run(args)
        if text is None:
            raise NpuSmiError(f"npu-smi {' '.join(args)}: no output")
        return text

    @staticmethod
    def _card(node: NodeChips, chip: int) -> tuple[str, str]:
        for c in node.chips:
            if c.id == chip and c.card is not None:
                return str(c.card[0]), str(c.card[1])
        raise DriverError(f"chip {chip}: npu-smi did not report its NPU ID and chip index")

    def _list(self, node: NodeChips, chip: int) -> tuple[VirtualDevice, ...]:
        card, index = self._card(node, chip)
        args = ["info", "-t", "info-vnpu", "-i", card, "-c", index]
        return parse_vnpus(self._call(args, "info-vnpu"), chip)

    def list_all(self, node: NodeChips) -> tuple[VirtualDevice, ...]:
        return tuple(v for c in node.chips for v in self._list(node, c.id))

    def with_vnpus(self, node: NodeChips) -> NodeChips:
        return dataclasses.replace(node, vnpus=self.list_all(node))

    def create(self, node: NodeChips, chip: int, template: str) -> VirtualDevice:
        card, index = self._card(node, chip)
        before = {v.vdev for v in self._list(node, chip)}
        args = ["set", "-t", "create-vnpu", "-i", card, "-c", index, "-f", template]
        check_status(self._call(args, "create-vnpu"), f"create-vnpu {template} on chip {chip}")
        new = [v for v in self._list(node, chip) if v.vdev not in before]
        if len(new) != 1:
            raise NpuSmiError(f"create-vnpu {template} on chip {chip}: {len(new)} new vNPUs seen")
        return new[0]

    def destroy(self, node: NodeChips, vnpu: VirtualDevice) -> None:
        card, index = self._card(node, vnpu.phy)
        args = ["set", "-t", "destroy-vnpu", "-i", card, "-c", index, "-v", str(vnpu.vdev)]
        check_status(self._call(args, "destroy-vnpu"), f"destroy-vnpu {vnpu.vdev}")

    def reset(self, node: NodeChips, chip: int) -> None:
        card, index = self._card(node, chip)
        args = ["set", "-t", "reset", "-i", card, "-c", index]
        check_status(self._call(args, "reset"), f"reset chip {chip}")
