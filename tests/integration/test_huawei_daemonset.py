"""The agent started with the arguments of Huawei's own device-plugin DaemonSets, verbatim
(tests/data/huawei_device_plugin/, Ascend/mind-cluster 22bb3d98), as a real process: it
registers with the kubelet and answers the DaemonSets' liveness probe (GET / on 11251).

What the DaemonSets cannot say is given through the agent's environment, as an operator
swapping the image would: the Kubernetes API (``ASCEND_AGENT_KUBE``), the fake driver and the
plugin directory. Two substitutions in the arguments, both paths of this machine: the
``-logFile`` directory (the DaemonSet's init container makes /var/log/mindx-dl/devicePlugin;
a test may not) and the port 11251 only when another process holds it.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.http import healthz_server
from simulation.cluster import state_file, vnpu_state_file, wait_for
from simulation.kubelet import KubeletSimulator
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster
from simulation.processes import free_port
from testbed.certs import Authority

DATA = Path(__file__).parents[1] / "data" / "huawei_device_plugin"
HEALTHZ_PORT = 11251  # --healthz-address in every shipped DaemonSet
HUAWEI_LOG = "/var/log/mindx-dl/devicePlugin/devicePlugin.log"
SCRIPT = "run_for_310P_1usoc.sh"


def _container(manifest: str) -> dict[str, Any]:
    for document in yaml.safe_load_all((DATA / manifest).read_text()):
        if document and document.get("kind") == "DaemonSet":
            containers: list[dict[str, Any]] = document["spec"]["template"]["spec"]["containers"]
            assert len(containers) == 1
            return containers[0]
    raise AssertionError(f"{manifest}: no DaemonSet")


def shipped_command(manifest: str) -> str:
    """The device-plugin command line the DaemonSet's container runs: its ``args`` string
    (``/bin/bash -c -- "device-plugin …"``), or the ``device-plugin`` line of the script the
    310P-1usoc DaemonSets run."""
    container = _container(manifest)
    command = container["command"]
    assert command[:2] == ["/bin/bash", "-c"]
    if command[2:] == ["--"]:
        (line,) = container["args"]
        return str(line)
    assert command[2:] == [f"/{SCRIPT}"]
    lines = (DATA / SCRIPT).read_text().splitlines()
    (line,) = [text for text in lines if text.startswith("/usr/local/bin/device-plugin ")]
    return line


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("", port))
        except OSError:
            return False
    return True


@pytest.mark.parametrize(
    ("manifest", "resource", "state"),
    [
        ("ascendplugin-volcano.yaml", "huawei.com/Ascend910", state_file()),
        ("ascendplugin.yaml", "huawei.com/Ascend910", state_file()),
        ("ascendplugin-310P-1usoc.yaml", "huawei.com/Ascend310P", vnpu_state_file()),
        ("ascendplugin-310P-1usoc-volcano.yaml", "huawei.com/Ascend310P", vnpu_state_file()),
    ],
)
def test_huaweis_shipped_daemonset_arguments_start_the_agent(
    short_dir: Path, manifest: str, resource: str, state: str
) -> None:
    line = shipped_command(manifest)
    program, *arguments = shlex.split(line)  # as /bin/bash -c splits it
    assert program.endswith("device-plugin")
    assert "--enable-healthz=true" in arguments and f"--healthz-address={HEALTHZ_PORT}" in arguments
    log_file = short_dir / "devicePlugin.log"
    port = HEALTHZ_PORT if _port_free(HEALTHZ_PORT) else free_port()
    arguments = [
        a.replace(HUAWEI_LOG, str(log_file)).replace(f"={HEALTHZ_PORT}", f"={port}")
        for a in arguments
    ]
    store = MemoryCluster()
    store.put("Node", {"metadata": {"name": "n1"}})
    server = LoopbackApiServer(store)
    (short_dir / "kubeconfig").write_text(kubeconfig(server.start()))
    (short_dir / "state.yaml").write_text(state)
    plugins = short_dir / "plugins"
    kubelet = KubeletSimulator(plugins)
    kubelet.start()
    environment = {
        **os.environ,
        "NODE_NAME": "n1",  # as the DaemonSets set it (fieldRef spec.nodeName)
        "ASCEND_AGENT_KUBE": "kubeconfig",
        "ASCEND_AGENT_KUBECONFIG": str(short_dir / "kubeconfig"),
        "ASCEND_AGENT_FAKE_STATE": str(short_dir / "state.yaml"),
        "ASCEND_AGENT_PLUGIN_DIR": str(plugins),
    }
    with (short_dir / "stderr.txt").open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "agent", *arguments],
            env=environment,
            stdout=stderr,
            stderr=stderr,
        )
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(resource) > 0, timeout=30), (
            short_dir / "stderr.txt"
        ).read_text() + log_file.read_text()
        # The DaemonSets' livenessProbe: httpGet path / port 11251 scheme HTTP.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as probe:
            assert (probe.status, probe.read()) == (200, b"ok\n")
        assert wait_for(lambda: "serving" in log_file.read_text())
        assert "ERROR" not in log_file.read_text()
        # The in-memory API server has none of our admission policies: started all the same,
        # saying so (tests/real/test_huawei_daemonset_policies.py on the real API server).
        assert "starting WITHOUT the admission policies" in log_file.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
        kubelet.close()
        server.stop()


def _eight_chips_two_late(chips: int) -> str:
    """A module910x8 whose driver counts 8 chips and reports ``chips`` of them."""
    return state_file(chips=chips) + "expected_chips: [0, 1, 2, 3, 4, 5, 6, 7]\n"


def _serve(directory: Path, *arguments: str) -> subprocess.Popen[bytes]:
    with (directory / "agent.log").open("a") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent",
                "--plugin-dir",
                str(directory / "plugins"),
                "--fake-state",
                str(directory / "state.yaml"),
                *arguments,
            ],
            stdout=log,
            stderr=log,
        )


def test_device_reset_timeout_waits_for_every_chip_the_driver_counts(short_dir: Path) -> None:
    (short_dir / "state.yaml").write_text(_eight_chips_two_late(6))
    kubelet = KubeletSimulator(short_dir / "plugins")
    kubelet.start()
    process = _serve(short_dir, "-deviceResetTimeout=600")
    log = short_dir / "agent.log"
    try:
        assert wait_for(lambda: "waiting up to 600 s for chips 6, 7" in log.read_text())
        assert kubelet.allocatable("huawei.com/Ascend910") == 0, "nothing served while waiting"
        (short_dir / "state.yaml").write_text(_eight_chips_two_late(8))
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/Ascend910") == 8, 20)
        assert "not reported" not in log.read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        kubelet.close()


def test_after_device_reset_timeout_the_chips_there_are_are_served(short_dir: Path) -> None:
    (short_dir / "state.yaml").write_text(_eight_chips_two_late(6))
    kubelet = KubeletSimulator(short_dir / "plugins")
    kubelet.start()
    process = _serve(
        short_dir, "-deviceResetTimeout=10", "-getPodFromKubelet=true", "-dealWatchHandler"
    )
    log = short_dir / "agent.log"
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable("huawei.com/Ascend910") == 6, 30)
        text = log.read_text()
        assert "chips 6, 7 not reported after 10 s (-deviceResetTimeout)" in text
        assert text.count("-getPodFromKubelet=True accepted, has no effect here: pods are") == 1
        assert text.count("-dealWatchHandler=True accepted, has no effect here") == 1
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        kubelet.close()


def test_healthz_over_https_with_both_tls_files(short_dir: Path) -> None:
    (short_dir / "state.yaml").write_text(state_file())
    authority = Authority(short_dir / "pki")
    served = authority.issue("healthz", "localhost", hosts=("127.0.0.1",))
    port = free_port()
    process = _serve(
        short_dir,
        "-enable-healthz",  # one dash, bare: as Go's flag package reads it
        f"-healthz-address={port}",
        f"--tls-cert-file={served.cert}",
        f"--tls-private-key-file={served.key}",
    )
    try:
        context = ssl.create_default_context(cafile=str(authority.cert))

        def answers() -> bool:
            try:
                with urllib.request.urlopen(
                    f"https://127.0.0.1:{port}/healthz", timeout=5, context=context
                ) as probe:
                    return bool(probe.status == 200 and probe.read() == b"ok\n")
            except OSError:
                return False

        assert wait_for(answers)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)


@pytest.mark.skipif(not socket.has_dualstack_ipv6(), reason="this machine has no IPv6")
def test_a_bare_healthz_port_answers_on_ipv4_and_ipv6() -> None:
    # Upstream listens on ":<port>" (Go: every address of either family); a kubelet probing
    # a pod's IPv6 address must be answered as its IPv4 one.
    server = healthz_server()
    url = server.start("", 0)
    port = int(url.rsplit(":", 1)[1])
    try:
        for host in ("127.0.0.1", "[::1]"):
            with urllib.request.urlopen(f"http://{host}:{port}/", timeout=5) as probe:
                assert (probe.status, probe.read()) == (200, b"ok\n"), host
    finally:
        server.stop()
