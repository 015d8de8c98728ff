"""CDI spec files for prepared claims: what the container runtime applies for the device IDs
the kubelet passes in CRI's ``CDIDevices`` (``shared/reference/dra.md`` §7, CDI spec 1.1.0).

One transient spec per claim, ``<vendor>-<class>_<claim UID>.json`` (the CDI library's
``GenerateTransientSpecName``), its devices ``<claim UID>-npu-<id>`` (never reused across
claims: runtimes may cache specs), in the two modes the device plugin answers in today:

- device nodes: each chip's ``/dev/davinci<id>``, and for the whole spec the manager devices
  the host has (``/dev/davinci_manager`` always);
- the Ascend container runtime: environment only, ``ASCEND_VISIBLE_DEVICES`` (the chips of the
  device's request) and ``ASCEND_RUNTIME_OPTIONS``; the runtime mounts the devices.

In device-node mode the spec also gives what the spec of Huawei's DRA driver gives (kind
``ascend.com/npu``; Ascend/mind-cluster ``component/ascend-common/cdi``: ``spec.go``,
``devnode.go``, ``mount/profile.go``, ``mount/provider.go``), each only where the host has it:
the driver's libraries and tools bind-mounted read-only, ``LD_LIBRARY_PATH`` of the driver's
library directories, the HCCL root info and the driver's topology directory, ``dvpp_cmdlist``
(not on a 950), every node of ``/dev/uburma`` and ``/dev/ummu``, and on a 950 the UB user-space
libraries and tools. Host paths are looked up under ``host_root`` (the host's ``/`` as the
driver's container mounts it); the spec names them as the host does. With the Ascend runtime
only ``LD_LIBRARY_PATH`` is added: the runtime mounts the driver (its ``base.list``).

``cdiVersion`` is the least the fields need: ``hostPath`` in device nodes came with 0.5.0
(mounts' ``type`` with 0.4.0).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from chip_drivers.container import ENV_RUNTIME_OPTIONS, ENV_VISIBLE, MANAGER_DEVICES
from contract.objects import Obj
from dra_driver.claims import Grant
from dra_driver.files import write_atomically

CDI_VERSION = "0.5.0"
CDI_CLASS = "npu"

# What Huawei's spec mounts (mount/profile.go DefaultMountProfile: "default" for every
# generation; the 950's adds the UB user-space files, globs, and drops /var/queue_schedule),
# and the HCCL topology it adds where present (mount/provider.go TopologyItems).
DRIVER_MOUNTS = (
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/include",
    "/usr/local/dcmi",
    "/usr/local/bin/npu-smi",
)
QUEUE_SCHEDULE = "/var/queue_schedule"  # not on a 950
HCCL_ROOT_INFO, TOPOLOGY_DIR = "/etc/hccl_rootinfo.json", "/usr/local/Ascend/driver/topo"
UB_MOUNTS = (
    "/usr/lib64/libummu*",
    "/usr/lib64/liburma*",
    "/usr/lib64/urma",
    "/usr/lib64/libnl*",
    "/usr/bin/urma_admin",
    "/usr/bin/urma_perftest",
    "/usr/bin/urma_ping",
)
MOUNT_OPTIONS = ("rbind", "rprivate", "ro")
# spec.go ascendDriverLibPaths: LD_LIBRARY_PATH is those of them the host has.
LIBRARY_PATHS = ("/usr/local/Ascend/driver/lib64/common", "/usr/local/Ascend/driver/lib64/driver")
DVPP_CMDLIST = "dvpp_cmdlist"  # devnode.go: every chip type but the 950's
UB_DEVICE_DIRS = ("uburma", "ummu")  # devnode.go addUBDevicesFromDir: each node in them


@dataclass(frozen=True, slots=True)
class CdiWriter:
    root: Path  # /var/run/cdi: the dynamic specs' directory
    driver: str
    ascend_runtime: bool
    dev_root: Path = Path("/dev")
    host_root: Path = Path("/")  # where the host's / is seen (its paths checked there)
    npu_950: bool = False  # the node's chips are Ascend 950s (Huawei's Ascend910A5)

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
            common = {"env": [f"{ENV_RUNTIME_OPTIONS}=", *self._library_path()]}
        else:
            present = [
                Path(p).name
                for p in MANAGER_DEVICES
                if p == MANAGER_DEVICES[0] or (self.dev_root / Path(p).name).exists()
            ]
            if not self.npu_950 and (self.dev_root / DVPP_CMDLIST).exists():
                present.append(DVPP_CMDLIST)
            present += self._ub_devices()
            common = {"deviceNodes": [self._node(name) for name in present]}
            if env := self._library_path():
                common["env"] = env
            if mounts := [self._mount(p) for p in self._mounted()]:
                common["mounts"] = mounts
        return {
            "cdiVersion": CDI_VERSION,
            "kind": self.kind,
            "devices": devices,
            "containerEdits": common,
        }

    @staticmethod
    def _node(name: str) -> Obj:
        """A device node at its host path (``dev_root`` is only where this process sees them)."""
        return {"path": f"/dev/{name}", "hostPath": f"/dev/{name}", "permissions": "rw"}

    def _on_host(self, path: str) -> Path:
        return self.host_root / path.lstrip("/")

    def _library_path(self) -> list[str]:
        found = [p for p in LIBRARY_PATHS if self._on_host(p).is_dir()]
        return [f"LD_LIBRARY_PATH={':'.join(found)}"] if found else []

    def _ub_devices(self) -> list[str]:
        """``uburma/<node>``, ``ummu/<node>``: each node of those directories the host has."""
        return [
            f"{directory}/{entry.name}"
            for directory in UB_DEVICE_DIRS
            if (self.dev_root / directory).is_dir()
            for entry in sorted((self.dev_root / directory).iterdir(), key=lambda e: e.name)
            if not entry.is_dir()
        ]

    def _mounted(self) -> Iterator[str]:
        """The host paths Huawei's spec mounts that this host has, globs expanded (a match
        that is a symbolic link only when it stays in its directory, as Huawei's
        ``expandGlobPath`` takes it)."""
        wanted = [*DRIVER_MOUNTS, *(() if self.npu_950 else (QUEUE_SCHEDULE,))]
        wanted += [HCCL_ROOT_INFO, TOPOLOGY_DIR, *(UB_MOUNTS if self.npu_950 else ())]
        for path in wanted:
            if "*" not in path:
                if self._on_host(path).exists():
                    yield path
                continue
            parent = self._on_host(str(Path(path).parent))
            for match in sorted(parent.glob(Path(path).name)) if parent.is_dir() else []:
                if match.resolve().parent == parent.resolve():
                    yield str(Path(path).parent / match.name)

    @staticmethod
    def _mount(path: str) -> Obj:
        return {
            "hostPath": path,
            "containerPath": path,
            "type": "bind",
            "options": [*MOUNT_OPTIONS],
        }

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
