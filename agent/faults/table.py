"""The fault-code table and the fault customization, parsed once into frozen values.

Levels, their order and the validation ranges follow Ascend/mind-cluster
component/ascend-device-plugin pkg/common/fault_code.go (``GetFaultTypeByCode``,
``GetNetworkFaultTypeByCode``, ``getMostSeriousFaultType``, ``LoadFaultCode``,
``validateFaultFrequencyCustomization``, ``validateFaultDurationCustomization``) and
constants.go (the limits). Bad input raises BadConfig naming what is wrong; unlike upstream,
which skips a bad entry, a bad key is refused whole so that the last good one stays in force.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from types import MappingProxyType

from contract.fault_levels import (
    FREE_RESTART_NPU,
    LEVELS,
    MANUALLY_SEPARATE,
    NORMAL,
    NOT_HANDLE,
    PRE_SEPARATE,
    RESTART_BUSINESS,
    RESTART_NPU,
    RESTART_REQUEST,
    SEPARATE,
    SEVERITY,
    SUB_HEALTH,
)

DURATION_LEVELS = LEVELS - {MANUALLY_SEPARATE}  # FaultDurationTypeSet
# Levels under which a chip stays healthy (ascendcommon.go isHealthy / isNetworkHealthy).
HEALTHY_CHIP_LEVELS = frozenset({NORMAL, NOT_HANDLE, SUB_HEALTH})
HEALTHY_NETWORK_LEVELS = frozenset({NORMAL, NOT_HANDLE})

# RoCE / UBoE network codes (NetworkFaultCodes): link down, UBoE port down, pre-separate and
# sub-health; they make CardNetworkUnhealthy entries and the -NetworkUnhealthy list.
LINK_DOWN = "81078603"
NETWORK_CODES = frozenset({LINK_DOWN, "81078607", "110001024", "110000002"})

FAULT_CODE_KEY = "faultCode.json"
CUSTOMIZATION_KEY = "faultCustomization.json"
SWITCH_KEY = "SwitchFaultCode.json"

# faultCode.json: each list and the level of its codes; the *Network* lists hold network codes.
_CHIP_LISTS = {
    "NotHandleFaultCodes": NOT_HANDLE,
    "RestartRequestCodes": RESTART_REQUEST,
    "RestartBusinessCodes": RESTART_BUSINESS,
    "RestartNPUCodes": RESTART_NPU,
    "FreeRestartNPUCodes": FREE_RESTART_NPU,
    "SeparateNPUCodes": SEPARATE,
    "PreSeparateNPUCodes": PRE_SEPARATE,
    "SubHealthFaultCodes": SUB_HEALTH,
}
_NETWORK_LISTS = {
    "NotHandleFaultNetworkCodes": NOT_HANDLE,
    "PreSeparateNPUNetworkCodes": PRE_SEPARATE,
    "SeparateNPUNetworkCodes": SEPARATE,
    "SubHealthFaultNetworkCodes": SUB_HEALTH,
}
# A network code listed under a restart level is not handled (mappingChipFaultToNetwork…).
_NETWORK_LEVEL = {NOT_HANDLE, PRE_SEPARATE, SEPARATE, SUB_HEALTH}
_SWITCH_LISTS = frozenset(
    {
        "NotHandleFaultCodes",
        "SubHealthFaultCodes",
        "RestartRequestFaultCodes",
        "PreSeparateFaultCodes",
        "ResetFaultCodes",
        "SeparateFaultCodes",
    }
)
MAX_SWITCH_CODE = 50  # characters of "[0x00f103b0,155904,na,na]" (MaxLengthOfFaultCode)

# constants.go limits, in seconds.
FREQUENCY_WINDOW = (60, 864000)
RELEASE_WINDOW = (60, 1 << 32)
FREQUENCY_TIMES = (1, 100)
FAULT_TIMEOUT = (0, 600)
RECOVER_TIMEOUT = (0, 86400)
MAX_BYTES = 1024 * 1024  # a ConfigMap's size limit: anything larger is not a table


class BadConfig(ValueError):
    """A fault-code table or customization that cannot be used; the message says why."""


def canonical(code: str) -> str:
    """A fault code as upstream compares them (a hex number): upper case, no ``0x``, no
    leading zeros. BadConfig when it is not hex."""
    text = code.strip()
    try:
        value = int(text, 16)
    except ValueError:
        raise BadConfig(f"fault code {text[:40]!r} is not a hex number") from None
    if value < 0:
        raise BadConfig(f"fault code {text[:40]!r} is negative")
    return f"{value:X}"


def severest(levels: Iterable[str]) -> str:
    """The most serious of some levels; NormalNPU when there is none."""
    present = set(levels)
    return next((level for level in SEVERITY if level in present), NORMAL)


@dataclass(frozen=True, slots=True)
class FaultTable:
    """``faultCode.json``: each code's level, for chip codes and network codes apart."""

    chip: Mapping[str, str]
    network: Mapping[str, str]

    def chip_level(self, codes: Iterable[str]) -> str:
        """GetFaultTypeByCode: the severest level of the listed codes; a chip whose codes
        are all unknown is SeparateNPU (upstream's level for an unknown code without a DCMI
        severity); NormalNPU without codes."""
        codes = list(codes)
        if not codes:
            return NORMAL
        known = [self.chip[c] for c in codes if c in self.chip]
        return severest(known) if known else SEPARATE

    def network_level(self, codes: Iterable[str]) -> str:
        """GetNetworkFaultTypeByCode: an unlisted network code is PreSeparateNPU."""
        codes = list(codes)
        if not codes:
            return NORMAL
        known = [self.network[c] for c in codes if c in self.network]
        return severest(known) if known else PRE_SEPARATE

    def level(self, code: str) -> str:
        """One code's level from the table alone (the level a fault Event names)."""
        return self.network_level([code]) if code in NETWORK_CODES else self.chip_level([code])

    def with_sub_health(self, codes: Iterable[str]) -> FaultTable:
        """The table with these chip codes at SubHealthFault whatever it listed (the agent's
        ``--sub-health-codes``: an addition to Huawei's table)."""
        extra = {canonical(c): SUB_HEALTH for c in codes}
        extra = {c: level for c, level in extra.items() if c not in NETWORK_CODES}
        if not extra:
            return self
        return FaultTable(MappingProxyType({**self.chip, **extra}), self.network)


@dataclass(frozen=True, slots=True)
class Frequency:
    """N occurrences within ``window`` seconds → ``level``; released ``release`` seconds
    after the last recovery (None: never, upstream's MaxReleaseTimeWindow)."""

    window: int
    times: int
    level: str
    release: int | None


@dataclass(frozen=True, slots=True)
class Duration:
    """A fault counts (at ``level``) once present for more than ``fault_timeout`` seconds,
    and is recovered once absent for more than ``recover_timeout`` seconds."""

    fault_timeout: int
    recover_timeout: int
    level: str


@dataclass(frozen=True, slots=True)
class Customization:
    """``faultCustomization.json``: the frequency and duration rules by canonical code."""

    frequency: Mapping[str, Frequency]
    duration: Mapping[str, Duration]

    @property
    def autofill_release(self) -> int | None:
        """How long a ManuallySeparateNPU chip without a recorded reason stays separated:
        the longest finite ReleaseTimeWindow (setAutofillReasonReleaseTime); None: never."""
        windows = [f.release for f in self.frequency.values() if f.release is not None]
        return max(windows) if windows else None


@dataclass(frozen=True, slots=True)
class FaultConfig:
    table: FaultTable
    customization: Customization


def _load(text: str, key: str) -> dict[str, object]:
    if len(text) > MAX_BYTES:
        raise BadConfig(f"{key} has {len(text)} characters (at most {MAX_BYTES})")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as bad:
        raise BadConfig(f"{key} is not JSON: {str(bad)[:200]}") from None
    if not isinstance(value, dict):
        raise BadConfig(f"{key} is not a JSON object")
    return value


def _strings(value: object, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadConfig(f"{where} is not a list of strings")
    return value


def parse_table(text: str) -> FaultTable:
    """Parse ``faultCode.json``."""
    raw = _load(text, FAULT_CODE_KEY)
    chip: dict[str, list[str]] = {}
    network: dict[str, list[str]] = {}
    for name, codes in raw.items():
        level = _CHIP_LISTS.get(name) or _NETWORK_LISTS.get(name)
        if level is None:
            known = ", ".join(sorted({*_CHIP_LISTS, *_NETWORK_LISTS}))
            raise BadConfig(f"{FAULT_CODE_KEY}: unknown list {name[:60]!r} (known: {known})")
        try:
            listed = [canonical(c) for c in _strings(codes, f"{FAULT_CODE_KEY}.{name}")]
        except BadConfig as bad:
            raise BadConfig(f"{FAULT_CODE_KEY}.{name}: {bad}") from None
        for code in listed:
            if name in _NETWORK_LISTS:
                network.setdefault(code, []).append(level)
            elif code in NETWORK_CODES:
                network.setdefault(code, []).append(
                    level if level in _NETWORK_LEVEL else NOT_HANDLE
                )
            else:
                chip.setdefault(code, []).append(level)
    return FaultTable(
        MappingProxyType({c: severest(levels) for c, levels in chip.items()}),
        MappingProxyType({c: severest(levels) for c, levels in network.items()}),
    )


def _int(entry: Mapping[str, object], name: str, where: str, bounds: tuple[int, int]) -> int:
    value = entry.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadConfig(f"{where}.{name} {value!r} is not an integer")
    low, high = bounds
    if not low <= value <= high:
        raise BadConfig(f"{where}.{name} {value} is outside {low}..{high}")
    return value


def _rule_codes(entry: Mapping[str, object], where: str, seen: set[str]) -> list[str]:
    codes = [canonical(c) for c in _strings(entry.get("EventId"), f"{where}.EventId")]
    if not codes:
        raise BadConfig(f"{where}.EventId is empty")
    for code in codes:
        if code in seen:
            raise BadConfig(f"{where}: event id {code} is configured twice")
        seen.add(code)
    return codes


def _level(entry: Mapping[str, object], where: str, allowed: frozenset[str]) -> str:
    level = entry.get("FaultHandling")
    if level not in allowed:
        raise BadConfig(
            f"{where}.FaultHandling {level!r} is not one of {', '.join(sorted(allowed))}"
        )
    assert isinstance(level, str)
    return level


def _entries(raw: Mapping[str, object], name: str) -> list[Mapping[str, object]]:
    value = raw.get(name) or []
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise BadConfig(f"{CUSTOMIZATION_KEY}.{name} is not a list of objects")
    return value


def parse_customization(text: str) -> Customization:
    """Parse ``faultCustomization.json`` (its GraceTolerance timers belong to the retired
    graceful reset, ``-hotReset=1``: checked to be an object, not used)."""
    raw = _load(text, CUSTOMIZATION_KEY)
    if not isinstance(raw.get("GraceTolerance", {}), dict):
        raise BadConfig(f"{CUSTOMIZATION_KEY}.GraceTolerance is not an object")
    frequency: dict[str, Frequency] = {}
    seen: set[str] = set()
    for i, entry in enumerate(_entries(raw, "FaultFrequency")):
        where = f"{CUSTOMIZATION_KEY}.FaultFrequency[{i}]"
        codes = _rule_codes(entry, where, seen)
        release = entry.get("ReleaseTimeWindow", 0)
        rule = Frequency(
            window=_int(entry, "TimeWindow", where, FREQUENCY_WINDOW),
            times=_int(entry, "Times", where, FREQUENCY_TIMES),
            level=_level(entry, where, LEVELS),
            # 0 or absent: never released (upstream's default MaxReleaseTimeWindow).
            release=_int(entry, "ReleaseTimeWindow", where, RELEASE_WINDOW) if release else None,
        )
        if rule.level != MANUALLY_SEPARATE and rule.release is None:
            raise BadConfig(f"{where}: FaultHandling {rule.level} needs a ReleaseTimeWindow")
        frequency.update(dict.fromkeys(codes, rule))
    duration: dict[str, Duration] = {}
    seen = set()
    for i, entry in enumerate(_entries(raw, "FaultDuration")):
        where = f"{CUSTOMIZATION_KEY}.FaultDuration[{i}]"
        codes = _rule_codes(entry, where, seen)
        rule_d = Duration(
            fault_timeout=_int(entry, "FaultTimeout", where, FAULT_TIMEOUT),
            recover_timeout=_int(entry, "RecoverTimeout", where, RECOVER_TIMEOUT),
            level=_level(entry, where, DURATION_LEVELS),
        )
        duration.update(dict.fromkeys(codes, rule_d))
    return Customization(MappingProxyType(frequency), MappingProxyType(duration))


def check_switch_table(text: str) -> None:
    """Check ``SwitchFaultCode.json`` (codes like ``[0x00f103b0,155904,na,na]``). The agent
    reports no switch faults, so a valid one changes nothing; a bad one is named."""
    raw = _load(text, SWITCH_KEY)
    for name, codes in raw.items():
        if name not in _SWITCH_LISTS:
            raise BadConfig(f"{SWITCH_KEY}: unknown list {name[:60]!r}")
        for code in _strings(codes, f"{SWITCH_KEY}.{name}"):
            parts = code.strip("[]").split(",")
            if len(code) > MAX_SWITCH_CODE or not code.startswith("[") or len(parts) != 4:
                raise BadConfig(f"{SWITCH_KEY}.{name}: {code[:60]!r} is not [code,id,kind,port]")


def _shipped(name: str) -> str:
    return resources.files("agent.faults").joinpath("data", name).read_text(encoding="utf-8")


@cache
def default_config() -> FaultConfig:
    """Huawei's shipped defaults (agent/faults/data, see its NOTICE.md)."""
    return FaultConfig(
        parse_table(_shipped(FAULT_CODE_KEY)), parse_customization(_shipped(CUSTOMIZATION_KEY))
    )
