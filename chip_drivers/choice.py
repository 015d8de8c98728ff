"""Choosing a chip driver from a daemon's flags: the same flags and the same choice for the
agent and the DRA driver."""

from __future__ import annotations

import argparse
from pathlib import Path

from chip_drivers.chips import DriverError
from chip_drivers.fake import FakeDriver, NpuDriver


def driver_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--driver",
        choices=["fake", "npu-smi"],
        default=None,
        help="default: fake when --fake-state is given, else npu-smi",
    )
    parser.add_argument("--fake-state", type=Path, help="YAML chip state for --driver fake")
    parser.add_argument(
        "--npu-smi-replay",
        type=Path,
        help="read DIR/info.txt (and DIR/info-m.txt) instead of running npu-smi",
    )
    parser.add_argument(
        "--product",
        help="chip_topology product (module910x8, module910bx8, …) when npu-smi cannot tell",
    )


def make_driver(args: argparse.Namespace, period: float = 5.0) -> NpuDriver:
    if args.driver == "fake" or (args.driver is None and args.fake_state is not None):
        if args.fake_state is None:
            raise DriverError("--driver fake needs --fake-state FILE")
        return FakeDriver(args.fake_state)
    # Loaded only for the real driver: an agent on the fake one needs none of npu-smi's parsers.
    from chip_drivers.npu_smi import replay_runner, run_npu_smi  # noqa: PLC0415
    from chip_drivers.npu_smi_driver import NpuSmiDriver  # noqa: PLC0415

    run = replay_runner(args.npu_smi_replay) if args.npu_smi_replay else run_npu_smi
    return NpuSmiDriver(run, period=period, product=args.product)
