"""Huawei's Volcano plugin settings (``init-params``), read from Volcano's scheduler ConfigMap.

A MindCluster cluster configures ``ascend-for-volcano`` in Volcano's scheduler configuration::

    configurations:
      - name: init-params
        arguments: {"grace-over-time": "900", "nslb-version": "1.0", ...}

Each key is read as upstream reads it (Ascend/mind-cluster component/ascend-for-volcano/
plugin/factory.go ``initStaticParameters``, ``initDynamicParameters``), with its default and
its answer to a bad value, which is never a refusal: a warning and the default.

- ``grace-over-time``: seconds, 2–3600, else 900 (``getGraceDeleteTime``);
- ``nslb-version``: ``1.0`` or ``2.0``, else 1.0 (``getNslbVersion``);
- ``shared-tor-num``: 1 or 2, else 2 (``getShardTorNum``);
- ``super-pod-size``: an integer above 0, else 48 (``getSizeOfSuperPod``);
- ``reserve-nodes``: an integer above 0, else 2; at least ``super-pod-size``: 2 when the
  SuperPoD has more than 2 nodes, else 0 (``getReserveNodes``);
- ``useClusterInfoManager``, ``forceEnqueue``, ``self-maintain-available-card``: a missing
  key is true, a present one true only when it is ``"true"`` (``getUseClusterDConfig``,
  ``getForceEnqueueConfig``, ``getSelfMaintainAvailCard``);
- ``presetVirtualDevice``, ``prefer-previous-node``: ``"true"`` only is true, missing false
  (``getPresetVirtualDeviceConfig``, ``getPreferPreviousNodeConfig``);
- ``resource-level-config``: multi-level scheduling's trees (``initResourceLevels``), not
  scheduled here: named in the log when set.

Only a configuration that has ``init-params`` is Huawei's: a Volcano without it gives nothing
(our own defaults stand). Pure: text in, values out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml

log = logging.getLogger(__name__)

CONFIGURATION = "init-params"  # common/util/type.go CMInitParamKey
DEFAULT_KEY = "volcano-scheduler.conf"
GRACE_MIN, GRACE_MAX, GRACE_DEFAULT = 2, 3600, 900
SUPER_POD_SIZE, RESERVE_NODES = 48, 2
NOT_SCHEDULED = ("presetVirtualDevice", "resource-level-config")
MAX_BYTES = 1024 * 1024  # a ConfigMap's data is at most 1 MiB


class BadLocation(ValueError):
    """``--volcano-config`` does not name a ConfigMap (``<namespace>/<name>[:<key>]``)."""


@dataclass(frozen=True, slots=True)
class Location:
    namespace: str
    name: str
    key: str = DEFAULT_KEY

    @staticmethod
    def parse(text: str) -> Location:
        where, _, key = text.partition(":")
        namespace, slash, name = where.partition("/")
        if not slash or not namespace or not name or "/" in name or (_ and not key):
            raise BadLocation(
                f"{text!r} is not <namespace>/<name>[:<key>] "
                "(e.g. volcano-system/volcano-scheduler-configmap:volcano-scheduler.conf)"
            )
        return Location(namespace, name, key or DEFAULT_KEY)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}:{self.key}"


@dataclass(frozen=True, slots=True)
class InitParams:
    """What Volcano's ``init-params`` set, as the flags' destinations (only the keys it
    has; a bad value already replaced by upstream's default), and each warning upstream
    would log for them."""

    values: Mapping[str, object] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    found: bool = False  # the configuration has init-params at all


def _int(text: str) -> int | None:
    try:
        return int(text.strip(), 10) if text.strip().lstrip("+-").isdigit() else None
    except ValueError:
        return None


def from_arguments(arguments: Mapping[str, str]) -> InitParams:
    """The settings of one ``init-params`` argument map (values as strings, as Volcano's
    ``framework.Arguments`` holds them)."""
    values: dict[str, object] = {}
    warnings: list[str] = []
    args = {str(k): _go_string(v) for k, v in arguments.items()}

    if "grace-over-time" in args:
        text = args["grace-over-time"]
        number = _int(text)
        if number is None or not GRACE_MIN <= number <= GRACE_MAX:
            warnings.append(
                f"grace-over-time {text!r} is not in [{GRACE_MIN}, {GRACE_MAX}]: "
                f"{GRACE_DEFAULT} (upstream's default)"
            )
            number = GRACE_DEFAULT
        values["grace_over_time"] = float(number)
    if "nslb-version" in args:
        text = args["nslb-version"]
        if text not in ("1.0", "2.0"):
            warnings.append(f"nslb-version {text!r} is neither 1.0 nor 2.0: 1.0")
            text = "1.0"
        values["nslb_version"] = text
    if "shared-tor-num" in args:
        text = args["shared-tor-num"]
        number = _int(text)
        if number not in (1, 2):
            warnings.append(f"shared-tor-num {text!r} is neither 1 nor 2: 2")
            number = 2
        values["shared_tor_num"] = number
    size = SUPER_POD_SIZE
    if "super-pod-size" in args:
        size = _positive(args["super-pod-size"], "super-pod-size", SUPER_POD_SIZE, warnings)
        values["super_pod_size"] = size
    if "reserve-nodes" in args:
        reserve = _positive(args["reserve-nodes"], "reserve-nodes", RESERVE_NODES, warnings)
        if reserve >= size:
            valid = RESERVE_NODES if size > RESERVE_NODES else 0
            warnings.append(f"reserve-nodes {reserve} is not below super-pod-size {size}: {valid}")
            reserve = valid
        values["reserve_nodes"] = reserve
    for key, dest in (
        ("useClusterInfoManager", "cluster_info_manager"),
        ("forceEnqueue", "force_enqueue"),
        ("self-maintain-available-card", "self_maintain"),
        ("prefer-previous-node", "prefer_previous_node"),
    ):
        if key in args:
            values[dest] = args[key] == "true"  # Go's ``== "true"``: "True" is false
    for key in NOT_SCHEDULED:
        if key in args:
            values[key] = args[key]
    return InitParams(values, tuple(warnings), True)


def _go_string(value: object) -> str:
    """A YAML value as Volcano's string map holds it (``true``, not Python's ``True``)."""
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def _positive(text: str, key: str, default: int, warnings: list[str]) -> int:
    number = _int(text)
    if number is None or number <= 0:
        warnings.append(f"{key} {text!r} is not an integer above 0: {default}")
        return default
    return number


def from_configuration(text: str) -> InitParams:
    """Volcano's scheduler configuration (YAML): its ``init-params`` settings, or none when
    it has no such configuration. ValueError names what cannot be read."""
    if len(text) > MAX_BYTES:
        raise ValueError(f"the configuration has {len(text)} characters (at most {MAX_BYTES})")
    try:
        conf = yaml.safe_load(text)
    except yaml.YAMLError as bad:
        first = str(bad).splitlines()[0] if str(bad) else type(bad).__name__
        raise ValueError(f"the configuration is not YAML: {first}") from None
    if conf is None:
        return InitParams()
    if not isinstance(conf, dict):
        raise ValueError("the configuration is not a mapping")
    configurations = conf.get("configurations") or []
    if not isinstance(configurations, list):
        raise ValueError("its configurations is not a list")
    for entry in configurations:
        if isinstance(entry, dict) and entry.get("name") == CONFIGURATION:
            arguments = entry.get("arguments") or {}
            if not isinstance(arguments, dict):
                raise ValueError(f"{CONFIGURATION}'s arguments is not a mapping")
            if any(isinstance(v, (dict, list)) for v in arguments.values()):
                raise ValueError(f"{CONFIGURATION}'s arguments must be single values")
            return from_arguments(arguments)
    return InitParams()
