"""The driver's record of the claims it prepared, kept across its restarts: what unprepare
needs (only the claim's namespace, name and UID arrive then) and what the double-booking
check reads. Written atomically (``files``), as the example driver's ``checkpoint.go`` does,
so a crash leaves the old record or the new.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dra_driver.claims import ClaimRef, Grant
from dra_driver.files import write_atomically

log = logging.getLogger(__name__)
VERSION = "ascend.npu/dra-checkpoint/v1"


@dataclass(frozen=True, slots=True)
class Prepared:
    claim: ClaimRef
    grants: tuple[Grant, ...]

    @property
    def chips(self) -> frozenset[int]:
        return frozenset(g.chip for g in self.grants)


def _encode(prepared: Mapping[str, Prepared]) -> str:
    claims = {
        uid: {
            "namespace": p.claim.namespace,
            "name": p.claim.name,
            "devices": [
                {"request": g.request, "pool": g.pool, "device": g.device, "chip": g.chip}
                for g in p.grants
            ],
        }
        for uid, p in sorted(prepared.items())
    }
    return json.dumps({"version": VERSION, "preparedClaims": claims}, indent=1)


def _decode(text: str) -> dict[str, Prepared]:
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError(f"not a checkpoint of version {VERSION}")
    prepared = {}
    for uid, entry in (data.get("preparedClaims") or {}).items():
        grants = tuple(
            Grant(str(d["request"]), str(d["pool"]), str(d["device"]), int(d["chip"]))
            for d in entry["devices"]
        )
        prepared[uid] = Prepared(ClaimRef(str(entry["namespace"]), str(entry["name"]), uid), grants)
    return prepared


class Checkpoint:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Prepared]:
        """The claims prepared (none when there is no record yet). A record that cannot be
        read is kept aside, named in the log, and the driver starts from none: the kubelet
        prepares its claims again (idempotent) and the record is rebuilt."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            return _decode(text)
        except (ValueError, KeyError, TypeError, AttributeError) as bad:
            aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
            self.path.replace(aside)
            log.error("checkpoint %s unreadable (%s); kept as %s", self.path, bad, aside)
            return {}

    def save(self, prepared: Mapping[str, Prepared]) -> None:
        write_atomically(self.path, _encode(prepared))
