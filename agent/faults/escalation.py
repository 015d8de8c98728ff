"""The fault state machine: each poll's fault codes → levels, escalated by duration and
frequency, the chips to list as unhealthy, the ``-Fault`` entries, ``ManuallySeparateNPU``
and ``UpgradeFaultReason``. No I/O and no clock of its own: every call is given the time.

It follows Ascend/mind-cluster component/ascend-device-plugin:
- pkg/common/fault_code.go: ``GetFaultType`` / ``GetNetworkFaultType`` (a chip's level is the
  severest of its codes' levels and of its escalation reasons), the duration algorithm
  (``timeoutOrRecoveryAlgorithm``: a code counts once present for more than FaultTimeout, is
  recovered once absent for more than RecoverTimeout), ``handleFrequencyFault`` (N
  occurrences within the window → the rule's level, the count then starts again,
  ``DelOnceFrequencyFault``; released ReleaseTimeWindow after the last recovery);
- pkg/common/upgradefault.go: the reasons, ``FixManuallySeparateReason``;
- pkg/device/ascendcommon.go: ``isHealthy`` / ``isNetworkHealthy``, ``getDeviceFaults``
  (network entry first, codes with the reasons' codes, the time map), and
  ``handleManuallySeparateNPUFaultInfo`` (the agent adds chips, an admin may delete them).

Upstream is fed by DCMI fault events; here each poll's codes are compared with the last
poll's, a new code occurring and a gone code recovering at the poll's time (upstream's own
polling fallback, ``GetChangedDevFaultInfo``). A link that is down is code 81078603.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from agent.faults.table import (
    HEALTHY_CHIP_LEVELS,
    HEALTHY_NETWORK_LEVELS,
    LINK_DOWN,
    NETWORK_CODES,
    BadConfig,
    FaultConfig,
    canonical,
    severest,
)
from chip_drivers.chips import Network, NodeChips
from contract.chip_names import ChipKind, InvalidInput, chip_name, parse_chip_list
from contract.deviceinfo import ChipFault
from contract.fault_levels import MANUALLY_SEPARATE, NORMAL, PRE_SEPARATE, SEPARATE
from contract.go_json import go_json

log = logging.getLogger(__name__)

FREQUENCY = "FaultFrequency"
DURATION = "FaultDuration"
AUTOFILL = "FaultAutofill"
AUTOFILL_CODE = "AutofillFaultCode"  # a separated chip whose reason is unknown
OCCUR = "Occur"
RECOVERY = "Recovery"
MS = 1000


@dataclass(frozen=True, slots=True)
class Reason:
    """One ``UpgradeFaultReason`` of a chip: why its level was raised, and when (ms)."""

    code: str
    level: str
    kind: str  # FaultFrequency | FaultDuration | FaultAutofill
    time: int

    def to_go(self) -> str:
        # UpgradeFaultReason's struct order: upgrade_time, then the inlined key's fields.
        return (
            f'{{"upgrade_time":{self.time},"fault_code":{go_json(self.code)},'
            f'"fault_level":{go_json(self.level)},"upgrade_type":{go_json(self.kind)}}}'
        )


@dataclass(frozen=True, slots=True)
class Transition:
    """A fault code that appeared (Occur) or went (Recovery) on a chip; ``level`` is the
    code's level in the table (upstream's fault Event names that one)."""

    chip: int
    code: str
    assertion: str
    level: str
    time: int


@dataclass(frozen=True, slots=True)
class Observation:
    """What a poll gives the DeviceInfo."""

    unhealthy: frozenset[int]
    network_unhealthy: frozenset[int]
    faults: tuple[ChipFault, ...]
    levels: Mapping[int, str]  # chip → severest level after escalation (faulty chips only)
    transitions: tuple[Transition, ...]


@dataclass(slots=True)
class _Timer:
    """One code's duration state on one chip (FaultDurationData)."""

    present: bool
    edge: int  # ms: since when the code has been present (or absent)
    timed_out: bool = False
    alarm: int = 0  # ms: when it counted (or recovered)

    def judge(self, present: bool, length: int, fault_ms: int, recover_ms: int) -> str | None:
        if not self.timed_out and present and length > fault_ms:
            self.timed_out, self.alarm = True, self.edge + fault_ms
            return OCCUR
        if self.timed_out and not present and length > recover_ms:
            self.timed_out, self.alarm = False, self.edge + recover_ms
            return RECOVERY
        return None


@dataclass(slots=True)
class _Count:
    """One code's occurrences on one chip (FaultFrequencyCache, per chip)."""

    times: list[int] = field(default_factory=list)
    last_fault: int = 0
    last_recover: int = 0


class FaultMachine:
    def __init__(self, config: FaultConfig) -> None:
        self._config = config
        self._since: dict[int, dict[str, int]] = {}  # chip → code → first seen (ms)
        self._timers: dict[tuple[int, str], _Timer] = {}
        self._counts: dict[tuple[int, str], _Count] = {}
        self._reasons: dict[int, dict[tuple[str, str, str], Reason]] = {}
        self._manual: dict[int, bool] = {}  # separated chip → not yet listed (FirstHandle)
        # Chips released since the last write: still listed in the ConfigMap, by us.
        self._released: set[int] = set()
        self._levels: dict[int, str] = {}
        # Reasons released since the last take_released (upgradefault.go removedEvent).
        self._removed: dict[int, dict[tuple[str, str, str], Reason]] = {}

    @property
    def config(self) -> FaultConfig:
        return self._config

    def levels(self) -> Mapping[int, str]:
        """Each faulty chip's level after escalation, as of the last observation."""
        return dict(self._levels)

    # ---- configuration -------------------------------------------------------------------

    def reconfigure(self, config: FaultConfig) -> None:
        """A new table or customization: reasons follow the new rules' levels, a reason
        whose rule is gone is dropped (checkAndUpdateExistingUpgradeFaults)."""
        self._config = config
        levels: dict[str, dict[str, str]] = {
            FREQUENCY: {c: r.level for c, r in config.customization.frequency.items()},
            DURATION: {c: r.level for c, r in config.customization.duration.items()},
        }
        for chip, reasons in list(self._reasons.items()):
            kept: dict[tuple[str, str, str], Reason] = {}
            for old in reasons.values():
                new = old
                if old.kind in levels:
                    level = levels[old.kind].get(old.code)
                    if level is None:
                        continue
                    new = Reason(old.code, level, old.kind, old.time)
                kept[(new.code, new.level, new.kind)] = new
            self._reasons[chip] = kept
            self._forget_manual_if_unreasoned(chip)
        self._timers = {k: t for k, t in self._timers.items() if k[1] in levels[DURATION]}
        self._counts = {k: c for k, c in self._counts.items() if k[1] in levels[FREQUENCY]}

    # ---- start-up --------------------------------------------------------------------------

    def restore(self, listed: Iterable[int], reasons: str, kind: ChipKind, now: int) -> None:
        """The state a restarted agent takes back from its DeviceInfo ConfigMap
        (ascendcommon.go LoadDeviceInfoCm): its separated chips and reasons; a separated chip
        without a ManuallySeparateNPU reason gets an autofill one, a reason of that level for a
        chip no longer separated is dropped (FixManuallySeparateReason)."""
        listed = set(listed)
        self._reasons = {}
        for chip, items in parse_reasons(reasons, kind).items():
            self._reasons[chip] = {(r.code, r.level, r.kind): r for r in items}
        for chip in listed:
            self._manual[chip] = False
            if not self._has_manual_reason(chip):
                self._add_reason(chip, Reason(AUTOFILL_CODE, MANUALLY_SEPARATE, AUTOFILL, now))
        for chip in list(self._reasons):
            if chip not in listed:
                self._drop_reasons(chip, level=MANUALLY_SEPARATE)
        # FixManuallySeparateReason mends the map read back, not the cache: no release Event.
        self._removed = {}

    # ---- ManuallySeparateNPU ---------------------------------------------------------------

    def separated(self, listed: Collection[int], now: int) -> frozenset[int]:
        """The chips to write under ManuallySeparateNPU, given what the ConfigMap lists now:
        a chip the agent wrote and an admin deleted is released (its ManuallySeparateNPU
        reasons go); a chip an admin added is kept, with an autofill reason, as upstream does
        for the list it finds at start. A chip the agent released since is not listed again."""
        # A chip released is left out until the ConfigMap no longer lists it (a write that
        # failed leaves it listed: not an admin's addition).
        self._released &= set(listed)
        listed = set(listed) - self._released
        for chip, pending in list(self._manual.items()):
            if not pending and chip not in listed:
                log.info("chip %d left ManuallySeparateNPU (deleted by an admin)", chip)
                del self._manual[chip]
                self._drop_reasons(chip, level=MANUALLY_SEPARATE)
        for chip in listed:
            if chip not in self._manual:
                self._manual[chip] = False
                if not self._has_manual_reason(chip):
                    self._add_reason(chip, Reason(AUTOFILL_CODE, MANUALLY_SEPARATE, AUTOFILL, now))
        written = frozenset(self._manual)
        # Pending until the ConfigMap lists it: a write that failed is not an admin's deletion.
        self._manual = {c: pending and c not in listed for c, pending in self._manual.items()}
        return written

    def reasons_text(self, kind: ChipKind) -> str:
        """``UpgradeFaultReason``: ``{"<chip name>":[reason,…]}`` (CmToString), "{}" when
        none; reasons sorted, where upstream writes a map's (random) order."""
        return _reasons_text(self._reasons, kind)

    def take_released(self, kind: ChipKind) -> str | None:
        """The reasons released since the last call, as ``UpgradeFaultReason`` text (the
        message of upstream's release Event, GetAndCleanRemovedReasonEvent); None: none."""
        removed, self._removed = self._removed, {}
        return _reasons_text(removed, kind) if removed else None

    # ---- a poll ----------------------------------------------------------------------------

    def observe(self, node: NodeChips, held: Collection[int], now: int) -> Observation:
        """Take one poll of the chips (``held``: chips a pod holds; ``now``: ms)."""
        transitions: list[Transition] = []
        for chip in node.chips:
            present = _codes_of(chip.fault_codes)
            if chip.network is Network.DOWN:
                present.add(LINK_DOWN)
            transitions += self._track(chip.id, present, now)
        self._release_autofill(now)
        unhealthy, network_unhealthy, faults, levels = set(), set(), [], {}
        for chip in sorted(node.chips, key=lambda c: c.id):
            since = self._since.get(chip.id, {})
            chip_codes = [c for c in since if c not in NETWORK_CODES]
            net_codes = [c for c in since if c in NETWORK_CODES]
            chip_level = self._level(chip.id, chip_codes, network=False)
            net_level = self._level(chip.id, net_codes, network=True)
            if not chip.healthy and chip_level in HEALTHY_CHIP_LEVELS:
                # The driver says unhealthy and no code says why: upstream's level for a
                # fault it cannot classify.
                chip_level = SEPARATE
            # A PreSeparateNPU chip a pod uses stays healthy (isHealthy).
            sick = chip_level not in HEALTHY_CHIP_LEVELS and not (
                chip_level == PRE_SEPARATE and chip.id in held
            )
            net_sick = net_level not in HEALTHY_NETWORK_LEVELS
            if net_codes or net_sick:
                faults.append(self._entry(chip.id, net_codes, net_level, True, node.kind))
            if chip_codes or sick:
                faults.append(self._entry(chip.id, chip_codes, chip_level, False, node.kind))
            if sick:
                unhealthy.add(chip.id)
            if net_sick:
                network_unhealthy.add(chip.id)
            level = severest([chip_level, net_level])
            if chip.id in self._manual:
                level = MANUALLY_SEPARATE
            if level != NORMAL:
                levels[chip.id] = level
        self._levels = levels
        return Observation(
            frozenset(unhealthy),
            frozenset(network_unhealthy),
            tuple(faults),
            levels,
            tuple(transitions),
        )

    def _track(self, chip: int, present: set[str], now: int) -> list[Transition]:
        custom = self._config.customization
        table = self._config.table
        before = self._since.setdefault(chip, {})
        changes = []
        for code in sorted(present - before.keys()):
            before[code] = now
            changes.append(Transition(chip, code, OCCUR, table.level(code), now))
            if code not in custom.duration:
                self._occur(chip, code, now)
        for code in sorted(before.keys() - present):
            del before[code]
            changes.append(Transition(chip, code, RECOVERY, table.level(code), now))
            if code not in custom.duration:
                self._recover(chip, code, now)
        for code in custom.duration:
            self._time(chip, code, code in present, now)
        for (at, code), count in list(self._counts.items()):
            if at == chip:
                self._count(chip, code, count, now)
        return changes

    def _time(self, chip: int, code: str, present: bool, now: int) -> None:
        key = (chip, code)
        timer = self._timers.get(key)
        if timer is None:
            if not present:
                return
            timer = self._timers[key] = _Timer(True, now)
        rule = self._config.customization.duration[code]
        fault_ms, recover_ms = rule.fault_timeout * MS, rule.recover_timeout * MS
        turned = []
        if present != timer.present:  # the interval that just ended is judged first
            turned.append(timer.judge(timer.present, now - timer.edge, fault_ms, recover_ms))
            timer.present, timer.edge = present, now
        turned.append(timer.judge(present, now - timer.edge, fault_ms, recover_ms))
        for turn in turned:
            if turn == OCCUR:
                self._occur(chip, code, timer.alarm)
            elif turn == RECOVERY:
                self._recover(chip, code, timer.alarm)
                self._drop_reasons(chip, code=code, kind=DURATION)
        if timer.timed_out:
            self._add_reason(chip, Reason(code, rule.level, DURATION, timer.alarm))
        elif not present:
            del self._timers[key]  # recovered (or never counted): nothing left to time

    def _occur(self, chip: int, code: str, at: int) -> None:
        if code in self._config.customization.frequency:
            count = self._counts.setdefault((chip, code), _Count())
            count.times.append(at)
            count.last_fault = at

    def _recover(self, chip: int, code: str, at: int) -> None:
        if code in self._config.customization.frequency:
            self._counts.setdefault((chip, code), _Count()).last_recover = at

    def _count(self, chip: int, code: str, count: _Count, now: int) -> None:
        rule = self._config.customization.frequency[code]
        start = (now // MS - rule.window) * MS
        count.times = [t for t in count.times if t >= start]
        if len(count.times) >= rule.times:
            log.info("chip %d: fault %s counted %d times → %s", chip, code, rule.times, rule.level)
            if rule.level == MANUALLY_SEPARATE:
                self._manual[chip] = True
            self._add_reason(chip, Reason(code, rule.level, FREQUENCY, count.last_fault))
            count.times = []  # counted: the next escalation needs N new occurrences
        elif (
            rule.release is not None
            and count.last_recover >= count.last_fault
            and now - count.last_recover > rule.release * MS
        ):
            self._drop_reasons(chip, code=code, kind=FREQUENCY)
        elif (code, rule.level, FREQUENCY) in self._reasons.get(chip, {}):
            self._add_reason(chip, Reason(code, rule.level, FREQUENCY, count.last_fault))

    def _release_autofill(self, now: int) -> None:
        window = self._config.customization.autofill_release
        if window is None:
            return
        for chip, reasons in list(self._reasons.items()):
            if any(r.kind == AUTOFILL and now - r.time > window * MS for r in reasons.values()):
                self._drop_reasons(chip, kind=AUTOFILL)

    # ---- reasons ---------------------------------------------------------------------------

    def _add_reason(self, chip: int, reason: Reason) -> None:
        self._reasons.setdefault(chip, {})[(reason.code, reason.level, reason.kind)] = reason

    def _has_manual_reason(self, chip: int) -> bool:
        return any(r.level == MANUALLY_SEPARATE for r in self._reasons.get(chip, {}).values())

    def _drop_reasons(
        self,
        chip: int,
        *,
        code: str | None = None,
        level: str | None = None,
        kind: str | None = None,
    ) -> None:
        """RemoveTimeoutReasonCache: drop the matching reasons; a chip with no
        ManuallySeparateNPU reason left leaves the separated list."""
        reasons = self._reasons.get(chip, {})
        for key, reason in list(reasons.items()):
            if (
                (code is None or reason.code == code)
                and (level is None or reason.level == level)
                and (kind is None or reason.kind == kind)
            ):
                log.info("chip %d: %s of fault %s released", chip, reason.level, reason.code)
                del reasons[key]
                self._removed.setdefault(chip, {})[key] = reason
        if not reasons:
            self._reasons.pop(chip, None)
        self._forget_manual_if_unreasoned(chip)

    def _forget_manual_if_unreasoned(self, chip: int) -> None:
        if chip in self._manual and not self._has_manual_reason(chip):
            del self._manual[chip]
            self._released.add(chip)

    # ---- levels and entries ----------------------------------------------------------------

    def _mode_reasons(self, chip: int, network: bool) -> list[Reason]:
        # Only reasons with a hex code raise a level (GetUpgradeFaultLevelAndTime skips the
        # autofill one, whose code does not parse).
        return [
            r
            for r in self._reasons.get(chip, {}).values()
            if r.code != AUTOFILL_CODE and (r.code in NETWORK_CODES) == network
        ]

    def _level(self, chip: int, codes: Iterable[str], *, network: bool) -> str:
        table = self._config.table
        base = table.network_level(codes) if network else table.chip_level(codes)
        return severest([base, *(r.level for r in self._mode_reasons(chip, network))])

    def _entry(
        self, chip: int, codes: list[str], level: str, network: bool, kind: ChipKind
    ) -> ChipFault:
        reasons = self._mode_reasons(chip, network)
        since = self._since.get(chip, {})
        times = {c: (since[c], self._level(chip, [c], network=network)) for c in codes}
        for reason in sorted(reasons, key=_reason_order):
            times[reason.code] = (reason.time, reason.level)
        listed = list(codes) + sorted({r.code for r in reasons} - set(codes))
        return ChipFault(
            chip,
            network,
            level,
            tuple(listed),
            kind,
            level,
            tuple((c, at, lvl) for c, (at, lvl) in sorted(times.items())),
        )


def _reasons_text(
    reasons: Mapping[int, Mapping[tuple[str, str, str], Reason]], kind: ChipKind
) -> str:
    chips = {chip_name(c, kind): rs for c, rs in reasons.items() if rs}
    return (
        "{"
        + ",".join(
            go_json(name)
            + ":["
            + ",".join(r.to_go() for r in sorted(rs.values(), key=_reason_order))
            + "]"
            for name, rs in sorted(chips.items())
        )
        + "}"
    )


def _reason_order(reason: Reason) -> tuple[str, str, str]:
    return (reason.code, reason.kind, reason.level)


def _codes_of(codes: Iterable[str]) -> set[str]:
    present = set()
    for code in codes:
        try:
            present.add(canonical(code))
        except BadConfig:
            log.warning("ignoring fault code %r: not a hex number", code[:40])
    return present


def parse_reasons(text: str, kind: ChipKind) -> dict[int, list[Reason]]:
    """``UpgradeFaultReason`` as written (StringToReasonCm); a malformed one is logged and
    read as none."""
    if not text:
        return {}
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise TypeError("not a map of chips")
        result: dict[int, list[Reason]] = {}
        for name, items in raw.items():
            (chip,) = parse_chip_list(str(name), kind=kind)
            result[chip] = [
                Reason(
                    str(item["fault_code"]),
                    str(item["fault_level"]),
                    str(item["upgrade_type"]),
                    int(item["upgrade_time"]),
                )
                for item in items
            ]
    except (ValueError, TypeError, KeyError, RecursionError, InvalidInput) as bad:
        log.warning("ignoring a malformed UpgradeFaultReason: %s", str(bad)[:200])
        return {}
    return result
