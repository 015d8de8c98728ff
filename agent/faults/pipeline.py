"""The agent's fault pipeline: the override ConfigMap ``kube-system/mindx-dl-fault-config``
polled as upstream polls it (Ascend/mind-cluster component/ascend-device-plugin
pkg/server/manager.go ``pollFaultCodeCM``: every ``PollInterval`` seconds, 300 by default,
30..3600), the fault state machine, and a fault Event on the agent's pod per transition
(reason Occur / Recovery, action = the code's level: pkg/device/ascendcommon.go
``doWriteFaultToEvent``; ``docs/en/scheduling/api/ascend_device_plugin.md`` Table 6).

A key of the override that is not valid (bad JSON, an unknown level, a value out of range)
is logged once, naming the key and the fault, and the last good table stays in force.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import replace
from datetime import UTC, datetime

from agent.faults.escalation import OCCUR, FaultMachine, Observation, Transition
from agent.faults.table import (
    CUSTOMIZATION_KEY,
    FAULT_CODE_KEY,
    SWITCH_KEY,
    BadConfig,
    FaultConfig,
    check_switch_table,
    default_config,
    parse_customization,
    parse_table,
)
from chip_drivers.chips import NodeChips
from contract.chip_names import ChipKind, chip_name
from infra.events import EventRecorder, ObjectRef
from infra.kube.port import KubeError, KubeGateway, NotFound

log = logging.getLogger(__name__)

CONFIG_NAMESPACE = "kube-system"
CONFIG_NAME = "mindx-dl-fault-config"
POLL_KEY = "PollInterval"
POLL_DEFAULT, POLL_MIN, POLL_MAX = 300.0, 30.0, 3600.0
RELEASE_REASON = "EventReleaseUpgradeFault"  # constants.go


class FaultPipeline:
    """Fault codes → levels → DeviceInfo content, Events. ``levels()`` gives each faulty
    chip's level after escalation (the hot-reset manager reads it)."""

    def __init__(
        self,
        gateway: KubeGateway | None = None,
        *,
        sub_health_codes: frozenset[str] = frozenset(),
        events: EventRecorder | None = None,
        pod: ObjectRef | None = None,
        node: str = "",
        poll_interval: float | None = None,
    ) -> None:
        self._gateway = gateway
        self._sub_health = sub_health_codes
        defaults = default_config()
        self._config = FaultConfig(
            defaults.table.with_sub_health(sub_health_codes), defaults.customization
        )
        self.machine = FaultMachine(self._config)
        self._events = events
        self._pod = pod
        self._node = node
        self._fixed_poll = poll_interval  # tests: a shorter period than PollInterval allows
        self._poll = poll_interval or POLL_DEFAULT
        self._polled_at: float | None = None
        self._seen: dict[str, str | None] = {}  # key → the text last looked at

    def levels(self) -> Mapping[int, str]:
        return self.machine.levels()

    def observe(self, node: NodeChips, held: Collection[int], now: float) -> Observation:
        """Poll the override when due, then take the chips' poll; Events for what changed."""
        if self._polled_at is None or now - self._polled_at >= self._poll:
            self._polled_at = now
            self.refresh()
        seen = self.machine.observe(node, held, int(now * 1000))
        for change in seen.transitions:
            self._event(change, node, now)
        return seen

    # ---- the override ----------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the override ConfigMap once; apply each changed valid key."""
        if self._gateway is None:
            return
        try:
            data = self._gateway.get_configmap(CONFIG_NAMESPACE, CONFIG_NAME).get("data") or {}
        except NotFound:
            data = {}
        except KubeError as failed:
            log.warning(
                "%s/%s not read (%s): the fault table stays as it is",
                CONFIG_NAMESPACE,
                CONFIG_NAME,
                failed,
            )
            return
        config = self._config
        defaults = default_config()
        for key in (FAULT_CODE_KEY, CUSTOMIZATION_KEY, SWITCH_KEY, POLL_KEY):
            text = data.get(key)
            if key in self._seen and self._seen[key] == text:
                continue
            self._seen[key] = text
            try:
                if key == FAULT_CODE_KEY:
                    table = defaults.table if text is None else parse_table(text)
                    config = replace(config, table=table.with_sub_health(self._sub_health))
                elif key == CUSTOMIZATION_KEY:
                    custom = defaults.customization if text is None else parse_customization(text)
                    config = replace(config, customization=custom)
                elif key == SWITCH_KEY and text is not None:
                    check_switch_table(text)
                elif key == POLL_KEY:
                    self._poll = self._fixed_poll or _poll_interval(text)
            except BadConfig as bad:
                log.error(
                    "%s/%s key %s ignored, the last good one stays: %s",
                    CONFIG_NAMESPACE,
                    CONFIG_NAME,
                    key,
                    bad,
                )
                continue
            if text is not None:
                log.info("%s/%s key %s applied", CONFIG_NAMESPACE, CONFIG_NAME, key)
        if config != self._config:
            self._config = config
            self.machine.reconfigure(config)

    # ---- Events ----------------------------------------------------------------------------

    def written(self, kind: ChipKind) -> None:
        """The DeviceInfo was written: one Event for the escalations it no longer lists, as
        upstream writes after each write (ascendcommon.go ``WriteUpgradeReasonRemoveEvent``:
        Normal, reason and action ``EventReleaseUpgradeFault``, the message the released
        reasons in ``UpgradeFaultReason``'s form)."""
        released = self.machine.take_released(kind)
        if released is None or self._events is None or self._pod is None:
            return
        self._events.record(self._pod, "Normal", RELEASE_REASON, released, action=RELEASE_REASON)

    def _event(self, change: Transition, node: NodeChips, now: float) -> None:
        if self._events is None or self._pod is None:
            return
        when = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S")
        message = (
            f"device fault, nodeName:{self._node}, assertion:{change.assertion}, "
            f"npu:{chip_name(change.chip, node.kind)}, faultCodes:{change.code}, "
            f"faultLevelName:{change.level}, "
            f"alarmRaisedTime:{when}"
        )
        kind = "Warning" if change.assertion == OCCUR else "Normal"
        self._events.record(self._pod, kind, change.assertion, message, action=change.level)


def _poll_interval(text: str | None) -> float:
    if text is None:
        return POLL_DEFAULT
    try:
        value = float(int(text.strip()))
    except ValueError:
        raise BadConfig(f"{POLL_KEY} {text[:40]!r} is not a number of seconds") from None
    if not POLL_MIN <= value <= POLL_MAX:
        raise BadConfig(f"{POLL_KEY} {value:.0f} is outside {POLL_MIN:.0f}..{POLL_MAX:.0f}")
    return value
