"""NodeD's ``mindx-dl/mindx-dl-nodeinfo-<node>`` ConfigMap: node hardware faults.

Wire format of Huawei's NodeD (Ascend/mind-cluster component/noded/pkg/reporter/cmreporter/
configmap_reporter.go, labelled ``mx-consumer-cim=true``): data key ``NodeInfo`` holds
``{"NodeInfo":{"FaultDevList":[{"DeviceType":…,"DeviceId":n,"FaultCode":[…],
"FaultLevel":…}],"NodeStatus":…},"CheckCode":"<sha256>"}``, the CheckCode being the SHA-256 of
Go's ``json.Marshal`` of the ``NodeInfo`` struct (component/noded/pkg/common/common.go
``MakeDataHash``; ClusterD checks it, component/clusterd/pkg/domain/node/node_util.go
``ParseNodeInfoCM``). NodeD deletes the ConfigMap once the node is healthy again. The status
is ``Healthy``, ``PreSeparate`` (no new job; running ones stay) or ``UnHealthy`` (jobs move
away at once), fault levels ``NotHandleFault`` < ``PreSeparateFault`` < ``SeparateFault``
(``docs/en/scheduling/api/noded.md``). Pure: values in, text out, and back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from contract.chip_names import InvalidInput, quoted
from contract.go_json import go_json

NAMESPACE = "mindx-dl"
NAME_PREFIX = "mindx-dl-nodeinfo-"
DATA_KEY = "NodeInfo"
CONSUMER_LABEL = ("mx-consumer-cim", "true")
HEALTHY, PRE_SEPARATE, UNHEALTHY = "Healthy", "PreSeparate", "UnHealthy"
STATUSES = (HEALTHY, PRE_SEPARATE, UNHEALTHY)
MAX_BYTES = 64 * 1024  # a node's hardware faults: a few hundred bytes each
MAX_FAULTS = 256


@dataclass(frozen=True, slots=True)
class DeviceFault:
    """One faulty device of the node (a CPU, a memory module, a disk, …)."""

    device_type: str
    device_id: int
    codes: tuple[str, ...] | None  # None: Go's nil slice (``null``), kept for the CheckCode
    level: str

    def to_go(self) -> str:
        # Struct field order of NodeD's FaultDev, not sorted: written by hand.
        codes = "null" if self.codes is None else go_json(list(self.codes))
        return (
            '{"DeviceType":'
            + go_json(self.device_type)
            + ',"DeviceId":'
            + str(self.device_id)
            + ',"FaultCode":'
            + codes
            + ',"FaultLevel":'
            + go_json(self.level)
            + "}"
        )

    def describe(self) -> str:
        return f"{self.device_type} {self.device_id} {','.join(self.codes or ())} {self.level}"


@dataclass(frozen=True, slots=True)
class NodeInfo:
    status: str
    faults: tuple[DeviceFault, ...] | None = None  # None: ``null``

    def to_go(self) -> str:
        faults = (
            "null" if self.faults is None else "[" + ",".join(f.to_go() for f in self.faults) + "]"
        )
        return '{"FaultDevList":' + faults + ',"NodeStatus":' + go_json(self.status) + "}"

    def describe(self) -> str:
        """``UnHealthy (CPU 0 00000011 SeparateFault; …)``."""
        faults = "; ".join(f.describe() for f in self.faults or ())
        return f"{self.status} ({faults})" if faults else self.status


def check_code(info: NodeInfo) -> str:
    return hashlib.sha256(info.to_go().encode()).hexdigest()


def configmap_name(node: str) -> str:
    return f"{NAME_PREFIX}{node}"


def node_of(configmap: str) -> str | None:
    return configmap[len(NAME_PREFIX) :] if configmap.startswith(NAME_PREFIX) else None


def encode(info: NodeInfo) -> dict[str, str]:
    """The ConfigMap's ``data`` as NodeD writes it (its ``updateTime`` left out)."""
    body = '{"NodeInfo":' + info.to_go() + ',"CheckCode":' + go_json(check_code(info)) + "}"
    return {DATA_KEY: body}


def decode(data: Mapping[str, str]) -> NodeInfo:
    """Read NodeD's ConfigMap; a missing or malformed field, an unknown status or a CheckCode
    that does not match the content raises InvalidInput."""
    text = data.get(DATA_KEY)
    if not isinstance(text, str):
        raise InvalidInput(f"no {DATA_KEY} key")
    if len(text) > MAX_BYTES:
        raise InvalidInput(f"{DATA_KEY} has {len(text)} characters (at most {MAX_BYTES})")
    try:
        cache = json.loads(text)
        body, code = cache["NodeInfo"], cache["CheckCode"]
    except RecursionError:
        raise InvalidInput(f"{DATA_KEY} nests too deep to be NodeD's node info") from None
    except (ValueError, KeyError, TypeError) as bad:
        raise InvalidInput(f"{DATA_KEY} is malformed: {quoted(repr(bad))}") from None
    info = from_fields(body, DATA_KEY)
    if code != check_code(info):
        raise InvalidInput(f"{DATA_KEY} CheckCode does not match the content (stale or edited)")
    return info


def from_fields(body: object, where: str = "NodeInfo") -> NodeInfo:
    """The ``NodeInfo`` struct read (``{"FaultDevList":[…],"NodeStatus":…}``): NodeD's own
    after its CheckCode, ClusterD's ``cluster-info-node-cm`` entries as they are
    (``contract.clusterd``). InvalidInput names a malformed field or an unknown status."""
    try:
        if not isinstance(body, dict):
            raise TypeError(f"{where} is not an object")
        listed, status = body.get("FaultDevList"), body.get("NodeStatus", "")
        if listed is not None and (not isinstance(listed, list) or len(listed) > MAX_FAULTS):
            raise TypeError(f"FaultDevList is not a list of at most {MAX_FAULTS} devices")
        faults = None if listed is None else tuple(_fault(entry) for entry in listed)
    except (ValueError, TypeError, AttributeError) as bad:
        raise InvalidInput(f"{where} is malformed: {quoted(repr(bad))}") from None
    if not isinstance(status, str) or status not in STATUSES:
        raise InvalidInput(f"{where}.NodeStatus {status!r} is none of {', '.join(STATUSES)}")
    return NodeInfo(status, faults)


def _fault(entry: object) -> DeviceFault:
    if not isinstance(entry, dict):
        raise TypeError("a FaultDevList entry is not an object")
    kind, ident = entry.get("DeviceType", ""), entry.get("DeviceId", 0)
    codes, level = entry.get("FaultCode"), entry.get("FaultLevel", "")
    if not isinstance(kind, str) or not isinstance(level, str):
        raise TypeError("DeviceType and FaultLevel must be strings")
    if not isinstance(ident, int) or isinstance(ident, bool):
        raise TypeError(f"DeviceId {ident!r} is not an integer")
    if codes is not None and not (
        isinstance(codes, list) and all(isinstance(c, str) for c in codes)
    ):
        raise TypeError("FaultCode is not a list of strings")
    return DeviceFault(kind, ident, None if codes is None else tuple(codes), level)
