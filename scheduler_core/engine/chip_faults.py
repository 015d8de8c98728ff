"""What a chip fault means for the scheduler, decided from its level as Huawei's components
decide it. Pure: a node's decoded DeviceInfo in, its faults out; a job's silencing
annotations and the clock in, the chips that fail under that job out.

- A chip listed ``-Unhealthy`` stops the pods on it, as Huawei's Volcano plugin reads the
  list (Ascend/mind-cluster v26.1.0 component/ascend-for-volcano/internal/rescheduling/task.go
  ``getTaskUseFaultCardHealthState``), unless every fault entry on it has a handling that
  leaves a running pod alone: ``NotHandleFault`` and
  ``SubHealthFault`` (the device plugin keeps such a chip healthy, component/
  ascend-device-plugin/pkg/device/ascendcommon.go ``isHealthy``), and ``PreSeparateNPU``,
  which does not evict: the job restarts only if it fails (ascend-for-volcano internal/
  rescheduling/job.go ``IsNormalJobNeedRestart``, ``isFaultJobCanRestarted``). A listed chip
  with no entry (an older device plugin) stays failed. A chip listed only
  ``-NetworkUnhealthy`` takes no new pod of a distributed job but stops no running one: the
  plugin's fault cards note it (``rescheduling/node.go``) and no task fails by it (checked
  beside the plugin itself: ``testbed/differential/faults.py``).
- A chip with a (non-network) ``PreSeparateNPU`` fault takes no new pod: ClusterD adds it to
  ``CardUnHealthy`` while no pod uses it (component/clusterd/pkg/application/faultmanager/
  cmprocess/preseparate/preseparate_fault_processor.go), as the device plugin does.
- A ``SubHealthFault`` handling makes the node sub-healthy (rescheduling/node.go
  ``setNodeHasCardSubHealthFault``), a last choice.
- Silencing (``huawei.com/schedule.filter.faultCode`` / ``…faultLevel``, read as ClusterD
  reads them, component/clusterd/pkg/domain/custom/custom_filter_fault_info.go): a fault code
  of a silenced code or level younger than its window does not fail the job's pods; after
  the window it does (cmprocess/custom/custom_filter_fault_processor.go ``shouldReportFault``).
  A code with no time in ``fault_time_and_level_map`` is never silenced (it is reported,
  l.201–204). ClusterD times the window from when it first received the code; here it runs
  from the code's ``fault_time``, which survives a restart of the scheduler.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from contract.annotations import FILTER_CODE_ANNOTATION, FILTER_LEVEL_ANNOTATION
from contract.chip_names import quoted
from contract.deviceinfo import ChipFault, DeviceInfo
from contract.fault_levels import (
    NORMAL,
    NORMAL_NETWORK,
    NOT_HANDLE,
    PRE_SEPARATE,
    SUB_HEALTH,
)

# Handlings whose fault leaves a running pod alone (module docstring).
KEEPS_RUNNING = frozenset({NOT_HANDLE, SUB_HEALTH, PRE_SEPARATE})
# ClusterD's ``normalFaultLevel`` (component/clusterd/pkg/common/constant/methods.go): a fault
# of these levels keeps a chip out of ``CardUnHealthy``, so it has nothing to silence.
NORMAL_LEVELS = frozenset({NOT_HANDLE, SUB_HEALTH, NORMAL, NORMAL_NETWORK})

DEFAULT_WINDOW = 60  # seconds (clusterd constant/const.go CustomFilterFaultDefaultTimeout)
MAX_WINDOW = 24 * 60 * 60  # custom_filter_fault_info.go maxAnnoValue
# Switch fault names a job may give, as the levels ClusterD compares them with
# (custom_filter_fault_info.go ``switchFaultLevelMap``).
SWITCH_LEVELS = {
    "ResetFault": "Separate",
    "SeparateFault": "Separate",
    "RestartRequestFault": "RestartRequest",
    "PreSeparateFault": "PreSeparate",
}
_WHOLE = re.compile(r"[+-]?[0-9]{1,20}")  # Go's strconv.ParseInt(s, 10, 64), no underscores


@dataclass(frozen=True, slots=True)
class CodeFault:
    """One fault code on a failed chip, as ClusterD splits an entry (component/clusterd/pkg/
    domain/faultdomain/fault_utils.go ``splitDeviceFault``): its level from
    ``fault_time_and_level_map``, else the entry's; ``since_ms`` its ``fault_time`` (None:
    none given, never silenced)."""

    chip: int
    code: str
    level: str
    since_ms: int | None = None


@dataclass(frozen=True, slots=True)
class NodeFaults:
    """One node's chip faults as the scheduler acts on them."""

    failed: frozenset[int] = frozenset()  # chips that stop a running pod (no job silences)
    pre_separated: frozenset[int] = frozenset()  # chips that take no new pod
    sub_healthy: bool = False
    codes: tuple[CodeFault, ...] = ()  # the failed chips' fault codes (what a job may silence)


def handling(fault: ChipFault) -> str:
    """The entry's ``fault_handling``; its level when an older writer left it out."""
    return fault.handling or fault.level


def node_faults(info: DeviceInfo) -> NodeFaults:
    """The faults of a node's DeviceInfo (module docstring)."""
    failed = set()
    for chip in info.unhealthy:
        kinds = {handling(f) for f in info.faults if f.chip == chip and not f.network}
        if not kinds or not kinds <= KEEPS_RUNNING:
            failed.add(chip)
    pre = frozenset(f.chip for f in info.faults if not f.network and handling(f) == PRE_SEPARATE)
    codes = tuple(c for f in info.faults if f.chip in failed for c in _codes(f))
    return NodeFaults(
        frozenset(failed),
        pre,
        info.switch_sub_healthy or any(handling(f) == SUB_HEALTH for f in info.faults),
        codes,
    )


def _codes(fault: ChipFault) -> list[CodeFault]:
    times = {code: (when, level) for code, when, level in fault.times}
    split = []
    for code in fault.codes or ("",):
        when, level = times.get(code, (None, handling(fault)))
        split.append(CodeFault(fault.chip, code, level or handling(fault), when))
    return split


@dataclass(frozen=True, slots=True)
class Silence:
    """A job's silencing: fault codes and levels, each with its window in seconds."""

    codes: tuple[tuple[str, int], ...] = ()
    levels: tuple[tuple[str, int], ...] = ()

    def window(self, fault: CodeFault) -> int | None:
        """The fault's window (None: not silenced); a code's own entry rules over its
        level's, as ``shouldReportFault`` looks at the codes first."""
        for key, given in ((fault.code, self.codes), (fault.level, self.levels)):
            for name, seconds in given:
                if name == key:
                    return seconds
        return None


def silence_of(annotations: Mapping[str, str]) -> Silence | str:
    """The job's silencing from its annotations; a string says what is malformed (the job
    then has none). Parsed as ClusterD's ``parseCustomFilterFaultAnnoValue``: items split at
    commas outside brackets (full-width ``，`` / ``：`` accepted), ``key`` or ``key:seconds``;
    a window outside 0–86400 s is refused here, where ClusterD falls back to 60 s."""
    codes = _entries(annotations.get(FILTER_CODE_ANNOTATION, ""), FILTER_CODE_ANNOTATION)
    levels = _entries(annotations.get(FILTER_LEVEL_ANNOTATION, ""), FILTER_LEVEL_ANNOTATION)
    if isinstance(codes, str):
        return codes
    if isinstance(levels, str):
        return levels
    return Silence(codes, levels)


def _entries(value: str, key: str) -> tuple[tuple[str, int], ...] | str:
    value = value.replace("，", ",").replace("：", ":")
    found: dict[str, int] = {}
    for raw in _split(value):
        item = raw.strip()
        if not item:
            continue
        name, colon, seconds = item.partition(":")
        name = SWITCH_LEVELS.get(name.strip(), name.strip())
        window = DEFAULT_WINDOW
        if colon:
            text = seconds.strip()
            if not _WHOLE.fullmatch(text) or not 0 <= int(text) <= MAX_WINDOW:
                return f"{key}: {quoted(item)}: the window must be whole seconds in 0–{MAX_WINDOW}"
            window = int(text)
        found[name] = window  # a later item overrides an earlier one, as in ClusterD's map
    return tuple(sorted(found.items()))


def _split(value: str) -> list[str]:
    """Split at commas outside square brackets (``splitValueWithComma``)."""
    items, current, depth = [], "", 0
    for ch in value:
        depth += 1 if ch == "[" else -1 if ch == "]" else 0
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    return [*items, current] if current else items


def silenced(fault: CodeFault, silence: Silence, now: float) -> bool:
    """Whether the job does not see this fault yet (its window not over)."""
    window = silence.window(fault)
    if window is None or fault.since_ms is None:
        return False
    return now * 1000 - fault.since_ms <= window * 1000


def job_failed_chips(
    silence: Silence, node_faults: Mapping[str, NodeFaults], now: float
) -> dict[str, frozenset[int]]:
    """node → the chips that fail under a job with this silencing: a failed chip, unless
    every fault code on it that makes it unusable is silenced now."""
    answer = {}
    for node, faults in node_faults.items():
        if not (silence.codes or silence.levels):
            answer[node] = faults.failed
            continue
        by_chip: dict[int, list[CodeFault]] = {}
        for fault in faults.codes:
            if fault.level not in NORMAL_LEVELS:
                by_chip.setdefault(fault.chip, []).append(fault)
        answer[node] = frozenset(
            chip
            for chip in faults.failed
            if not by_chip.get(chip) or not all(silenced(f, silence, now) for f in by_chip[chip])
        )
    return answer


def silence_ends(silence: Silence, faults: Iterable[NodeFaults], now: float) -> float | None:
    """When the first fault silenced now becomes visible to the job (None: none is): the
    time to look for fault jobs again."""
    ends = []
    for node in faults:
        for fault in node.codes:
            window = silence.window(fault)
            if fault.since_ms is not None and window is not None and silenced(fault, silence, now):
                ends.append((fault.since_ms + window * 1000) / 1000)
    return min(ends, default=None)
