"""CDI spec files for prepared claims: what the container runtime applies for the device IDs
the kubelet passes in CRI's ``CDIDevices`` (``shared/reference/dra.md`` §7, CDI spec 1.1.0).

One transient spec per claim, ``<vendor>-<class>_<claim UID>.json`` (the CDI library's
``GenerateTransientSpecName``), its devices ``<claim UID>-npu-<id>`` (never reused across
claims: runtimes may cache specs), in the two modes the device plugin answers in today:

- device nodes: each chip's ``/dev/davinci<id>``, and for the whole spec the manager devices
  the host has (``/dev/davinci_manager`` always);
- the Ascend container runtime: environment only, ``ASCEND_VISIBLE_DEVICES`` (the chips of the
  device's request) and ``ASCEND_RUNTIME_OPTIONS``; the runtime mounts the devices.

``cdiVersion`` is the least the fields need: ``hostPath`` in device nodes came with 0.5.0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chip_drivers.container import ENV_RUNTIME_OPTIONS, ENV_VISIBLE, MANAGER_DEVICES
from contract.objects import Obj
from dra_driver.claims import Grant
from dra_driver.files import write_atomically

CDI_VERSION = "0.5.0"
CDI_CLASS = "npu"


@dataclass(frozen=True, slots=True)
class CdiWriter:
    root: Path  # /var/run/cdi: the dynamic specs' directory
    driver: str
    ascend_runtime: bool
    dev_root: Path = Path("/dev")

    @property
    def vendor(self) -> str:
        return f"k8s.{self.driver}"

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{CDI_CLASS}"

    def path(self, claim_uid: str) -> Path:
        return self.root / f"{self.vendor}-{CDI_CLASS}_{claim_uid}.json"

    def device_id(self, claim_uid: str, grant: Grant) -> str:
        """The fully qualified CDI device ID the kubelet hands the runtime."""
        return f"{self.kind}={claim_uid}-{grant.device}"

    def spec(self, claim_uid: str, grants: Sequence[Grant]) -> Obj:
        devices = []
        for grant in grants:
            if self.ascend_runtime:
                same_request = ",".join(str(g.chip) for g in grants if g.request == grant.request)
                edits: Obj = {"env": [f"{ENV_VISIBLE}={same_request}"]}
            else:
                edits = {"deviceNodes": [self._node(f"davinci{grant.chip}")]}
            devices.append({"name": f"{claim_uid}-{grant.device}", "containerEdits": edits})
        common: Obj
        if self.ascend_runtime:
            common = {"env": [f"{ENV_RUNTIME_OPTIONS}="]}
        else:
            present = [
                Path(p).name
                for p in MANAGER_DEVICES
                if p == MANAGER_DEVICES[0] or (self.dev_root / Path(p).name).exists()
            ]
            common = {"deviceNodes": [self._node(name) for name in present]}
        return {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            "devices": devices,
            "containerEdits": common,
        }

    def _node(self, name: str) -> Obj:
        return {"path": f"/dev/{name}", "hostPath": str(self.dev_root / name), "permissions": "rw"}

    def write(self, claim_uid: str, grants: Sequence[Grant]) -> list[str]:
        """The claim's spec written (aside, then renamed over: a runtime never reads half
        of one); its device IDs."""
        write_atomically(self.path(claim_uid), json.dumps(self.spec(claim_uid, grants), indent=1))
        return [self.device_id(claim_uid, g) for g in grants]

    def remove(self, claim_uid: str) -> None:
        self.path(claim_uid).unlink(missing_ok=True)

    def claims_with_specs(self) -> set[str]:
        """The claim UIDs this driver has spec files for."""
        prefix, suffix = f"{self.vendor}-{CDI_CLASS}_", ".json"
        if not self.root.is_dir():
            return set()
        return {
            p.name.removeprefix(prefix).removesuffix(suffix)
            for p in self.root.iterdir()
            if p.name.startswith(prefix) and p.name.endswith(suffix)
        }
