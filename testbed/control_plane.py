"""A real control plane on one machine, from the binaries ``testbed.build`` made: etcd,
kube-apiserver, kube-controller-manager and kube-scheduler as local processes on loopback.

Started as controller-runtime's envtest starts its control plane
(``pkg/internal/testing/controlplane/{etcd,apiserver}.go``: minimal flags, a self-signed CA, a
service-account key pair) and as kwokctl's binary runtime adds the controller manager and the
scheduler (``pkg/kwokctl/runtime/binary/cluster.go``), with these choices of our own:

- Authentication by client certificates (admin: ``system:masters``; the controller manager and
  the scheduler under their own user names, so the cluster's default RBAC governs them) and
  service-account tokens; authorization ``Node,RBAC`` with the ``NodeRestriction`` admission
  plugin, as kubeadm configures them.
- etcd without fsync (``--unsafe-no-fsync``: a test's data need not survive a power cut), and no
  periodic compaction by the API server (``--etcd-compaction-interval=0``): a test compacts when
  it means to (:meth:`ControlPlane.compact`).
- The node-lifecycle controller runs: nodes need their kubelet's heartbeat (their Lease in
  ``kube-node-lease``) to stay untainted, as on a real cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from simulation.processes import free_port
from testbed.build import BIN, components
from testbed.certs import Authority, KeyPair, service_account_key
from testbed.rest import Obj, Rest, RestError

SERVICE_CIDR = "10.0.0.0/24"
STARTUP = 90.0  # seconds a component may take to answer its health check on a loaded machine


class TestbedMissing(RuntimeError):
    """A binary of the test bed is not built (``make testbed`` builds it)."""


def binary(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        raise TestbedMissing(f"{path} is missing: run `make testbed` (python -m testbed.build)")
    return path


def version(name: str) -> str:
    """The pinned version of a component of ``testbed/versions.toml``."""
    return next(c.version for c in components() if c.name == name)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.1)


class Process:
    """One component as a process of its own, its output in ``<workdir>/<name>.log``."""

    def __init__(
        self,
        name: str,
        command: list[str],
        workdir: Path,
        environment: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.command = command
        self.environment = None if environment is None else {**os.environ, **environment}
        self.log = workdir / f"{name}.log"
        self._popen: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with self.log.open("ab") as out:
            self._popen = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.environment,
            )

    @property
    def pid(self) -> int:
        assert self._popen is not None
        return self._popen.pid

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def signal(self, number: signal.Signals) -> None:
        if self.alive():
            assert self._popen is not None
            self._popen.send_signal(number)

    def stop(self, timeout: float = 20) -> None:
        if self._popen is None:
            return
        if self.alive():
            self._popen.send_signal(signal.SIGCONT)  # a paused process cannot end
            self._popen.terminate()
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait()

    def kill(self) -> None:
        if self.alive():
            assert self._popen is not None
            self._popen.kill()
            self._popen.wait()

    def wait_healthy(self, healthy: Callable[[], bool]) -> None:
        def up() -> bool:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited:\n{self.tail()}")
            return healthy()

        try:
            wait_until(up, STARTUP, f"{self.name} healthy")
        except TimeoutError as late:
            raise TimeoutError(f"{late}\n{self.tail()}") from None


def kubeconfig_text(server: str, ca: Path, user: dict[str, str]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "testbed",
            "clusters": [
                {"name": "testbed", "cluster": {"server": server, "certificate-authority": str(ca)}}
            ],
            "users": [{"name": "user", "user": user}],
            "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "user"}}],
        }
    )


@dataclass
class ControlPlane:
    """etcd and kube-apiserver, and on request kube-controller-manager and kube-scheduler."""

    workdir: Path
    admission_plugins_off: tuple[str, ...] = ()
    apiserver_flags: tuple[str, ...] = ()  # more flags of kube-apiserver's own
    etcd_url: str = ""
    url: str = ""
    processes: dict[str, Process] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        pki = self.workdir / "pki"
        self.ca = Authority(pki)
        self.serving = self.ca.issue(
            "apiserver",
            "kube-apiserver",
            hosts=("127.0.0.1", "localhost", "10.0.0.1", "kubernetes.default.svc"),
        )
        self.sa_key = service_account_key(pki)
        self._users: dict[str, Path] = {}
        self._api_port = free_port()
        self.url = f"https://127.0.0.1:{self._api_port}"

    # --- the parts -------------------------------------------------------------------------

    def start(self, *, controllers: bool = True) -> ControlPlane:
        self._start_etcd()
        self._start_apiserver()
        if controllers:
            self.start_controller_manager()
        return self

    def _start_etcd(self) -> None:
        client_port, peer_port = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client_port}"
        peer = f"http://127.0.0.1:{peer_port}"
        command = [
            str(binary("etcd")),
            "--name=testbed",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=testbed={peer}",
            "--unsafe-no-fsync",
            "--quota-backend-bytes=8589934592",
            "--log-level=warn",
        ]
        process = self.processes["etcd"] = Process("etcd", command, self.workdir)
        process.wait_healthy(lambda: _get(f"{self.etcd_url}/health") is not None)

    def _apiserver_command(self) -> list[str]:
        command = [
            str(binary("kube-apiserver")),
            f"--etcd-servers={self.etcd_url}",
            "--etcd-compaction-interval=0",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self._api_port}",
            f"--tls-cert-file={self.serving.cert}",
            f"--tls-private-key-file={self.serving.key}",
            f"--client-ca-file={self.ca.cert}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.sa_key.cert}",
            f"--service-account-signing-key-file={self.sa_key.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--profiling=false",
        ]
        if self.admission_plugins_off:
            command.append(f"--disable-admission-plugins={','.join(self.admission_plugins_off)}")
        return [*command, *self.apiserver_flags]

    def _start_apiserver(self) -> None:
        process = Process("kube-apiserver", self._apiserver_command(), self.workdir)
        self.processes["kube-apiserver"] = process
        self.wait_apiserver()

    def wait_apiserver(self) -> None:
        admin = self.user("admin", "testbed-admin", "system:masters")
        context = self._tls(admin)
        self.processes["kube-apiserver"].wait_healthy(
            lambda: _get(f"{self.url}/readyz", context) == b"ok"
        )

    def restart_apiserver(self) -> None:
        """Stop the API server and start it again on the same port and etcd."""
        self.processes["kube-apiserver"].stop()
        self.processes["kube-apiserver"].start()
        self.wait_apiserver()

    def start_controller_manager(self, *extra: str) -> Process:
        port = free_port()
        kubeconfig = self.user("kube-controller-manager", "system:kube-controller-manager")
        command = [
            str(binary("kube-controller-manager")),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            "--leader-elect=false",
            f"--service-account-private-key-file={self.sa_key.key}",
            f"--root-ca-file={self.ca.cert}",
            "--use-service-account-credentials=true",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            *extra,
        ]
        process = Process("kube-controller-manager", command, self.workdir)
        self.processes[process.name] = process
        process.wait_healthy(lambda: _healthz(port))
        return process

    def start_scheduler(
        self,
        configuration: dict[str, Any],
        name: str = "kube-scheduler",
        kubeconfig: Path | None = None,
        program: str = "kube-scheduler",
    ) -> Process:
        """kube-scheduler with ``configuration`` (a KubeSchedulerConfiguration), its client
        connection's kubeconfig set to this control plane as ``kubeconfig``'s user (default:
        the user ``system:kube-scheduler`` of the cluster's default RBAC); its other client
        settings (``qps``, ``burst``) kept. ``program``: the binary, kube-scheduler or the
        project's ``kube-scheduler-ascend`` (the same with the AscendNPU plugin)."""
        kubeconfig = kubeconfig or self.user("kube-scheduler", "system:kube-scheduler")
        connection = {**configuration.get("clientConnection", {}), "kubeconfig": str(kubeconfig)}
        configuration = {**configuration, "clientConnection": connection}
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(configuration))
        port = free_port()
        command = [
            str(binary(program)),
            f"--config={path}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
        ]
        process = Process(name, command, self.workdir)
        self.processes[name] = process
        process.wait_healthy(lambda: _healthz(port))
        return process

    def stop(self) -> None:
        # At the end nothing needs a graceful end: an API server with a client's watch still
        # open (an in-process agent's, whose reflector thread ends only with its next event)
        # would wait for it until its own shutdown timeout, 20 s per test module.
        for name in reversed(list(self.processes)):
            self.processes[name].stop(timeout=3)

    # --- who talks to it -------------------------------------------------------------------

    def user(self, name: str, common: str, organization: str | None = None) -> Path:
        """A kubeconfig for a client-certificate user (made once per name)."""
        if name not in self._users:
            pair = self.ca.issue(name, common, organization)
            path = self.workdir / f"{name}.kubeconfig"
            path.write_text(
                kubeconfig_text(
                    self.url,
                    self.ca.cert,
                    {"client-certificate": str(pair.cert), "client-key": str(pair.key)},
                )
            )
            self._users[name] = path
        return self._users[name]

    @property
    def admin(self) -> Path:
        return self.user("admin", "testbed-admin", "system:masters")

    def token_kubeconfig(self, token: str, name: str) -> Path:
        path = self.workdir / f"{name}.kubeconfig"
        path.write_text(kubeconfig_text(self.url, self.ca.cert, {"token": token}))
        return path

    def service_account(self, namespace: str, name: str) -> Path:
        """A kubeconfig holding a fresh token of ServiceAccount ``namespace/name`` (made if
        missing), from the TokenRequest API as the kubelet gets a pod's token."""
        admin = self.rest()
        try:
            admin.create(
                f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}}
            )
        except RestError as exists:
            if exists.status != 409:
                raise
        token = self.token(namespace, name)
        return self.token_kubeconfig(token, f"sa-{namespace}-{name}")

    def token(self, namespace: str, name: str, bound_to: Obj | None = None) -> str:
        """A token of ServiceAccount ``namespace/name`` (TokenRequest), bound to the pod
        ``bound_to`` when given (the API server then names the pod's node in it)."""
        spec: Obj = {"expirationSeconds": 3600}
        if bound_to is not None:
            meta = bound_to["metadata"]
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": meta["name"],
                "uid": meta["uid"],
            }
        answer = self.rest().create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", {"spec": spec}
        )
        return str(answer["status"]["token"])

    def rest(self, kubeconfig: Path | None = None) -> Rest:
        """A JSON client as ``kubeconfig``'s user (default: the admin)."""
        return Rest(kubeconfig or self.admin)

    def _tls(self, kubeconfig: Path) -> ssl.SSLContext:
        users = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
        context = ssl.create_default_context(cafile=str(self.ca.cert))
        context.load_cert_chain(users["client-certificate"], users["client-key"])
        return context

    # --- etcd ------------------------------------------------------------------------------

    def compact(self) -> int:
        """Compact etcd to its current revision (through its gRPC gateway, as etcdctl
        compact does); the revision compacted to."""
        header = _post(f"{self.etcd_url}/v3/kv/range", {"key": "AA=="})["header"]
        revision = int(header["revision"])
        _post(f"{self.etcd_url}/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision


def _insecure() -> ssl.SSLContext:
    """The components' own health ports serve self-signed certificates of their own."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _get(url: str, context: ssl.SSLContext | None = None) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return bytes(response.read())
    except OSError:
        return None


def _healthz(port: int) -> bool:
    return _get(f"https://127.0.0.1:{port}/healthz", _insecure()) == b"ok"


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@contextmanager
def running(prefix: str, *, controllers: bool = True, **options: Any) -> Iterator[ControlPlane]:
    """A control plane started in a scratch directory of its own (``options``: the
    ControlPlane's), stopped and removed afterwards."""
    workdir = scratch(prefix)
    plane = ControlPlane(workdir, **options)
    try:
        plane.start(controllers=controllers)
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def scratch(prefix: str = "testbed") -> Path:
    """A short directory under /tmp (unix socket paths must stay under 107 bytes)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("TESTBED_TMP", "/tmp")))


__all__ = [
    "ControlPlane",
    "KeyPair",
    "Process",
    "TestbedMissing",
    "binary",
    "running",
    "scratch",
    "version",
]
