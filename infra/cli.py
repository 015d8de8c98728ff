"""What every command line of the project offers: its version, and waiting for SIGTERM."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any, NoReturn

log = logging.getLogger(__name__)

DISTRIBUTION = "ascend-npu-k8s"


def version() -> str:
    # Imported here: importlib.metadata costs half a MiB that a running agent never needs.
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _Version(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        print(f"{parser.prog} {version()}")
        sys.exit(0)


def add_version(parser: argparse.ArgumentParser, *spellings: str) -> None:
    """``--version`` (and any other ``spellings``) print the version and exit."""
    parser.add_argument("--version", *spellings, action=_Version)


def settle() -> None:
    """Once a daemon has started: what the start-up left behind goes back to the system (the
    garbage of imports and parsing, and the heap's free top), and the long-lived objects are
    kept out of the collector's walks."""
    gc.collect()
    gc.freeze()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL(None).malloc_trim(0)


def stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set (the kubelet's and a user's way to stop a daemon)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    return stop


def wait_until(stop: threading.Event) -> None:
    """Block the main thread until ``stop`` is set, by a signal handler most often.

    With waits of a bounded length: a process-directed signal may land on another thread,
    and a main thread blocked in a wait without a timeout would then never run the handler.
    """
    while not stop.wait(0.5):
        pass
