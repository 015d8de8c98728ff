"""A step run every period on a thread of its own: a failing step is logged, reported and
survived, and the next period runs again (the agent's repair, upkeep and npu-smi polls)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    def __init__(
        self,
        name: str,
        period: float,
        step: Callable[[], object],
        on_error: Callable[[], None] = lambda: None,
        *,
        join_timeout: float | None = None,
    ) -> None:
        self.name = name
        self._period = period
        self._step = step
        self._on_error = on_error  # an unexpected failure, after it is logged
        self._join_timeout = period + 5 if join_timeout is None else join_timeout
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._period):
            try:
                self._step()
            except Exception:
                log.exception("%s round failed", self.name)
                self._on_error()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._join_timeout)
