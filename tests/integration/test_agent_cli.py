"""``python -m agent`` as a user runs it: a real process, real sockets, real signals."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from contract.deviceinfo import decode
from infra.cli import version
from infra.kube.port import NotFound
from simulation.cluster import state_file, wait_for
from simulation.kubelet import KubeletSimulator
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster, pod_object
from simulation.processes import free_port
from tests.integration.conftest import RESOURCE
from tests.unit.helpers import metric

SAMPLES = Path(__file__).parents[1] / "data" / "npu_smi"


def agent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def serve(plugins: Path, state: Path, *extra: str) -> subprocess.Popen[str]:
    """``python -m agent`` serving the fake state with the Ascend runtime, as a process."""
    command = [
        sys.executable,
        "-m",
        "agent",
        "--plugin-dir",
        str(plugins),
        "--fake-state",
        str(state),
        "-useAscendDocker=true",
        *extra,
    ]
    # Its output goes to a file beside the state: a pipe nobody reads fills up under a loaded
    # machine's retry warnings and blocks the agent in its logging (seen: no exit in 20 s).
    with (state.parent / "agent.log").open("a") as log:
        return subprocess.Popen(command, stdout=log, stderr=log, text=True)


def test_devices_prints_the_chips_of_a_recorded_npu_smi_run(tmp_path: Path) -> None:
    shutil.copy(SAMPLES / "910-atlas800-9010-npu-smi-info-22.0.3.1.txt", tmp_path / "info.txt")
    shutil.copy(SAMPLES / "910-atlas800-9010-npu-smi-info-m.txt", tmp_path / "info-m.txt")
    done = agent("devices", "--driver", "npu-smi", "--npu-smi-replay", str(tmp_path))
    assert done.returncode == 0, done.stderr
    chips = json.loads(done.stdout)
    assert chips[7] == {
        "id": 7,
        "logic_id": 7,
        "name": "Ascend910-7",
        "health": "Healthy",
        "model": "910A",
    }


def test_devices_reports_a_dcmi_error_and_exits_2(tmp_path: Path) -> None:
    shutil.copy(SAMPLES / "npu-smi-error-dcmi-init-8005-container.txt", tmp_path / "info.txt")
    done = agent("devices", "--npu-smi-replay", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr == "error: npu-smi: dcmi module initialize failed. ret is -8005\n"


def test_devices_reads_the_fake_state(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(state_file(unhealthy=(5,)))
    done = agent("devices", "--driver", "fake", "--fake-state", str(tmp_path / "s.yaml"))
    assert [c["health"] for c in json.loads(done.stdout)].count("Unhealthy") == 1


def test_huawei_flag_spellings_are_accepted_and_checked(short_dir: Path) -> None:
    done = agent("-listWatchPeriod=2", "--driver", "fake", "--fake-state", "x")
    assert done.returncode == 2
    assert done.stderr == (
        "error: --list-watch-period/-listWatchPeriod: expected a whole number from 3 to 1800, "
        "got '2'\n"
    )
    done = agent("-volcanoType=true", "--driver", "fake", "--fake-state", "x")
    assert done.returncode == 2 and "-volcanoType needs the Kubernetes API" in done.stderr


def test_serve_registers_with_the_kubelet_and_sigterm_removes_its_socket(short_dir: Path) -> None:
    (short_dir / "state.yaml").write_text(state_file())
    plugins = short_dir / "plugins"
    kubelet = KubeletSimulator(plugins)
    kubelet.start()
    port = free_port()
    process = serve(
        plugins,
        short_dir / "state.yaml",
        "-listWatchPeriod=5",
        "--metrics-listen",
        f"127.0.0.1:{port}",
    )
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 8, timeout=20)
        allocation = kubelet.allocate("default/p", "main", RESOURCE, 4)
        assert "ASCEND_VISIBLE_DEVICES" in allocation.response.envs
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/readyz", timeout=5) as ready:
            assert ready.status == 200
        with urllib.request.urlopen(f"{base}/metrics", timeout=5) as scraped:
            text = scraped.read().decode()
        assert metric(text, "ascend_agent_allocations_total") == 1
        assert metric(text, "ascend_agent_chips", health="Healthy") == 8
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        assert not (plugins / "Ascend910.sock").exists()
    finally:
        if process.poll() is None:
            process.kill()
        kubelet.close()


def test_deviceinfo_prints_the_configmap_the_agent_would_publish(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(state_file(unhealthy=(7,)))
    done = agent(
        "deviceinfo",
        "--fake-state",
        str(tmp_path / "s.yaml"),
        "--node",
        "n1",
        "--update-time",
        "1657527526",
    )
    assert done.returncode == 0, done.stderr
    published = json.loads(done.stdout)
    assert published["metadata"]["name"] == "mindx-dl-deviceinfo-n1"
    cache = json.loads(published["data"]["DeviceInfoCfg"])
    assert cache["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Unhealthy"] == "Ascend910-7"
    assert cache["DeviceInfo"]["UpdateTime"] == 1657527526


def test_serve_with_the_kubernetes_api_gives_the_scheduler_chips_and_publishes_deviceinfo(
    short_dir: Path,
) -> None:
    store = MemoryCluster()
    store.put(
        "Node",
        {
            "metadata": {"name": "n1"},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.1.5"}]},
        },
    )
    server = LoopbackApiServer(store)
    url = server.start()
    config_file = short_dir / "kubeconfig"
    config_file.write_text(kubeconfig(url))
    (short_dir / "state.yaml").write_text(state_file())
    plugins = short_dir / "plugins"
    kubelet = KubeletSimulator(plugins, use_preferred=False)
    kubelet.start()
    process = serve(
        plugins,
        short_dir / "state.yaml",
        "-volcanoType=true",
        "--kube",
        "kubeconfig",
        "--kubeconfig",
        str(config_file),
        "--node-name",
        "n1",
        "--allow-missing-policies",  # the in-memory API server has no admission policies
    )
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 8, timeout=20)
        store.put(
            "Pod",
            pod_object(
                "ns",
                "p",
                "n1",
                2,
                annotations={
                    "huawei.com/Ascend910": "Ascend910-6,Ascend910-7",
                    "predicate-time": "1",
                },
            ),
        )
        allocation = kubelet.allocate("ns/p", "main", RESOURCE, 2)
        assert allocation.response.envs["ASCEND_VISIBLE_DEVICES"] == "6,7"
        assert store.get_pod("ns", "p")["metadata"]["annotations"]["huawei.com/AscendReal"] == (
            "Ascend910-6,Ascend910-7"
        )

        def published_without_6_and_7() -> bool:
            try:
                data = store.get_configmap("kube-system", "mindx-dl-deviceinfo-n1")["data"]
            except NotFound:
                return False
            return set(decode(data).free) == {0, 1, 2, 3, 4, 5}

        assert kubelet.wait_for(published_without_6_and_7, timeout=10)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
        kubelet.close()
        server.stop()


def test_kube_without_a_node_name_or_a_configuration_is_refused_with_the_reason() -> None:
    done = agent("--kube", "in-cluster", "--node-name", "", "--driver", "fake", "--fake-state", "x")
    assert done.returncode == 2 and "needs this node's name" in done.stderr
    done = agent(
        "--kube",
        "in-cluster",
        "-volcanoType=true",
        "--node-name",
        "n1",
        "--driver",
        "fake",
        "--fake-state",
        "x",
    )
    assert done.returncode == 2 and "no Kubernetes configuration" in done.stderr


def test_version_and_huawei_log_flags(short_dir: Path) -> None:
    for command in (["agent", "--version"], ["agent", "-version"], ["scheduler_core", "--version"]):
        done = subprocess.run(
            [sys.executable, "-m", *command],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0 and done.stdout.strip().endswith(version()), done
    bad = agent("--log-level", "verbose")
    assert bad.returncode == 2 and "'verbose' is not one of debug, info" in bad.stderr
    (short_dir / "state.yaml").write_text(state_file())
    log_file = short_dir / "agent.log"
    process = serve(
        short_dir / "plugins",
        short_dir / "state.yaml",
        f"-logFile={log_file}",
        "-logLevel=0",
        "-linkdownTimeout=10",
        "-presetVirtualDevice=true",
    )
    try:
        assert wait_for(lambda: log_file.exists() and "serving" in log_file.read_text())
        text = log_file.read_text()
        assert text.count("-linkdownTimeout=10 accepted, has no effect here") == 1
        assert "presetVirtualDevice" not in text, "a default value warns of nothing"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
