"""The scheduler service as its own process, reading an in-memory store through the loopback
API server, for tests and benchmarks that call it as kube-scheduler would."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
    config_file = workdir / "kubeconfig"
    config_file.write_text(kubeconfig(api.start()))
    port = free_port()
    command = [
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
        *flags,
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    service = ServiceProcess(process, f"http://127.0.0.1:{port}", api)
    try:
        deadline = time.monotonic() + 120
        while not _ready(service.url):
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the scheduler service did not become ready")
            time.sleep(0.1)
        yield service
    finally:
        if process.poll() is None:
            process.terminate()
            process.communicate(timeout=30)
        api.stop()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
