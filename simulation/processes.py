"""The scheduler service as its own process, reading an in-memory store through the loopback
API server, for tests and benchmarks that call it as kube-scheduler would."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil
from kubernetes import client

from contract.objects import Obj
from simulation.kube_scheduler import SERVICE_PROFILES
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster

# Ports for the servers the tests start, chosen below Linux's ephemeral range (32768–60999,
# net.ipv4.ip_local_port_range): a port the kernel handed out for bind(0) and released is the
# kind it next gives an outgoing connection as its source port, which then takes it before the
# server binds it (seen: kube-apiserver "bind: address already in use" on a port so chosen).
# Under pytest-xdist each worker takes its own slice of that range, so that two workers never
# probe the same port free and then both bind it.


def _port_range() -> range:
    every = range(20000, 32768)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or workers < 2:
        return every
    size = len(every) // workers
    start = every.start + int(worker[2:]) % workers * size
    return range(start, start + size)


_PORTS = _port_range()
_next_port = [random.Random(os.getpid()).randrange(len(_PORTS))]


def free_port() -> int:
    """A port on 127.0.0.1 no socket holds now, outside the ephemeral range."""
    for _ in range(len(_PORTS)):
        _next_port[0] = (_next_port[0] + 1) % len(_PORTS)
        port = _PORTS[_next_port[0]]
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_PORTS.start}-{_PORTS.stop - 1}")


@dataclass
class ServiceProcess:
    process: subprocess.Popen[str]
    url: str
    api: LoopbackApiServer


@contextmanager
def scheduler_process(store: MemoryCluster, workdir: Path, *flags: str) -> Iterator[ServiceProcess]:
    """``python -m scheduler_core serve`` as its own process (as kube-scheduler would call it),
    reading ``store`` through the loopback API server; yields once it is ready."""
    api = LoopbackApiServer(store)
    try:
        with service_process(api.start(), workdir, *flags) as (process, url):
            yield ServiceProcess(process, url, api)
    finally:
        api.stop()


@contextmanager
def service_process(
    api_url: str, workdir: Path, *flags: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The scheduler service as its own process against the API server at ``api_url``: the
    process and the service's URL, once it is ready."""
    port = free_port()
    with serving(service_command(api_url, workdir, port, *flags), port) as served:
        yield served


@contextmanager
def service_process_with(
    config_file: Path, port: int, log: Path, *flags: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The scheduler service as its own process with the kubeconfig ``config_file`` (a real
    API server's), on ``127.0.0.1:port``, its output in ``log``: the process and its URL, once
    it is ready."""
    with (
        log.open("a") as output,
        serving(service_command_with(config_file, port, *flags), port, output) as served,
    ):
        yield served


@contextmanager
def serving(
    command: list[str], port: int, output: IO[str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``command`` as a process serving HTTP on ``127.0.0.1:port`` (its output to ``output``,
    else a pipe): the process and its URL once its ``/readyz`` answers; ended after."""
    sink: IO[str] | int = subprocess.PIPE if output is None else output
    process = subprocess.Popen(command, stdout=sink, stderr=sink, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _ready(url):
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the scheduler service did not become ready")
            time.sleep(0.1)
        yield process, url
    finally:
        _end(process)


def service_command(api_url: str, workdir: Path, port: int, *flags: str) -> list[str]:
    """``python -m scheduler_core serve`` on ``127.0.0.1:port`` against the API server at
    ``api_url`` (its kubeconfig written in ``workdir``), placing the pods of the simulated
    kube-scheduler's profiles and Volcano's."""
    config_file = workdir / "kubeconfig"
    config_file.write_text(kubeconfig(api_url))
    profiles = ",".join(SERVICE_PROFILES)
    return service_command_with(config_file, port, f"--scheduler-names={profiles}", *flags)


def service_command_with(
    config_file: Path,
    port: int,
    *flags: str,
    insecure: bool = True,
    policies_installed: bool = False,
) -> list[str]:
    """``python -m scheduler_core serve`` on ``127.0.0.1:port`` with the kubeconfig
    ``config_file``; ``insecure``: its verbs open to any caller on the loopback (the tests'
    callers present no credentials), else ``flags`` name the authentication;
    ``policies_installed``: the chart's admission policies are on the API server (else the
    service is told to start without them)."""
    return [
        sys.executable,
        "-m",
        "scheduler_core",
        "serve",
        "--listen",
        f"127.0.0.1:{port}",
        "--kube",
        "kubeconfig",
        "--kubeconfig",
        str(config_file),
        *(["--insecure"] if insecure else []),
        *([] if policies_installed else ["--allow-missing-policies"]),
        *flags,
    ]


def ready(url: str) -> bool:
    """The service at ``url`` answers its readiness probe (its view is fresh)."""
    return _ready(url)


def leads(url: str) -> bool:
    """The service at ``url`` answers the verbs (``/leader``: it leads, or elects none)."""
    return _answers(url, "leader")


def _end(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


class Part:
    """A part of the cluster as a process of its own that prints ``ready`` (and its answers)
    line by line on stdout, and stops when its stdin closes."""

    def __init__(self, *command: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        line = self.readline()
        if not line.startswith("ready"):
            _end(self.process)
            raise RuntimeError(f"{command[0]} did not start: {line!r}")
        self.ready = line.split()[1:]

    def readline(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline()

    def ask(self, line: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self.readline()

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _end(self.process)


@dataclass
class ClusterProcesses:
    """A simulated cluster whose parts run as a cluster runs them: the API server, the
    scheduler service and the nodes each in a process of their own."""

    api_url: str
    api: Part
    service_url: str
    service: subprocess.Popen[str]
    nodes: Part


@contextmanager
def cluster_processes(nodes: int, workdir: Path, *flags: str) -> Iterator[ClusterProcesses]:
    """``nodes`` 8-chip 910 nodes (``node-00`` …); ``flags``: the scheduler service's."""
    api = Part("simulation.loopback", "--nodes", str(nodes))
    try:
        (api_url,) = api.ready
        host = Part(
            "simulation.node_host",
            "--api",
            api_url,
            "--root",
            str(workdir / "nodes"),
            "--nodes",
            str(nodes),
        )
        try:
            with service_process(api_url, workdir, *flags) as (service, service_url):
                yield ClusterProcesses(api_url, api, service_url, service, host)
        finally:
            host.stop()
    finally:
        api.stop()


def pod_creator(api_url: str) -> Callable[[Obj], None]:
    """Creates pods through the API server at ``api_url``, as a user or a controller does."""
    configuration = client.Configuration()
    configuration.host = api_url
    core = client.CoreV1Api(client.ApiClient(configuration))

    def create(pod: Obj) -> None:
        body: Any = pod  # the client sends a dict as it is
        core.create_namespaced_pod(pod["metadata"]["namespace"], body, _preload_content=False)

    return create


def _ready(url: str) -> bool:
    return _answers(url, "readyz")


def _answers(url: str, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/{path}", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


LEASE, RENEW, RETRY = 3, 2, 1  # a robustness run's leader election, seconds


def election_flags(lease: float, renew: float, retry: float) -> list[str]:
    """The service's flags for leader election with these timings (seconds)."""
    return [
        "--leader-elect=true",
        "--leader-elect-lease-duration",
        str(lease),
        "--leader-elect-renew-deadline",
        str(renew),
        "--leader-elect-retry-period",
        str(retry),
    ]


GANG_TTL = 30.0


class Replica:
    """One scheduler replica, a process of its own, with leader election (``LEASE``,
    ``RENEW``, ``RETRY`` seconds), a short gang TTL and NodeD read (``--noded``), as the
    robustness run drives it."""

    def __init__(self, name: str, api_url: str, workdir: Path) -> None:
        self.name = name
        self._api_url = api_url
        self._workdir = workdir / name
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.paused_until = 0.0
        self.first_rss: float | None = None
        self.last_rss = 0.0

    def start(self) -> None:
        port = free_port()
        command = service_command(
            self._api_url,
            self._workdir,
            port,
            *election_flags(LEASE, RENEW, RETRY),
            "--refresh-period",
            "0.5",
            "--gang-ttl",
            str(GANG_TTL),
            "--noded",
            "--log-level",
            "WARNING",
        )
        log = (self._workdir / "log").open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=log)
        self.url = f"http://127.0.0.1:{port}"
        self.first_rss = None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def pause(self, seconds: float) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)
            self.paused_until = time.monotonic() + seconds

    def tick(self) -> None:
        """Resume it when its pause is over; note its memory."""
        if self.paused_until and time.monotonic() >= self.paused_until and self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)
            self.paused_until = 0.0
        if self.alive() and not self.paused_until:
            assert self.process is not None
            if self.first_rss is None and not self.ready():
                return  # measured from its first full read on
            try:
                rss = psutil.Process(self.process.pid).memory_info().rss / 2**20
            except psutil.Error:
                return
            if self.first_rss is None:
                self.first_rss = rss
            self.last_rss = rss

    def ready(self) -> bool:
        return self.alive() and not self.paused_until and ready(self.url)

    def leads(self) -> bool:
        return self.alive() and not self.paused_until and leads(self.url)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.paused_until and self.alive():
            self.process.send_signal(signal.SIGCONT)
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
