"""The ToR topology an admin imports (``kube-system/basic-tor-node-cm``, key ``tor_info``):
which servers hang under which leaf switch, at which net slice. Read by the scheduler's
switch affinity (``scheduler_core.engine.tor``) and by the DRA driver (a chip's ``torIP``),
both through ``TopologyReader``: a malformed one is logged once (until it changes) and read
as none. Format: MindCluster's ``internal/nslb`` and the Volcano plugin's ``plugin/job.go``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from contract.annotations import TOPOLOGY_CONFIGMAP, TOPOLOGY_KEY
from contract.chip_names import InvalidInput

log = logging.getLogger(__name__)

SINGLE_LAYER, DOUBLE_LAYER = "single_layer", "double_layer"


@dataclass(frozen=True, slots=True)
class Server:
    ip: str
    tor: int
    slice_id: int
    tor_ip: str = ""


@dataclass(frozen=True, slots=True)
class Topology:
    tor_count: int  # servers per ToR = net slices
    tors: tuple[tuple[Server, ...], ...]  # servers of each ToR, by slice
    # ToR id → (IsSharedTor, IsHealthy) when the ConfigMap sets them (NSLB 2.0's start)
    flags: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    single_layer: bool = False  # ``tor_level: single_layer``: no spine above the ToRs
    by_ip: Mapping[str, Server] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_ip", {s.ip: s for tor in self.tors for s in tor})

    def server(self, ip: str) -> Server | None:
        return self.by_ip.get(ip)


def parse_topology(tor_info: str) -> Topology:
    """The ``tor_info`` key of ``kube-system/basic-tor-node-cm``."""
    try:
        raw = json.loads(tor_info)
        tor_count = int(raw["tor_count"])
        level = raw.get("tor_level", DOUBLE_LAYER)
        if level not in (SINGLE_LAYER, DOUBLE_LAYER):
            raise ValueError(f"tor_level {level!r} is not {SINGLE_LAYER} or {DOUBLE_LAYER}")
        tors = []
        flags = {}
        for tor in raw["server_list"]:
            if "IsSharedTor" in tor or "IsHealthy" in tor:
                flags[int(tor["tor_id"])] = _flag(tor, "IsSharedTor", 2), _flag(tor, "IsHealthy", 1)
            servers = [
                Server(
                    str(s["server_ip"]),
                    int(tor["tor_id"]),
                    int(s["slice_id"]),
                    str(tor.get("tor_ip", "")),
                )
                for s in tor["server"]
            ]
            tors.append(tuple(sorted(servers, key=lambda s: s.slice_id)))
    except (ValueError, KeyError, TypeError) as bad:
        raise InvalidInput(f"basic-tor-node-cm tor_info is malformed: {bad!r}") from None
    if tor_count < 1:
        raise InvalidInput(f"basic-tor-node-cm tor_count {tor_count} must be positive")
    return Topology(tor_count, tuple(tors), flags, level == SINGLE_LAYER)


def _flag(tor: Mapping[str, object], key: str, top: int) -> int:
    value = tor.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
        raise ValueError(f"{key} {value!r} is not in 0..{top}")
    return value


class TopologyReader:
    def __init__(self) -> None:
        self.error = ""  # what was wrong with the last one read ("" if nothing)

    def read(self, data: Mapping[str, str] | None) -> Topology | None:
        """The topology in the ConfigMap's ``data`` (None: no ConfigMap, or a malformed
        one)."""
        if data is None:
            return None
        try:
            topology = parse_topology(data.get(TOPOLOGY_KEY, ""))
        except InvalidInput as bad:
            if str(bad) != self.error:
                log.error("%s/%s ignored: %s", *TOPOLOGY_CONFIGMAP, bad)
            self.error = str(bad)
            return None
        self.error = ""
        return topology
