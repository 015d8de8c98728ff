"""The driver port: where the agent learns a node's chips and their health.

Two adapters. ``FakeDriver`` reads a YAML state file and reloads it when the file changes
(tests, demos, and users injecting faults by editing it). ``NpuSmiDriver`` polls Huawei's
``npu-smi``. The plugin server only ever sees ``NodeChips`` snapshots.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import yaml
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from agent.chips import HEALTHY, UNHEALTHY, Chip, DriverError, Network, NodeChips
from agent.npu_smi import Runner, read_chips, run_npu_smi
from contract.chip_names import InvalidInput
from scheduler_core.engine.products import product_by_name

log = logging.getLogger(__name__)

OnChange = Callable[[NodeChips], None]
RESOURCE_910 = "Ascend910"


class NpuDriver(Protocol):
    def read(self) -> NodeChips:
        """The current chips; DriverError when none can be reported."""
        ...

    def watch(self, on_change: OnChange) -> None:
        """Call ``on_change`` with each new snapshot that differs from the last."""
        ...

    def close(self) -> None: ...


def _field(raw: dict[str, Any], key: str, path: str, kind: type, default: Any) -> Any:
    value = raw.get(key, default)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DriverError(f"{path}.{key}: expected {kind.__name__}, got {value!r}")
    return value


def _chip(raw: Any, path: str) -> Chip:
    if not isinstance(raw, dict):
        raise DriverError(f"{path}: expected a mapping with at least an id")
    if "id" not in raw:
        raise DriverError(f"{path}.id: missing")
    chip_id = _field(raw, "id", path, int, None)
    health = _field(raw, "health", path, str, HEALTHY)
    if health not in (HEALTHY, UNHEALTHY):
        raise DriverError(f"{path}.health: expected {HEALTHY} or {UNHEALTHY}, got {health!r}")
    network = _field(raw, "network", path, str, "up")
    if network not in ("up", "down"):
        raise DriverError(f"{path}.network: expected up or down, got {network!r}")
    codes = _field(raw, "fault_codes", path, list, [])
    for i, code in enumerate(codes):
        if (
            not isinstance(code, str)
            or not code
            or any(c not in "0123456789abcdefABCDEF" for c in code)
        ):
            raise DriverError(
                f"{path}.fault_codes[{i}]: expected a hex code like 80E18402, got {code!r}"
            )
    return Chip(
        id=chip_id,
        logic_id=_field(raw, "logic_id", path, int, chip_id),
        healthy=health == HEALTHY,
        network=Network(network),
        fault_codes=tuple(c.upper() for c in codes),
        ip=_field(raw, "ip", path, str, ""),
    )


def parse_fake_state(text: str) -> NodeChips:
    """The fake driver's YAML (format in the README). Errors name the offending field."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as bad:
        raise DriverError(f"state file is not YAML: {bad}") from None
    if not isinstance(raw, dict):
        raise DriverError("state file: expected a mapping with product and chips")
    product_name = _field(raw, "product", "state", str, "module910x8")
    try:
        product = product_by_name(product_name)
    except InvalidInput as bad:
        raise DriverError(f"state.product: {bad}") from None
    chips = tuple(
        _chip(c, f"chips[{i}]") for i, c in enumerate(_field(raw, "chips", "state", list, []))
    )
    seen: set[int] = set()
    for i, chip in enumerate(chips):
        if chip.id in seen:
            raise DriverError(f"chips[{i}].id: chip {chip.id} is named twice")
        if not 0 <= chip.id < product.capacity:
            raise DriverError(
                f"chips[{i}].id: {chip.id} is outside {product.name} (0-{product.capacity - 1})"
            )
        seen.add(chip.id)
    server_type = raw.get("servertype")
    if server_type is not None and (not isinstance(server_type, str) or not server_type):
        raise DriverError(f"state.servertype: expected text like Ascend910-32, got {server_type!r}")
    super_pod = {key: _index(raw, key) for key in ("super_pod_id", "server_index")}
    return NodeChips(RESOURCE_910, product.name, chips, server_type, **super_pod)


def _index(raw: dict[str, Any], key: str) -> int | None:
    value = raw.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise DriverError(f"state.{key}: expected a number ≥ 0, got {value!r}")
    return value


class _FileEvents(FileSystemEventHandler):
    def __init__(self, path: Path, reload: Callable[[], None]) -> None:
        self._path = str(path)
        self._reload = reload

    def on_any_event(self, event: FileSystemEvent) -> None:
        # Editors often write a new file and rename it over the old one: dest_path counts.
        touched = {str(event.src_path), str(getattr(event, "dest_path", "") or "")}
        if self._path in touched and event.event_type != "opened":
            self._reload()


MAX_STATE_BYTES = 256 * 1024  # a 16-chip server's state is about 2 KB


def _read_limited(path: Path) -> str:
    """The state file's text; DriverError when it is larger than any real state (parsing a
    10 MB file took a minute and held back every fault report meanwhile)."""
    with path.open("rb") as handle:
        data = handle.read(MAX_STATE_BYTES + 1)
    if len(data) > MAX_STATE_BYTES:
        raise DriverError(f"larger than {MAX_STATE_BYTES // 1024} KiB: not a chip state")
    try:
        return data.decode()
    except UnicodeDecodeError as bad:
        raise DriverError(f"not UTF-8 text ({bad.reason} at byte {bad.start})") from None


class FakeDriver:
    """Chips from a YAML state file; a bad edit is reported and the last good state kept."""

    def __init__(self, path: Path) -> None:
        self.path = path.resolve()
        self.last_error = ""
        self._lock = threading.Lock()
        self._state: NodeChips | None = None
        self._observer: Any = None
        self._on_change: OnChange | None = None

    def read(self) -> NodeChips:
        with self._lock:
            try:
                state = parse_fake_state(_read_limited(self.path))
            except (OSError, DriverError) as bad:
                self.last_error = f"{self.path}: {bad}"
                if self._state is None:
                    raise DriverError(self.last_error) from None
                log.warning("keeping the last good chip state: %s", self.last_error)
                return self._state
            self.last_error = ""
            self._state = state
            return state

    def _reload(self) -> None:
        before = self._state
        state = self.read()
        if state != before and self._on_change is not None:
            self._on_change(state)

    def watch(self, on_change: OnChange) -> None:
        self._on_change = on_change
        observer = Observer()
        observer.schedule(_FileEvents(self.path, self._reload), str(self.path.parent))
        observer.daemon = True
        observer.start()
        self._observer = observer

    def close(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None


class NpuSmiDriver:
    """Chips from npu-smi, polled every ``period`` seconds for health changes."""

    def __init__(
        self, run: Runner = run_npu_smi, period: float = 5.0, product: str | None = None
    ) -> None:
        self._run = run
        self._period = period
        self._product = product
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: NodeChips | None = None

    def read(self) -> NodeChips:
        chips = read_chips(self._run)
        if self._product is not None:
            chips = NodeChips(chips.resource, self._product, chips.chips, chips.server_type)
        self._last = chips
        return chips

    def watch(self, on_change: OnChange) -> None:
        def poll() -> None:
            while not self._stop.wait(self._period):
                before = self._last
                try:
                    state = self.read()
                except DriverError as bad:
                    log.warning("npu-smi poll failed, keeping the last state: %s", bad)
                    continue
                except Exception:
                    log.exception("npu-smi poll failed, keeping the last state")
                    continue
                if state != before:
                    on_change(state)

        self._thread = threading.Thread(target=poll, name="npu-smi-poll", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self._period + 1)
