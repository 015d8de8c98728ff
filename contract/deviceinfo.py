"""The ``mindx-dl-deviceinfo-<node>`` ConfigMap: the agent writes it, schedulers read it.

Wire format of Huawei's device plugin (``pkg/device/ascend910.go updateDeviceInfo``): data key
``DeviceInfoCfg`` holds
``{"DeviceInfo":{"DeviceList":{…},"UpdateTime":n},"CheckCode":"<sha256>"}`` where the
CheckCode is the SHA-256 of Go's ``json.Marshal`` of ``{"DeviceList":…,"UpdateTime":n}``:
compact, map keys sorted, and Go's escaping (``<``, ``>``, ``&``, U+2028/2029 as ``\\u…``).
Pure: values in, text out, and back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from contract.chip_names import (
    ASCEND910,
    KINDS,
    NPU,
    ChipKind,
    InvalidInput,
    chip_name,
    parse_chip_list,
    quoted,
)
from contract.fault_levels import SUB_HEALTH
from contract.go_json import go_json

NAMESPACE = "kube-system"
NAME_PREFIX = "mindx-dl-deviceinfo-"
DATA_KEY = "DeviceInfoCfg"
SEPARATED_KEY = "ManuallySeparateNPU"
CONSUMER_LABEL = ("mx-consumer-cim", "true")
# A 16-chip server with a fault on every chip publishes about 4 KB: anything much larger is
# not a DeviceInfo, and reading it would only cost time.
MAX_BYTES = 64 * 1024
MAX_FAULTS = 1024  # 16 chips, each with a card and a network fault, fit many times over
MAX_AGE = 300  # seconds: a DeviceInfo older than this is stale (its agent writes far more often)

SWITCH_KEY = "SwitchInfoCfg"  # A3: the node's switch faults, outside DeviceInfoCfg
# MindCluster's sub-health: a chip fault of level SUB_HEALTH, or a switch reporting it (or
# this node status). It makes a node a last choice, never a refusal.
SUB_HEALTHY_STATUS = "SubHealthy"
CARD_FAULT = "CardUnhealthy"
NETWORK_FAULT = "CardNetworkUnhealthy"
NODE_FAULT = "NodeUnhealthy"  # a node's fault (Volcano's own), no chip: skipped when read
# Upstream's escalation reasons per chip (pkg/common/upgradefault.go), outside DeviceInfoCfg.
REASON_KEY = "UpgradeFaultReason"


def check_code(device_list: Mapping[str, str], update_time: int) -> str:
    payload = (
        '{"DeviceList":' + go_json(dict(device_list)) + ',"UpdateTime":' + str(update_time) + "}"
    )
    return hashlib.sha256(payload.encode()).hexdigest()


def configmap_name(node: str) -> str:
    return f"{NAME_PREFIX}{node}"


def node_of(configmap: str) -> str | None:
    return configmap[len(NAME_PREFIX) :] if configmap.startswith(NAME_PREFIX) else None


def chip_list(chips: Iterable[int], kind: ChipKind = ASCEND910) -> str:
    """Comma list sorted as strings, as the device plugin's ``sets.String.List()`` does."""
    return ",".join(sorted(chip_name(c, kind) for c in chips))


def keys(kind: ChipKind) -> tuple[str, str, str | None, str]:
    """The DeviceList keys of a chip kind: free, unhealthy, network-unhealthy (the training
    chips: 910 and the 950 family) and faults (``vnpu-and-inference.md`` §6). The 950's are
    ``huawei.com/npu-…`` (Ascend/mind-cluster component/ascend-device-plugin/pkg/common/
    device.go ``GetAscend910Key``)."""
    resource = kind.resource
    network = f"{resource}-NetworkUnhealthy" if kind in (ASCEND910, NPU) else None
    return resource, f"{resource}-Unhealthy", network, f"{resource}-Fault"


@dataclass(frozen=True, slots=True)
class ChipFault:
    chip: int
    network: bool  # CardNetworkUnhealthy instead of CardUnhealthy
    level: str
    codes: tuple[str, ...]
    kind: ChipKind = ASCEND910
    handling: str = ""  # fault_handling; "" when absent (then readers use the level)
    # fault_time_and_level_map: (code, fault time in ms as upstream, level), sorted by code
    times: tuple[tuple[str, int, str], ...] = ()

    def to_go(self) -> str:
        # Struct field order of the device plugin, not sorted, no omitempty (Ascend/mind-cluster
        # component/ascend-device-plugin pkg/common/proto.go DeviceFault): write it by hand.
        # Upstream's fault_handling is always the level (ascendcommon.go getDeviceFaultsWithMode).
        # FaultTimeAndLevel's struct order (fault_time, fault_level) inside a map sorted by code.
        times = ",".join(
            f'{go_json(code)}:{{"fault_time":{at},"fault_level":{go_json(level)}}}'
            for code, at, level in sorted(self.times)
        )
        return (
            '{"fault_type":'
            + go_json(NETWORK_FAULT if self.network else CARD_FAULT)
            + ',"npu_name":'
            + go_json(chip_name(self.chip, self.kind))
            + ',"large_model_fault_level":'
            + go_json(self.level)
            + ',"fault_level":'
            + go_json(self.level)
            + ',"fault_handling":'
            + go_json(self.handling or self.level)
            + ',"fault_code":'
            + go_json(",".join(self.codes))
            + ',"fault_time_and_level_map":{'
            + times
            + "}}"
        )


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """What one node publishes: free, unhealthy and network-unhealthy chips, faults."""

    free: frozenset[int]
    unhealthy: frozenset[int]
    network_unhealthy: frozenset[int]
    faults: tuple[ChipFault, ...] = ()
    update_time: int = 0
    super_pod_id: int | None = None  # MC-v6 A3 fields, outside the CheckCode
    server_index: int | None = None
    # Atlas 950 SuperPoD: the node's rack, after the CheckCode and outside it (Ascend/mind-cluster
    # component/ascend-device-plugin/pkg/common/proto.go NodeDeviceInfoCache ``RackID *int32``,
    # omitempty; -1 ``DefaultRackID`` when unknown).
    rack_id: int | None = None
    switch_sub_healthy: bool = False  # from SwitchInfoCfg, read only
    kind: ChipKind = ASCEND910  # whose keys the DeviceList has
    # Chips being hot-reset: ``<res>-Recovering``, written (empty too) for the kinds with a
    # network list, as upstream's ascend910.go updateDeviceInfo does.
    recovering: frozenset[int] = frozenset()

    @property
    def super_pod(self) -> int | None:
        """The node's SuperPoD, or None when it has none: the field is missing, or negative
        (-1: the driver answered 0xffffffff; -2: the device cannot report SuperPoD
        information or the query failed; Huawei's DeviceInfoCfg table in mind-cluster
        ``docs/.../api/ascend_device_plugin.md``). Upstream's SuperPoD predicate refuses a
        node whose id is below 0 (``ascend910a3/superpod/frame.go`` CheckNodeNPUByTask)."""
        if self.super_pod_id is None or self.super_pod_id < 0:
            return None
        return self.super_pod_id

    @property
    def rack(self) -> int | None:
        """The node's rack, or None when not set (missing or negative): upstream's 950 SuperPoD
        predicate refuses a node whose RackID is below 0 (``policy/chip8node8ra64sp/node.go``
        checkNodeStaticParams)."""
        if self.rack_id is None or self.rack_id < 0:
            return None
        return self.rack_id

    @property
    def sub_healthy(self) -> bool:
        return self.switch_sub_healthy or any(f.level == SUB_HEALTH for f in self.faults)

    def device_list(self) -> dict[str, str]:
        free, unhealthy, network, fault = keys(self.kind)
        devices = {
            free: chip_list(self.free, self.kind),
            unhealthy: chip_list(self.unhealthy, self.kind),
            fault: "[" + ",".join(f.to_go() for f in self.faults) + "]",
        }
        if network is not None:
            devices[network] = chip_list(self.network_unhealthy, self.kind)
            devices[recovering_key(self.kind)] = chip_list(self.recovering, self.kind)
        return devices


def recovering_key(kind: ChipKind) -> str:
    return f"{kind.resource}-Recovering"


def encode(
    info: DeviceInfo, separated: Iterable[int] = (), reasons: str | None = None
) -> dict[str, str]:
    """The ConfigMap's ``data``; ``reasons``: the ``UpgradeFaultReason`` text, when kept."""
    devices = info.device_list()
    body = (
        '{"DeviceInfo":{"DeviceList":'
        + go_json(devices)
        + ',"UpdateTime":'
        + str(info.update_time)
        + "}"
        + _super_pod_fields(info)
        + ',"CheckCode":'
        + go_json(check_code(devices, info.update_time))
        + ("" if info.rack_id is None else f',"RackID":{info.rack_id}')
        + "}"
    )
    data = {DATA_KEY: body, SEPARATED_KEY: chip_list(separated, info.kind)}
    if reasons is not None:
        data[REASON_KEY] = reasons
    return data


def _super_pod_fields(info: DeviceInfo) -> str:
    if info.super_pod_id is None:
        return ""
    return f',"SuperPodID":{info.super_pod_id},"ServerIndex":{info.server_index or 0}'


def _optional_int(cache: Mapping[str, object], key: str) -> int | None:
    value = cache.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidInput(f"{DATA_KEY}.{key} {value!r} is not an integer")
    return value


def _chips(text: str, key: str, kind: ChipKind) -> frozenset[int]:
    try:
        return frozenset(parse_chip_list(text, kind=kind))
    except InvalidInput as bad:
        raise InvalidInput(f"{DATA_KEY}.DeviceList[{key}]: {bad}") from None


def decode(data: Mapping[str, str]) -> DeviceInfo:
    """Read a published ConfigMap; a missing field or a CheckCode that does not match its
    content raises InvalidInput (VOL-v5 ignores such a ConfigMap, and so do we)."""
    text = data.get(DATA_KEY)
    if not isinstance(text, str):
        raise InvalidInput(f"no {DATA_KEY} key")
    if len(text) > MAX_BYTES:
        raise InvalidInput(f"{DATA_KEY} has {len(text)} characters (at most {MAX_BYTES})")
    try:
        cache = json.loads(text)
        devices = cache["DeviceInfo"]["DeviceList"]
        update_time = cache["DeviceInfo"]["UpdateTime"]
        code = cache["CheckCode"]
    except RecursionError:
        raise InvalidInput(f"{DATA_KEY} nests too deep to be a DeviceInfo cache") from None
    except (ValueError, KeyError, TypeError) as bad:
        reason = quoted(repr(bad))
        raise InvalidInput(f"{DATA_KEY} is not a DeviceInfo cache: {reason}") from None
    if not isinstance(devices, dict) or not all(isinstance(v, str) for v in devices.values()):
        raise InvalidInput(f"{DATA_KEY}.DeviceList is not a map of strings")
    if not isinstance(update_time, int) or isinstance(update_time, bool):
        raise InvalidInput(f"{DATA_KEY}.UpdateTime {update_time!r} is not an integer")
    if code != check_code(devices, update_time):
        raise InvalidInput(f"{DATA_KEY}.CheckCode does not match the content (stale or edited)")
    return from_fields(devices, update_time, cache, _switch_sub_healthy(data.get(SWITCH_KEY)))


def from_fields(
    devices: Mapping[str, str],
    update_time: int,
    cache: Mapping[str, object],
    switch_sub_healthy: bool = False,
) -> DeviceInfo:
    """A DeviceInfo from its fields, read and typed: its ``DeviceList``, ``UpdateTime`` and the
    cache around them (``SuperPodID``, ``ServerIndex``, ``RackID``). ``decode`` checks the
    CheckCode first; ClusterD's ``cluster-info-device-*`` carry the same fields without one
    (``contract.clusterd``). InvalidInput names a malformed list."""
    kind = next((k for k in KINDS.values() if k.resource in devices), ASCEND910)
    free, unhealthy, network, fault = keys(kind)
    return DeviceInfo(
        free=_chips(devices.get(free, ""), free, kind),
        unhealthy=_chips(devices.get(unhealthy, ""), unhealthy, kind),
        network_unhealthy=(
            _chips(devices.get(network, ""), network, kind) if network else frozenset()
        ),
        faults=_faults(devices.get(fault, "[]"), kind),
        update_time=update_time,
        super_pod_id=_optional_int(cache, "SuperPodID"),
        server_index=_optional_int(cache, "ServerIndex"),
        rack_id=_optional_int(cache, "RackID"),
        switch_sub_healthy=switch_sub_healthy,
        kind=kind,
        recovering=(
            _chips(devices.get(recovering_key(kind), ""), recovering_key(kind), kind)
            if network
            else frozenset()
        ),
    )


def _faults(text: str, kind: ChipKind) -> tuple[ChipFault, ...]:
    """The ``-Fault`` list, every field; an older device plugin's entries without
    ``fault_handling`` or ``fault_time_and_level_map`` read as "" and ()."""
    where = f"{DATA_KEY}.DeviceList[{keys(kind)[3]}]"
    try:
        entries = json.loads(text) if text else []
        if not isinstance(entries, list) or len(entries) > MAX_FAULTS:
            raise TypeError(f"not a list of at most {MAX_FAULTS} faults")
        faults = [_fault(entry, kind) for entry in entries if entry.get("fault_type") != NODE_FAULT]
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, InvalidInput) as bad:
        raise InvalidInput(f"{where} is malformed: {quoted(repr(bad))}") from None
    return tuple(faults)


def _fault(entry: Mapping[str, object], kind: ChipKind) -> ChipFault:
    chip = parse_chip_list(str(entry["npu_name"]), kind=kind)
    if len(chip) != 1:
        raise ValueError(f"npu_name {quoted(str(entry['npu_name']))} is not one chip")
    codes = str(entry.get("fault_code") or "")
    times = entry.get("fault_time_and_level_map") or {}
    if not isinstance(times, dict):
        raise TypeError("fault_time_and_level_map is not a map")
    return ChipFault(
        chip[0],
        entry.get("fault_type") == NETWORK_FAULT,
        str(entry.get("fault_level") or ""),
        tuple(c for c in codes.split(",") if c),
        kind,
        str(entry.get("fault_handling") or ""),
        tuple(
            (str(code), int(at["fault_time"]), str(at["fault_level"]))
            for code, at in sorted(times.items())
        ),
    )


def _switch_sub_healthy(text: str | None) -> bool:
    """Whether ``SwitchInfoCfg`` (``{"FaultCode":[…],"FaultLevel":"…","NodeStatus":"…"}``)
    says the node's switch is sub-healthy."""
    if not text:
        return False
    if len(text) > MAX_BYTES:
        raise InvalidInput(f"{SWITCH_KEY} has {len(text)} characters (at most {MAX_BYTES})")
    try:
        switch = json.loads(text)
        level, status = switch.get("FaultLevel", ""), switch.get("NodeStatus", "")
    except (ValueError, AttributeError, RecursionError) as bad:
        raise InvalidInput(f"{SWITCH_KEY} is malformed: {quoted(repr(bad))}") from None
    return SUB_HEALTH in (level, status) or status == SUB_HEALTHY_STATUS
