"""An image's root filesystem entered as a container runtime would enter it, without one: for the
tests that run what the project's images hold (``tests/real/test_image.py``,
``tests/real/test_vc_scheduler_image.py``).

The layers unpacked into a folder (``image.layout.unpack``), that folder entered with
``unshare`` (a mount namespace of its own, so that nothing mounted leaks to this machine) and
``chroot``: the root bind-mounted onto itself, ``/dev`` and ``/proc`` mounted, each volume
bind-mounted at its path (its mount point made first, as a runtime makes it in its writable
layer), the root then made read-only as the manifests set it (``readOnlyRootFilesystem``), the
command run as the given user. The network is this machine's.

``PodTemplate`` runs the containers of a pod template that way, doing what a kubelet does for
them: each volume made (a ConfigMap's keys written as files with its ``defaultMode``, a host
path a folder of the test's own unless it names a file here, read-only then), mounted where each
container says (``subPath`` too); the ServiceAccount's token, the cluster's CA and the namespace
at the in-cluster path with ``KUBERNETES_SERVICE_HOST``/``PORT`` naming the API server
(client-go ``rest.InClusterConfig``); ``command`` and ``args`` over the image's entrypoint and
command; the container's user (its ``securityContext``, else the pod's, else the image's);
its environment the image's and its own ``value`` entries, nothing of this machine's.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from image import layout
from testbed.control_plane import ControlPlane, Process

Obj = dict[str, Any]
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"

# The arguments: root, uid:gid, argv; the volumes in $MOUNTS, one "source|target|ro" a line.
ENTER = """set -e
root=$1 user=$2; shift 2
mount --bind "$root" "$root"
mkdir -p "$root/dev" "$root/proc"
mount --rbind /dev "$root/dev"
mount -t proc proc "$root/proc"
printf '%s\\n' "$MOUNTS" | while IFS='|' read -r source target mode; do
  [ -n "$source" ] || continue
  if [ -d "$source" ]; then mkdir -p "$root$target"
  else mkdir -p "$(dirname "$root$target")"; [ -e "$root$target" ] || : > "$root$target"; fi
  mount --bind "$source" "$root$target"
  [ "$mode" != ro ] || mount -o remount,bind,ro "$root$target"
done
mount -o remount,bind,ro "$root"
unset MOUNTS
exec chroot --userspec="$user" "$root" "$@"
"""


@dataclass(frozen=True)
class Mount:
    """A folder or file of this machine at ``target`` in the container."""

    source: Path
    target: str
    read_only: bool = False

    def line(self) -> str:
        return f"{self.source}|{self.target}|{'ro' if self.read_only else 'rw'}"


@contextmanager
def unpacked(image: layout.Manifest, prefix: str) -> Iterator[Path]:
    """The image's root filesystem unpacked in a folder of ``/tmp`` (``prefix``) that any
    user may walk, as the image's ``/``; removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    root.chmod(0o755)
    try:
        layout.unpack(image, root)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def entered(root: Path, user: str, argv: Sequence[str]) -> list[str]:
    """The command that runs ``argv`` in ``root`` as ``user`` (``uid:gid``); the volumes go in
    the environment as ``mounts_variable`` gives them."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", ENTER, "sh",
            str(root), user, *argv]  # fmt: skip


def mounts_variable(mounts: Sequence[Mount]) -> dict[str, str]:
    return {"MOUNTS": "\n".join(m.line() for m in mounts)}


@dataclass(frozen=True)
class PodTemplate:
    """A pod template of ``namespace`` to run from ``root`` (the image's configuration
    ``config``: its ``config`` object), its volumes under ``folder``."""

    plane: ControlPlane
    namespace: str
    spec: Obj  # the template's spec
    root: Path
    config: Obj
    folder: Path

    def volumes(self) -> dict[str, Mount]:
        """Each volume of the spec, made once (the first call), by name."""
        made: dict[str, Mount] = {}
        admin = self.plane.rest()
        for volume in self.spec.get("volumes", []):
            name = volume["name"]
            where = self.folder / "volumes" / name
            if "configMap" in volume:
                source = volume["configMap"]
                path = f"/api/v1/namespaces/{self.namespace}/configmaps/{source['name']}"
                where.mkdir(parents=True, exist_ok=True)
                for key, value in (admin.get(path).get("data") or {}).items():
                    (where / key).write_text(value)
                    (where / key).chmod(int(source.get("defaultMode", 0o644)))
                made[name] = Mount(where, "", read_only=True)
            elif "hostPath" in volume and Path(volume["hostPath"]["path"]).is_file():
                made[name] = Mount(Path(volume["hostPath"]["path"]), "", read_only=True)
            else:  # hostPath, emptyDir: a folder of the test's
                where.mkdir(parents=True, exist_ok=True)
                made[name] = Mount(where, "")
        return made

    def account(self) -> Mount:
        """The ServiceAccount's token, the cluster's CA and the namespace, as the kubelet's
        projected volume gives them."""
        where = self.folder / "serviceaccount"
        where.mkdir(parents=True, exist_ok=True)
        name = self.spec.get("serviceAccountName") or self.spec.get("serviceAccount") or "default"
        (where / "token").write_text(self.plane.token(self.namespace, name))
        (where / "ca.crt").write_bytes(self.plane.ca.cert.read_bytes())
        (where / "namespace").write_text(self.namespace)
        for file in where.iterdir():
            file.chmod(0o644)
        return Mount(where, TOKEN_PATH, read_only=True)

    def command(self, container: Obj, extra: Sequence[str] = ()) -> list[str]:
        """What the container runs, as the kubelet's runtime composes it, ``extra`` added to
        its last word (a shell's ``-c`` string takes more arguments that way)."""
        entrypoint = container.get("command") or self.config.get("Entrypoint") or []
        arguments = container.get("args") or (
            [] if container.get("command") else self.config.get("Cmd") or []
        )
        argv = [*entrypoint, *arguments]
        if extra:
            argv[-1] = " ".join([argv[-1], *extra])
        return argv

    def user(self, container: Obj) -> str:
        pod = self.spec.get("securityContext") or {}
        own = container.get("securityContext") or {}
        uid = own.get("runAsUser", pod.get("runAsUser", self.config.get("User", "0")))
        gid = own.get("runAsGroup", pod.get("runAsGroup", uid))
        return f"{uid}:{gid}"

    def argv(
        self, container: Obj, volumes: dict[str, Mount], extra: Sequence[str] = ()
    ) -> list[str]:
        """The full command line for ``container``: its environment set and nothing else
        (``env -i``), the volumes mounted, the root entered."""
        mounts = [self.account()]
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            source = volume.source / mount["subPath"] if mount.get("subPath") else volume.source
            read_only = bool(mount.get("readOnly")) or volume.read_only
            mounts.append(Mount(source, mount["mountPath"], read_only))
        url = urllib.parse.urlsplit(self.plane.url)
        environment = dict(e.split("=", 1) for e in self.config.get("Env", []))
        environment |= {
            "KUBERNETES_SERVICE_HOST": str(url.hostname),
            "KUBERNETES_SERVICE_PORT": str(url.port),
        }
        environment |= {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
        environment |= mounts_variable(mounts)
        settings = [f"{key}={value}" for key, value in environment.items()]
        entering = entered(self.root, self.user(container), self.command(container, extra))
        return ["env", "-i", *settings, *entering]

    def start(self, name: str, extra: Sequence[str] = ()) -> Process:
        """The init containers run to their end, then the container ``name`` started."""
        volumes = self.volumes()
        for init in self.spec.get("initContainers", []):
            log = self.folder / f"{init['name']}.log"
            with log.open("wb") as out:
                argv = self.argv(init, volumes)
                done = subprocess.run(
                    argv, stdout=out, stderr=subprocess.STDOUT, timeout=60, check=False
                )
            if done.returncode != 0:
                raise RuntimeError(f"init container {init['name']} failed:\n{log.read_text()}")
        (container,) = [c for c in self.spec["containers"] if c["name"] == name]
        return Process(name, self.argv(container, volumes, extra), self.folder)


__all__ = ["ENTER", "TOKEN_PATH", "Mount", "PodTemplate", "entered", "mounts_variable"]
