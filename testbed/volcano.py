"""The real Volcano on the test bed's control plane: ``vc-controller-manager`` and ``vc-scheduler``
as local processes, built by ``testbed.build`` from the upstream sources (``.testbed/bin/volcano-
<version>/``, the CRDs of that version in ``.testbed/volcano-<version>/crd/``).

Started as Volcano's own chart starts them (``installer/helm/chart/volcano/templates/
{scheduler,controllers}.yaml``), with these choices of our own: the admin's client certificate
(Volcano's RBAC is not what these tests examine), leader election off unless a test elects,
health and metrics on free loopback ports, and the scheduler's configuration file in a folder of
its own (vc-scheduler watches the folder and reloads on any write in it:
``pkg/scheduler/scheduler.go`` ``watchSchedulerConf``). The v1.12.0 build is patched and carries
Huawei's plugin (``volcano-npu_v26.1.0.so``) as Huawei's ``build/build.sh`` makes it; the plugin
is loaded only where a test asks for it (``plugins_dir``) and a configuration names it.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from scheduler_core.volcano_config import Entry
from simulation.processes import free_port
from testbed.build import BIN, ROOT
from testbed.control_plane import ControlPlane, Process, TestbedMissing, wait_until
from testbed.manifests import helm_template
from testbed.rest import RestError

VERSIONS = ("v1.12.0", "v1.15.0")
HUAWEI_VERSION = "v1.12.0"  # the Volcano MindCluster v26.1.0 builds its plugin against
HUAWEI_PLUGIN = "volcano-npu_v26.1.0"  # its PluginName: the .so's name and the configured one
ADAPTER = "ascend-npu-adapter"  # the project's in-process adapter (volcano_adapter/), built beside
NAMESPACE = "volcano-system"
SCHEDULER_ACCOUNT = "volcano-scheduler"  # its ServiceAccount in Volcano's installation
SCHEDULER_NAME = "volcano"


@dataclass(frozen=True)
class VolcanoBuild:
    """One built Volcano version: its two commands, its CRDs and (v1.12.0) Huawei's plugin."""

    version: str

    @property
    def folder(self) -> Path:
        return BIN / f"volcano-{self.version}"

    @property
    def scheduler(self) -> Path:
        return self.folder / "vc-scheduler"

    @property
    def controller_manager(self) -> Path:
        return self.folder / "vc-controller-manager"

    @property
    def plugin(self) -> Path:
        return self.folder / f"{HUAWEI_PLUGIN}.so"

    @property
    def adapter(self) -> Path:
        return self.folder / f"{ADAPTER}.so"

    @property
    def data(self) -> Path:
        return ROOT / ".testbed" / f"volcano-{self.version}"

    def crds(self) -> list[Path]:
        return sorted((self.data / "crd").glob("*.yaml"))

    def huawei_configuration(self) -> Path:
        """Huawei's deployment YAML for this Volcano (``build/volcano-v1.12.0.yaml``)."""
        return self.data / f"huawei-volcano-{self.version}.yaml"

    def check(self, *, plugin: bool = False, adapter: bool = False) -> VolcanoBuild:
        needed = [self.scheduler, self.controller_manager, *([self.plugin] if plugin else [])]
        needed += [self.adapter] if adapter else []
        missing = [str(p) for p in needed if not p.exists()]
        if missing or not self.crds():
            what = ", ".join(missing) or f"the CRDs in {self.data / 'crd'}"
            raise TestbedMissing(f"{what} missing: run `make testbed` (python -m testbed.build)")
        return self


def huawei_scheduler_configuration(build: VolcanoBuild) -> str:
    """``volcano-scheduler.conf`` as Huawei ships it for this Volcano (its ConfigMap
    ``volcano-scheduler-configmap`` in ``build/volcano-<version>.yaml``)."""
    for document in yaml.safe_load_all(build.huawei_configuration().read_text()):
        if (
            document
            and document.get("kind") == "ConfigMap"
            and document["metadata"]["name"] == "volcano-scheduler-configmap"
        ):
            return str(document["data"]["volcano-scheduler.conf"])
    raise LookupError(f"no volcano-scheduler-configmap in {build.huawei_configuration()}")


def install_crds(plane: ControlPlane, build: VolcanoBuild) -> None:
    """Volcano's CRDs of this version, applied and established (as its chart's ``crd/bases``)."""
    admin = plane.rest()
    names = []
    for path in build.crds():
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                admin.apply(document)
                names.append(document["metadata"]["name"])

    def established() -> bool:
        for name in names:
            crd = admin.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (crd.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    wait_until(established, 60, "Volcano's CRDs established")


def healthz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


@dataclass
class Volcano:
    """Volcano's controller manager and scheduler on ``plane``, each started on demand."""

    plane: ControlPlane
    build: VolcanoBuild
    workdir: Path
    processes: dict[str, Process] = field(default_factory=dict)
    metrics_port: int = 0

    @property
    def configuration_file(self) -> Path:
        return self.workdir / "scheduler-conf" / "volcano-scheduler.conf"

    def start_controller_manager(self, *extra: str) -> Process:
        port = free_port()
        command = [
            str(self.build.controller_manager),
            f"--kubeconfig={self.plane.admin}",
            "--leader-elect=false",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{port}",
            f"--listen-address=127.0.0.1:{free_port()}",
            f"--scheduler-name={SCHEDULER_NAME}",
            # The JobFlow controllers need the flow.volcano.sh CRDs, which live outside the
            # chart's crd/bases: without them their informers never sync and take the queue
            # controller down with them (pkg/controllers/queue/queue_controller.go).
            "--controllers=+job-controller,+pg-controller,+queue-controller,+gc-controller",
            *extra,
        ]
        return self._start("vc-controller-manager", command, port)

    def start_scheduler(
        self,
        configuration: str,
        *,
        plugins: bool = False,
        adapter: bool = False,
        period: str = "1s",
        name: str = "vc-scheduler",
        extra: tuple[str, ...] = (),
        environment: dict[str, str] | None = None,
        account: bool = False,
    ) -> Process:
        """vc-scheduler reading ``configuration`` (a ``volcano-scheduler.conf``); with
        ``plugins`` it loads Huawei's plugin, with ``adapter`` the project's adapter
        (``ascend-npu-adapter.so``), from a folder holding only the ``.so`` files asked;
        ``account``: as its ServiceAccount ``volcano-system/volcano-scheduler`` (a token of it;
        its ClusterRole from Volcano's installation), as Volcano's chart runs it, else as the
        test bed's admin."""
        self.write_configuration(configuration)
        port = free_port()
        self.metrics_port = free_port()
        kubeconfig = self.account() if account else self.plane.admin
        command = [
            str(self.build.scheduler),
            f"--kubeconfig={kubeconfig}",
            f"--scheduler-conf={self.configuration_file}",
            f"--schedule-period={period}",
            "--leader-elect=false",
            "--enable-healthz=true",
            f"--healthz-address=127.0.0.1:{port}",
            "--enable-metrics=true",
            f"--listen-address=127.0.0.1:{self.metrics_port}",
            f"--scheduler-name={SCHEDULER_NAME}",
            f"--cache-dump-dir={self.workdir}",
            "--percentage-nodes-to-find=100",
            "--kube-api-qps=2000",
            "--kube-api-burst=2000",
            *extra,
        ]
        if plugins or adapter:
            checked = self.build.check(plugin=plugins, adapter=adapter)
            folder = self.workdir / "plugins"
            folder.mkdir(exist_ok=True)
            for old in folder.glob("*.so"):
                old.unlink()
            for wanted, so in ((plugins, checked.plugin), (adapter, checked.adapter)):
                if wanted:
                    (folder / so.name).symlink_to(so)
            command.append(f"--plugins-dir={folder}")
        else:
            # Its default (``plugins``, relative to the working directory) must not find one.
            command.append(f"--plugins-dir={self.workdir / 'no-plugins'}")
        return self._start(name, command, port, environment)

    def account(self) -> Path:
        """A kubeconfig of Volcano's scheduler's ServiceAccount, which is made with its
        ClusterRole and binding as Huawei's installation of Volcano makes them (the only
        installation YAML in the snapshots), for either version."""
        admin = self.plane.rest()
        admin.ensure_namespace(NAMESPACE)
        shipped = VolcanoBuild(HUAWEI_VERSION).huawei_configuration().read_text()
        for document in yaml.safe_load_all(shipped):
            if (
                document
                and document["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")
                and document["metadata"]["name"] in (SCHEDULER_ACCOUNT, f"{SCHEDULER_ACCOUNT}-role")
            ):
                admin.apply(document)
        return self.plane.service_account(NAMESPACE, SCHEDULER_ACCOUNT)

    def write_configuration(self, configuration: str) -> None:
        """The scheduler's configuration, replaced in one rename (it reloads on the write)."""
        self.configuration_file.parent.mkdir(exist_ok=True)
        staged = self.workdir / "volcano-scheduler.conf.new"
        staged.write_text(configuration)
        staged.replace(self.configuration_file)

    def metrics(self) -> str:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as answer:
            return str(answer.read().decode())

    def _start(
        self, name: str, command: list[str], port: int, environment: dict[str, str] | None = None
    ) -> Process:
        old = self.processes.pop(name, None)
        if old is not None:
            old.stop()
        process = Process(name, command, self.workdir, environment)
        self.processes[name] = process
        process.wait_healthy(lambda: healthz(port))
        return process

    def stop(self) -> None:
        for process in self.processes.values():
            process.stop()


@contextmanager
def running_volcano(plane: ControlPlane, version: str, workdir: Path) -> Iterator[Volcano]:
    """Volcano ``version`` with its CRDs and namespace on ``plane``; nothing started yet."""
    build = VolcanoBuild(version).check()
    install_crds(plane, build)
    plane.rest().ensure_namespace(NAMESPACE)
    workdir.mkdir(parents=True, exist_ok=True)
    volcano = Volcano(plane, build, workdir)
    try:
        yield volcano
    finally:
        volcano.stop()


def open_queue(plane: ControlPlane, name: str = "default") -> None:
    """Wait for Volcano's ``default`` queue (vc-scheduler's cache makes it) to be Open."""
    admin = plane.rest()

    def opened() -> bool:
        try:
            queue = admin.get(f"/apis/scheduling.volcano.sh/v1beta1/queues/{name}")
        except RestError:
            return False
        return bool(queue.get("status", {}).get("state") == "Open")

    wait_until(opened, 60, f"Volcano's queue {name} open")


def charts_adapter_entry(url: str) -> Entry:
    """The plugin entry the chart's Volcano path ships with ``volcano.adapter=true``, pointed
    at the service's ``url`` (where it is reached here)."""
    rendered = yaml.safe_load_all(helm_template("schedulerPath=volcano", "volcano.adapter=true"))
    name = "ascend-npu-volcano-extender"
    (shipped,) = [d for d in rendered if d and d["metadata"]["name"] == name]
    return Entry.parse(shipped["data"]["extender.yaml"]).at(url)


__all__ = [
    "ADAPTER",
    "HUAWEI_PLUGIN",
    "HUAWEI_VERSION",
    "VERSIONS",
    "Volcano",
    "VolcanoBuild",
    "charts_adapter_entry",
    "healthz",
    "huawei_scheduler_configuration",
    "install_crds",
    "open_queue",
    "running_volcano",
]
