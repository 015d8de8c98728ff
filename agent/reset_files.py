"""Each job's ``reset-config-<job>`` (and ``data-trace-<job>``) ConfigMap mirrored into host
files, as Huawei's device plugin does for its training jobs' process-level recovery: the job's
pods mount ``/user/restore/reset/<namespace>.reset-config-<job>`` by hostPath (the samples in
``tests/data/huawei_jobs``; Huawei's ``ascendplugin-volcano.yaml`` mounts
``/user/restore/reset`` and ``/user/cluster-info/datatrace-config`` into its plugin), and
TaskD / the elastic agent read ``reset.json`` there (Ascend/mind-cluster
component/ascend-device-plugin pkg/kubeclient, pkg/common ``ResetInfoDir``; not at hand here:
the layout below is the samples' and the ConfigMap's keys, one file per data key).

Only the jobs with a live pod on this node are mirrored, each ConfigMap read by its exact
name (a GET every ``period`` seconds and at once when the node's pods change): the agent
lists and watches no ConfigMap. A folder is ``<root>/<namespace>.<name>``, mode 0755; each of
the ConfigMap's ``data`` keys is a file of that name, mode 0644, replaced atomically (a temp
file in the folder, then rename: a container that mounted the folder sees the old content or
the new, never a part); a key gone from the ConfigMap is removed. The folder is removed once
no live pod of the job is on the node, or the ConfigMap is gone (a ``reset-config`` without
the label ``reset=true`` counts as none, as Volcano's plugin ignores it). Folders of other
names under the root are never touched.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.pod_cache import PodCache
from contract.objects import Obj
from contract.pods import PodView
from infra.kube.port import KubeError, KubeGateway, NotFound

log = logging.getLogger(__name__)

RESET_DIR = Path("/user/restore/reset")
DATATRACE_DIR = Path("/user/cluster-info/datatrace-config")
RESET_PREFIX = "reset-config-"  # ascend-for-volcano plugin/type.go ResetInfoCMNamePrefix
DATATRACE_PREFIX = "data-trace-"
RESET_LABEL = ("reset", "true")  # the label Volcano's plugin requires of a reset-config
# The pod labels naming its job: Volcano's Job controller (volcano.sh/job-name) and the
# Kubeflow training operators, ascend-operator's AscendJob among them.
JOB_LABELS = ("volcano.sh/job-name", "training.kubeflow.org/job-name")
DIR_MODE = 0o755
FILE_MODE = 0o644
TEMP_PREFIX = ".tmp-"
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")  # a DNS subdomain (namespace, name)
_KEY = re.compile(r"[-._a-zA-Z0-9]+")  # a ConfigMap key (validation.IsConfigMapKey)


@dataclass(frozen=True, slots=True)
class Mirror:
    """ConfigMaps ``<prefix><job>`` mirrored under ``root``; ``label``: one they must carry."""

    root: Path
    prefix: str
    label: tuple[str, str] | None = None


def mirrors(reset_dir: Path | None, datatrace_dir: Path | None) -> tuple[Mirror, ...]:
    """The mirrors the flags turn on (an empty flag: None, off)."""
    found = []
    if reset_dir is not None:
        found.append(Mirror(reset_dir, RESET_PREFIX, RESET_LABEL))
    if datatrace_dir is not None:
        found.append(Mirror(datatrace_dir, DATATRACE_PREFIX))
    return tuple(found)


def job_names(pod: PodView) -> set[str]:
    """The job names the pod's labels give (none when it names no job)."""
    return {
        name
        for key in JOB_LABELS
        if (name := pod.labels.get(key)) and len(name) <= 200 and _NAME.fullmatch(name)
    }


def wanted(pods: Iterable[PodView], mirror: Mirror) -> set[tuple[str, str]]:
    """(namespace, ConfigMap name) of every job with a live pod here."""
    return {
        (pod.namespace, mirror.prefix + job)
        for pod in pods
        if pod.live and _NAME.fullmatch(pod.namespace)
        for job in job_names(pod)
    }


def mirrored_data(configmap: Obj | None, mirror: Mirror) -> dict[str, str] | None:
    """The keys to write (None: no folder): string data under valid key names."""
    if configmap is None:
        return None
    meta = configmap.get("metadata") or {}
    if mirror.label is not None:
        key, value = mirror.label
        if (meta.get("labels") or {}).get(key) != value:
            return None
    data = configmap.get("data") or {}
    return {
        k: v
        for k, v in data.items()
        if isinstance(k, str)
        and isinstance(v, str)
        and _KEY.fullmatch(k)
        and k not in (".", "..")
        and not k.startswith(TEMP_PREFIX)
    }


def write_folder(folder: Path, data: Mapping[str, str]) -> bool:
    """Make ``folder`` hold exactly ``data``'s files; True when a file changed. The folder is
    written into, never replaced: a container's hostPath mount of it stays the same folder."""
    folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if folder.stat().st_mode & 0o777 != DIR_MODE:
        folder.chmod(DIR_MODE)
    changed = False
    for key, value in data.items():
        path = folder / key
        content = value.encode()
        try:
            if path.read_bytes() == content and path.stat().st_mode & 0o777 == FILE_MODE:
                continue
        except OSError:
            pass
        _replace(path, content)
        changed = True
    for child in folder.iterdir():
        if child.name not in data and not child.is_dir():
            child.unlink()
            changed = True
    return changed


def _replace(path: Path, content: bytes) -> None:
    """Write ``path`` atomically: a temp file beside it, synced, renamed over it."""
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX)
    try:
        with os.fdopen(handle, "wb") as out:
            os.fchmod(out.fileno(), FILE_MODE)
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def owned(name: str, mirror: Mirror) -> bool:
    """Whether a folder of that name under the root is one this mirror writes."""
    namespace, dot, configmap = name.partition(".")
    return bool(dot) and bool(_NAME.fullmatch(namespace)) and configmap.startswith(mirror.prefix)


class ConfigMapFiles:
    """Mirrors the ConfigMaps of the node's jobs (``mirrors``) into host folders."""

    def __init__(
        self,
        gateway: KubeGateway,
        cache: PodCache,
        mirrors: tuple[Mirror, ...],
        *,
        period: float,
        due: threading.Event | None = None,
        on_api_error: Callable[[], None] = lambda: None,
        on_loop_error: Callable[[str], None] = lambda loop: None,
    ) -> None:
        self._gateway = gateway
        self._cache = cache
        self._mirrors = mirrors
        self._period = period
        self._on_api_error = on_api_error
        self._on_loop_error = on_loop_error
        self._due = threading.Event() if due is None else due  # set: a round now
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: set[Path] = set()  # folders whose last write failed (logged once)

    def wake(self) -> None:
        """Run a round now (the node's pods changed)."""
        self._due.set()

    def run_once(self) -> None:
        if not self._cache.synced:
            return
        pods = self._cache.pods()
        for mirror in self._mirrors:
            kept: set[str] = set()
            for namespace, name in sorted(wanted(pods, mirror)):
                folder = mirror.root / f"{namespace}.{name}"
                try:
                    data = mirrored_data(self._gateway.get_configmap(namespace, name), mirror)
                except NotFound:
                    data = None
                except KubeError as failed:
                    log.warning("configmap %s/%s not read: %s", namespace, name, failed)
                    self._on_api_error()
                    kept.add(folder.name)  # as it was until it can be read
                    continue
                if data is None:
                    continue
                kept.add(folder.name)
                self._write(folder, data)
            self._remove_others(mirror, kept)

    def _write(self, folder: Path, data: Mapping[str, str]) -> None:
        try:
            if write_folder(folder, data):
                log.info("wrote %s: %s", folder, ", ".join(sorted(data)))
            self._failing.discard(folder)
        except OSError as failed:
            if folder not in self._failing:
                log.warning("%s not written: %s", folder, failed)
                self._failing.add(folder)

    def _remove_others(self, mirror: Mirror, kept: set[str]) -> None:
        try:
            children = list(mirror.root.iterdir())
        except OSError:
            return  # no root yet: nothing written
        for child in children:
            if child.name in kept or not owned(child.name, mirror) or not child.is_dir():
                continue
            try:
                shutil.rmtree(child)
            except OSError as failed:
                log.warning("%s not removed: %s", child, failed)
            else:
                log.info("removed %s: no pod of its job on this node, or no ConfigMap", child)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._due.wait(self._period)
            self._due.clear()
            if self._stop.is_set():
                return
            try:
                self.run_once()
            except Exception:
                log.exception("reset-files round failed")
                self._on_loop_error("reset-files")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="reset-files", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._due.set()
        if self._thread is not None:
            self._thread.join(timeout=self._period + 5)
