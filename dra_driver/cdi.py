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
libraries and tools. Which of them the host has is a ``HostPaths``: every path below checked
once under the host's ``/`` (``HostPaths.scan``; in the chart by the DRA driver pod's init
container, ``python -m dra_driver.host_paths``, the only one that sees the host's ``/``), the
driver reading the set written (``HostPaths.load``) and never the host's files; the spec names
them as the host does. With the Ascend runtime only ``LD_LIBRARY_PATH`` is added: the runtime
mounts the driver (its ``base.list``).

``cdiVersion`` is the least the fields need: ``hostPath`` in device nodes came with 0.5.0
(mounts' ``type`` with 0.4.0).
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
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
HOST_PATHS_VERSION = 1  # of the file HostPaths.dump writes


def _mount_paths() -> tuple[str, ...]:
    """Every path (or glob) a spec may mount, for either generation."""
    return (*DRIVER_MOUNTS, QUEUE_SCHEDULE, HCCL_ROOT_INFO, TOPOLOGY_DIR, *UB_MOUNTS)


def _fixed_device_nodes() -> tuple[str, ...]:
    return (*MANAGER_DEVICES, f"/dev/{DVPP_CMDLIST}")


@dataclass(frozen=True, slots=True)
class HostPaths:
    """The host paths a CDI spec may name that the host has: of ``LIBRARY_PATHS`` the
    directories, of the mounted paths those that exist (globs expanded, a match that is a
    symbolic link only when it stays in its directory, as Huawei's ``expandGlobPath`` takes
    it), of the device nodes ``MANAGER_DEVICES`` and ``dvpp_cmdlist`` those that exist and
    each node (not a directory) of ``/dev/uburma`` and ``/dev/ummu``. Paths as on the host."""

    found: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        for path in self.found:
            if not admissible(path):
                raise ValueError(f"{path!r} is not a host path a CDI spec names")

    @classmethod
    def scan(cls, host_root: Path) -> HostPaths:
        """What the host whose ``/`` is ``host_root`` has, its links followed as on the host
        (OSError: ``host_root`` not a directory, or a path not checkable)."""
        if not host_root.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(host_root))

        def is_dir(path: str) -> bool:
            seen = on_host(host_root, path)
            return seen is not None and seen.is_dir()

        found = {p for p in LIBRARY_PATHS if is_dir(p)}
        found |= {p for p in _fixed_device_nodes() if on_host(host_root, p) is not None}
        for path in _mount_paths():
            if "*" not in path:
                if on_host(host_root, path) is not None:
                    found.add(path)
                continue
            directory, pattern = posixpath.split(path)
            parent = on_host(host_root, directory)
            for match in parent.glob(pattern) if parent is not None and parent.is_dir() else ():
                name = posixpath.join(directory, match.name)
                seen = on_host(host_root, name)
                if seen is not None and seen.parent == parent:
                    found.add(name)
        for directory in UB_DEVICE_DIRS:
            seen = on_host(host_root, f"/dev/{directory}")
            for entry in seen.iterdir() if seen is not None and seen.is_dir() else ():
                if not entry.is_dir():
                    found.add(f"/dev/{directory}/{entry.name}")
        return cls(frozenset(found))

    def dump(self) -> str:
        return json.dumps({"version": HOST_PATHS_VERSION, "hostPaths": sorted(self.found)})

    @classmethod
    def parse(cls, text: str) -> HostPaths:
        """What ``dump`` wrote (ValueError: anything else, or a path no spec names)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as bad:
            raise ValueError(f"not JSON: {bad}") from None
        if not isinstance(data, dict) or data.get("version") != HOST_PATHS_VERSION:
            raise ValueError(f"expected an object of version {HOST_PATHS_VERSION}")
        paths = data.get("hostPaths")
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            raise ValueError("expected hostPaths, a list of paths")
        return cls(frozenset(paths))

    @classmethod
    def load(cls, path: Path) -> HostPaths:
        """The set written to ``path`` (ValueError names the file and what is wrong)."""
        try:
            return cls.parse(path.read_text(encoding="utf-8"))
        except OSError as failed:
            raise ValueError(f"{path}: {failed.strerror}") from None
        except ValueError as bad:
            raise ValueError(f"{path}: {bad}") from None

    def has(self, path: str) -> bool:
        return path in self.found

    def matching(self, pattern: str) -> list[str]:
        """The found paths in ``pattern``'s directory whose name matches its last part
        (a glob, or a directory's every entry with ``*``), by name."""
        parent, name = posixpath.split(pattern)
        return sorted(
            p
            for p in self.found
            if posixpath.dirname(p) == parent and fnmatchcase(posixpath.basename(p), name)
        )


SYMLINK_HOPS = 40  # Linux's MAXSYMLINKS: more is a loop


def on_host(host_root: Path, path: str) -> Path | None:
    """Where the host's ``path`` is seen when its ``/`` is ``host_root``, its symbolic links
    followed as the host follows them (an absolute target from the host's ``/``, never above
    it); None: missing (a dangling link too), or a loop."""
    done: list[str] = []
    todo = [p for p in reversed(path.split("/")) if p not in ("", ".")]
    hops = SYMLINK_HOPS
    while todo:
        part = todo.pop()
        if part == "..":
            done = done[:-1]
            continue
        here = host_root.joinpath(*done, part)
        if here.is_symlink():
            hops -= 1
            if hops < 0:
                return None
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            todo += [p for p in reversed(target.split("/")) if p not in ("", ".")]
        elif os.path.lexists(here):
            done.append(part)
        else:
            return None
    return host_root.joinpath(*done)


def admissible(path: str) -> bool:
    """Whether ``path`` is one ``HostPaths.scan`` may find: a file of another name or place
    is refused, so the set read names nothing else of the host for a spec to mount."""
    if not path.startswith("/") or posixpath.normpath(path) != path:
        return False
    if path in (*LIBRARY_PATHS, *_fixed_device_nodes()) or path in _mount_paths():
        return True
    parent, name = posixpath.split(path)
    if name in ("", ".", ".."):
        return False
    patterns = [p for p in _mount_paths() if "*" in p] + [f"/dev/{d}/*" for d in UB_DEVICE_DIRS]
    return any(
        parent == posixpath.dirname(g) and fnmatchcase(name, posixpath.basename(g))
        for g in patterns
    )


NOTHING_FOUND = HostPaths()  # a host without the driver's files: only /dev/davinci_manager


@dataclass(frozen=True, slots=True)
class CdiWriter:
    root: Path  # /var/run/cdi: the dynamic specs' directory
    driver: str
    ascend_runtime: bool
    host: HostPaths = NOTHING_FOUND  # what of the paths a spec may name the host has
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
                Path(p).name for p in MANAGER_DEVICES if p == MANAGER_DEVICES[0] or self.host.has(p)
            ]
            if not self.npu_950 and self.host.has(f"/dev/{DVPP_CMDLIST}"):
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
        """A device node at its host path."""
        return {"path": f"/dev/{name}", "hostPath": f"/dev/{name}", "permissions": "rw"}

    def _library_path(self) -> list[str]:
        found = [p for p in LIBRARY_PATHS if self.host.has(p)]
        return [f"LD_LIBRARY_PATH={':'.join(found)}"] if found else []

    def _ub_devices(self) -> list[str]:
        """``uburma/<node>``, ``ummu/<node>``: each node of those directories the host has."""
        return [
            path.removeprefix("/dev/")
            for directory in UB_DEVICE_DIRS
            for path in self.host.matching(f"/dev/{directory}/*")
        ]

    def _mounted(self) -> Iterator[str]:
        """The host paths Huawei's spec mounts that this host has, globs expanded."""
        wanted = [*DRIVER_MOUNTS, *(() if self.npu_950 else (QUEUE_SCHEDULE,))]
        wanted += [HCCL_ROOT_INFO, TOPOLOGY_DIR, *(UB_MOUNTS if self.npu_950 else ())]
        for path in wanted:
            if "*" in path:
                yield from self.host.matching(path)
            elif self.host.has(path):
                yield path

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
