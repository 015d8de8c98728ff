"""The driver port: where the agent learns a node's chips and their health.

Two adapters. ``FakeDriver`` reads a YAML state file and reloads it when the file changes
(tests, demos, and users injecting faults by editing it). ``NpuSmiDriver`` polls Huawei's
``npu-smi``. The plugin server only ever sees ``NodeChips`` snapshots.
"""

from __future__ import annotations

import fcntl
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import yaml
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from chip_drivers.chips import (
    HEALTHY,
    LABEL_VALUE,
    UNHEALTHY,
    Chip,
    DriverError,
    Network,
    NodeChips,
    VirtualDevice,
)
from chip_topology.products import Family
from chip_topology.products.a3.dies import DIE
from chip_topology.routing import product_by_name
from contract.chip_names import KINDS, InvalidInput
from contract.vnpu import CORE_SPECS, template_cores

log = logging.getLogger(__name__)

OnChange = Callable[[NodeChips], None]
RESOURCE_910 = "Ascend910"
# The product a state without one has; the 950 family (``npu``) has none by default.
DEFAULT_PRODUCT = {"Ascend910": "module910x8", "Ascend310": "chip310x4", "Ascend310P": "ascend310p"}
FIRST_VDEV = 100  # the driver numbers vNPUs from 100
# The servertype prefix of a product family when it is not the chip type: upstream's
# RealCardType (Ascend/mind-cluster component/ascend-device-plugin pkg/server/manager.go
# getNewNodeLabel writes servertype <RealCardType>-<AI cores>, e.g. Ascend910B-20).
CARD_TYPE = {Family.ASCEND910B: "Ascend910B", Family.ASCEND910A3: "Ascend910A3"}


class NpuDriver(Protocol):
    def read(self) -> NodeChips:
        """The current chips; DriverError when none can be reported."""
        ...

    def watch(self, on_change: OnChange) -> None:
        """Call ``on_change`` with each new snapshot that differs from the last."""
        ...

    def close(self) -> None: ...

    def create_vnpu(self, chip: int, template: str) -> VirtualDevice:
        """Cut a vNPU out of a chip; DriverError when the chip cannot (too few AI cores)."""
        ...

    def destroy_vnpu(self, vnpu: VirtualDevice) -> None: ...

    def list_vnpus(self) -> tuple[VirtualDevice, ...]: ...

    def reset_chips(self, fault: int, group: frozenset[int]) -> None:
        """Hot-reset the faulty chip and return once every chip of its reset group is back
        (upstream issues one in-band reset of the faulty chip and waits for the group to
        boot); DriverError when the reset fails or the group does not come back. No pod or
        process may be using any chip of the group."""
        ...

    def processes(self) -> Mapping[int, tuple[int, ...]]:
        """The ids of the processes running on each chip (chips without any may be absent);
        DriverError when they cannot be listed."""
        ...


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
        super_device_id=_index(raw, "super_device_id", path),
    )


# libyaml's safe loader and dumper when PyYAML has them (a vNPU create reads and writes the
# state file: 10 ms a call with the pure-Python ones, under the Allocate lock).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _load(text: str) -> Any:
    return yaml.load(text, Loader=_LOADER)


def parse_fake_state(text: str) -> NodeChips:
    """The fake driver's YAML (format in docs/agent.md). Errors name the offending field."""
    try:
        raw = _load(text)
    except yaml.YAMLError as bad:
        raise DriverError(f"state file is not YAML: {bad}") from None
    if not isinstance(raw, dict):
        raise DriverError("state file: expected a mapping with product and chips")
    chip_type = _field(raw, "chip_type", "state", str, RESOURCE_910)
    if chip_type not in KINDS:
        raise DriverError(f"state.chip_type: {chip_type!r} is not one of {', '.join(KINDS)}")
    product_name = raw.get("product", DEFAULT_PRODUCT.get(chip_type))
    die_size = 0
    card_type = chip_type  # upstream's RealCardType: the servertype's prefix
    if product_name is None:  # a 950 node: no product of ours until the state names one
        capacity, where = KINDS[chip_type].max_chips, chip_type
    else:
        if not isinstance(product_name, str):
            raise DriverError(f"state.product: expected str, got {product_name!r}")
        try:
            product = product_by_name(product_name)
        except InvalidInput as bad:
            raise DriverError(f"state.product: {bad}") from None
        capacity, where = product.capacity, product_name
        die_size = DIE if product.family is Family.ASCEND910A3 else 0
        card_type = CARD_TYPE.get(product.family, chip_type)
    chips = tuple(
        _chip(c, f"chips[{i}]") for i, c in enumerate(_field(raw, "chips", "state", list, []))
    )
    seen: set[int] = set()
    for i, chip in enumerate(chips):
        if chip.id in seen:
            raise DriverError(f"chips[{i}].id: chip {chip.id} is named twice")
        if not 0 <= chip.id < capacity:
            raise DriverError(f"chips[{i}].id: {chip.id} is outside {where} (0-{capacity - 1})")
        seen.add(chip.id)
    server_type = raw.get("servertype")
    if server_type is not None and (not isinstance(server_type, str) or not server_type):
        raise DriverError(f"state.servertype: expected text like Ascend910-32, got {server_type!r}")
    super_pod = {key: _index(raw, key) for key in ("super_pod_id", "server_index", "rack_id")}
    expected = _field(raw, "expected_chips", "state", list, [])
    for i, chip_id in enumerate(expected):
        if not isinstance(chip_id, int) or isinstance(chip_id, bool) or not 0 <= chip_id < capacity:
            raise DriverError(
                f"state.expected_chips[{i}]: expected a chip id of {where} (0-{capacity - 1}), "
                f"got {chip_id!r}"
            )
    ai_cores = _field(raw, "ai_cores", "state", int, 8 if chip_type == "Ascend310P" else 0)
    vnpus = tuple(
        _vnpu(v, f"vnpus[{i}]", seen, ai_cores)
        for i, v in enumerate(_field(raw, "vnpus", "state", list, []))
    )
    if server_type is None and ai_cores:  # as upstream's plugin labels it: <card>-<AI cores>
        server_type = f"{card_type}-{ai_cores}"
    fake_processes(raw)
    _reset_seconds(raw)
    board_id = _field(raw, "board_id", "state", int, -1)
    chip_name = raw.get("chip_name")
    if chip_name is not None and not (
        isinstance(chip_name, str) and LABEL_VALUE.fullmatch(chip_name)
    ):
        raise DriverError(f"state.chip_name: expected a name like 910B3, got {chip_name!r}")
    return NodeChips(
        chip_type,
        product_name,
        chips,
        server_type,
        **super_pod,
        ai_cores=ai_cores,
        vnpus=vnpus,
        die_size=die_size,
        chip_name=chip_name,
        expected_chips=tuple(expected),
        board_id=None if board_id < 0 else board_id,
    )


def _vnpu(raw: Any, path: str, chips: set[int], ai_cores: int) -> VirtualDevice:
    if not isinstance(raw, dict):
        raise DriverError(f"{path}: expected a mapping with id, chip and template")
    vnpu = VirtualDevice(
        _field(raw, "id", path, int, None),
        _field(raw, "chip", path, int, None),
        _field(raw, "template", path, str, None),
        _field(raw, "vgroup", path, int, 0),
    )
    if vnpu.phy not in chips:
        raise DriverError(f"{path}.chip: chip {vnpu.phy} is not in chips")
    if vnpu.template not in CORE_SPECS:
        raise DriverError(f"{path}.template: unknown template {vnpu.template!r}")
    if ai_cores and template_cores(vnpu.template) > ai_cores:
        raise DriverError(f"{path}.template: {vnpu.template} needs more than {ai_cores} AI cores")
    return vnpu


def _index(raw: dict[str, Any], key: str, path: str = "state") -> int | None:
    """A SuperPoD id, server index, rack id or super device id: a number ≥ 0, or the driver's
    -1 (0xffffffff) and -2 (not reported, or the query failed), carried as they are."""
    value = raw.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < -2):
        raise DriverError(f"{path}.{key}: expected a number ≥ 0, -1 or -2, got {value!r}")
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


@contextmanager
def _state_lock(path: Path) -> Iterator[None]:
    """Writers of one state file one at a time, across processes: the driver records vNPUs
    in the file a test or a user edits to inject faults, and neither may lose the other's."""
    with path.with_name(f".{path.name}.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def edit_fake_state(path: Path, change: Callable[[dict[str, Any], NodeChips], Any]) -> Any:
    """Apply ``change`` to a fake driver's state file's YAML (checked first) and write it
    back; what ``change`` returns."""
    with _state_lock(path):
        try:
            text = _read_limited(path)
            current = parse_fake_state(text)
        except (OSError, DriverError) as bad:
            raise DriverError(f"{path}: {bad}") from None
        raw = _load(text)
        result = change(raw, current)
        # Written aside and renamed over: a reader never sees half a file.
        partial = path.with_name(f".{path.name}.writing")
        partial.write_text(yaml.dump(raw, Dumper=_DUMPER, sort_keys=False), encoding="utf-8")
        partial.replace(path)
    return result


class FakeDriver:
    """Chips from a YAML state file; a bad edit is reported and the last good state kept.

    vNPUs it creates and destroys, and chip resets, are written back to the file (so a test
    or a user sees them): ``vnpus`` and ``resets`` (chip id → count). A create beyond the
    chip's AI cores (``ai_cores``, 8 on a 310P) fails as the hardware would; a reset heals
    its group unless the state lists the chip in ``reset_fails``.
    """

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

    def _edit(self, change: Callable[[dict[str, Any], NodeChips], Any]) -> Any:
        with self._lock:
            result = edit_fake_state(self.path, change)
        self._reload()
        return result

    def create_vnpu(self, chip: int, template: str) -> VirtualDevice:
        if template not in CORE_SPECS:
            raise DriverError(f"create vNPU: unknown template {template!r}")

        def create(raw: dict[str, Any], node: NodeChips) -> VirtualDevice:
            if chip not in {c.id for c in node.chips}:
                raise DriverError(f"create vNPU {template} on chip {chip}: no such chip")
            on_chip = [v for v in node.vnpus if v.phy == chip]
            used = sum(template_cores(v.template) for v in on_chip)
            if used + template_cores(template) > node.ai_cores:
                raise DriverError(
                    f"create vNPU {template} on chip {chip}: {node.ai_cores - used} of "
                    f"{node.ai_cores} AI cores free"
                )
            taken = {v.vdev for v in node.vnpus}
            groups = {v.vgroup for v in on_chip}
            vnpu = VirtualDevice(
                next(i for i in range(FIRST_VDEV, FIRST_VDEV + 1000) if i not in taken),
                chip,
                template,
                next(g for g in range(16) if g not in groups),
            )
            entry = {"id": vnpu.vdev, "chip": chip, "template": template, "vgroup": vnpu.vgroup}
            raw.setdefault("vnpus", []).append(entry)
            return vnpu

        result: VirtualDevice = self._edit(create)
        return result

    def destroy_vnpu(self, vnpu: VirtualDevice) -> None:
        def destroy(raw: dict[str, Any], node: NodeChips) -> None:
            if vnpu.vdev not in {v.vdev for v in node.vnpus}:
                raise DriverError(f"destroy vNPU {vnpu.vdev}: no such vNPU")
            raw["vnpus"] = [v for v in raw.get("vnpus") or [] if v.get("id") != vnpu.vdev]

        self._edit(destroy)

    def list_vnpus(self) -> tuple[VirtualDevice, ...]:
        return self.read().vnpus

    def processes(self) -> Mapping[int, tuple[int, ...]]:
        """Each chip's ``processes`` in the state file (pids a test or a user put there)."""
        try:
            text = _read_limited(self.path)
        except (OSError, DriverError) as bad:
            raise DriverError(f"{self.path}: {bad}") from None
        return fake_processes(_load(text))

    def reset_chips(self, fault: int, group: frozenset[int]) -> None:
        """Lists the group under ``resetting`` for ``reset_seconds``, then counts the reset in
        ``resets`` and brings the group back healthy with its fault codes cleared; a fault
        chip listed in ``reset_fails`` (a test hook) fails instead and stays as it was."""

        def start(raw: dict[str, Any], node: NodeChips) -> tuple[float, bool]:
            missing = sorted(group - {c.id for c in node.chips})
            if fault not in group or missing:
                raise DriverError(f"reset chip {fault}: no chips {missing or [fault]}")
            raw["resetting"] = sorted(group)
            return _reset_seconds(raw), fault in (raw.get("reset_fails") or [])

        def end(raw: dict[str, Any], node: NodeChips) -> None:
            raw.pop("resetting", None)
            resets = raw.setdefault("resets", {})
            resets[fault] = int(resets.get(fault, 0)) + 1
            if failing:
                return
            for entry in raw.get("chips") or []:
                if entry.get("id") in group:
                    entry["health"] = HEALTHY
                    entry.pop("fault_codes", None)

        seconds, failing = self._edit(start)
        # The time a reset takes on hardware (upstream polls boot status for up to 180 s).
        threading.Event().wait(seconds)
        self._edit(end)
        if failing:
            raise DriverError(f"reset chip {fault}: failed (listed in reset_fails)")


def _reset_seconds(raw: dict[str, Any]) -> float:
    value = raw.get("reset_seconds", 0)
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 600:
        raise DriverError(f"state.reset_seconds: expected 0-600 seconds, got {value!r}")
    return float(value)


def fake_processes(raw: Any) -> dict[int, tuple[int, ...]]:
    """``chips[i].processes`` (pids) by chip id; DriverError names a bad entry."""
    found: dict[int, tuple[int, ...]] = {}
    chips = raw.get("chips") if isinstance(raw, dict) else None
    for i, entry in enumerate(chips if isinstance(chips, list) else []):
        if not isinstance(entry, dict):
            continue
        pids = entry.get("processes", [])
        if not isinstance(pids, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in pids
        ):
            raise DriverError(f"chips[{i}].processes: expected a list of process ids, got {pids!r}")
        if pids:
            found[int(entry.get("id", -1))] = tuple(pids)
    return found
