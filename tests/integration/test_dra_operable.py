"""The DRA driver as an admin runs it (``python -m dra_driver serve``): it stops at once on
SIGTERM even with the kubelet's health streams open, answers its probes (``/healthz``,
``/readyz``: registered, slice published, watch well) and ``/metrics``, and refuses a bad
flag value in one line with exit status 2."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml

from contract.dra import DEFAULT_DRIVER, SLICE_KIND
from deviceplugin_api.dra.v1 import api_pb2 as v1
from deviceplugin_api.dra.v1 import api_pb2_grpc as v1_grpc
from deviceplugin_api.dra_health.v1alpha1 import api_pb2 as health
from deviceplugin_api.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from dra_driver.__main__ import build_parser, main
from dra_driver.claims import FAILURE_REASONS
from dra_driver.driver import Status, why_not_ready
from infra.kube.policies import DRA_DRIVER_POLICIES
from infra.kube.port import Selection
from simulation.cluster import state_file, wait_for
from simulation.dra_cluster import dra_cluster, dra_node_object, driver_command, pod_with_claim
from simulation.kubelet_dra import KubeletDra
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster
from simulation.processes import free_port
from tests.unit.helpers import metric
from tests.unit.test_policies_check import install

NODE = "node-00"
EXIT_WITHIN = 2.0  # seconds from SIGTERM to the exit: the requirement
DAEMONSET = Path(__file__).parents[2] / "daemonset" / "overlays" / "dra" / "dra-daemonset.yaml"


@dataclass
class Node:
    home: Path
    store: MemoryCluster
    api: LoopbackApiServer


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    """A node given to DRA, its fake chips, and the API server as a kubeconfig names it."""
    store = MemoryCluster(bookmark_seconds=0.2)
    store.put("Node", dra_node_object(NODE, 0))
    install(store, DRA_DRIVER_POLICIES)  # as the chart installs them: the driver starts quietly
    api = LoopbackApiServer(store)
    api.start()
    (tmp_path / "state.yaml").write_text(state_file(frozenset({3})))
    (tmp_path / "kubeconfig").write_text(kubeconfig(api.url))
    yield Node(tmp_path, store, api)
    api.stop()


def start(node: Node, *flags: str) -> subprocess.Popen[bytes]:
    command = [*driver_command(NODE, node.home, kubeconfig_file=node.home / "kubeconfig"), *flags]
    with open(node.home / "driver.log", "wb") as log:
        return subprocess.Popen(command, stderr=log)


SLICES = Selection(SLICE_KIND)


def published(node: Node) -> bool:
    return bool(node.store.list_page(SLICES, 0).items)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()
    except OSError:
        return 0, ""  # not listening yet


def test_sigterm_with_health_streams_open_ends_the_driver_within_2_s(node: Node) -> None:
    driver = start(node)
    channel = None
    try:
        socket_path = node.home / "plugins" / DEFAULT_DRIVER / "dra.sock"
        assert wait_for(socket_path.exists, timeout=60)
        assert wait_for(lambda: published(node), timeout=30)
        channel = grpc.insecure_channel(f"unix://{socket_path}")
        stub = health_grpc.DRAResourceHealthStub(channel)
        streams = [
            iter(stub.NodeWatchResources(health.NodeWatchResourcesRequest(), timeout=120))
            for _ in range(2)
        ]
        for stream in streams:  # as the kubelet: each stream open, its first list read
            assert len(next(stream).devices) == 8
        driver.send_signal(signal.SIGTERM)
        assert wait_for(lambda: driver.poll() is not None, timeout=EXIT_WITHIN, step=0.01), (
            f"still running {EXIT_WITHIN} s after SIGTERM"
        )
        assert driver.returncode == 0, (node.home / "driver.log").read_text()
        assert not socket_path.exists()
    finally:
        if channel is not None:
            channel.close()
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_probes_follow_registration_the_published_slice_and_the_watch(node: Node) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    driver = start(node, f"--metrics-listen=127.0.0.1:{port}")
    kubelet = KubeletDra(NODE, node.home / "registry", node.store, node.home / "cdi")
    try:
        assert wait_for(lambda: get(f"{base}/healthz") == (200, "ok\n"), timeout=60)
        assert wait_for(lambda: published(node), timeout=30)
        assert get(f"{base}/readyz") == (503, "not registered with the kubelet\n")
        kubelet.start()  # registers the plugin (and wipes the node's slices, as at its start)
        assert wait_for(lambda: get(f"{base}/readyz") == (200, "ready\n"), timeout=30)
        node.store.reachable = False
        assert wait_for(lambda: get(f"{base}/readyz")[0] == 503, timeout=30)
        assert "the ResourceSlice watch has failed" in get(f"{base}/readyz")[1]
        node.store.reachable = True
        assert wait_for(lambda: get(f"{base}/readyz") == (200, "ready\n"), timeout=30)
        status, text = get(f"{base}/metrics")
        assert status == 200
        assert metric(text, "ascend_npu_build_info", component="dra-driver", version="0.1.0")
        assert metric(text, "ascend_dra_driver_published_devices") == 8
        assert metric(text, "ascend_dra_driver_chips", health="Unhealthy") == 1
        assert (metric(text, "ascend_dra_driver_watch_errors_total") or 0) >= 1
        assert (metric(text, "ascend_dra_driver_slice_writes_total") or 0) >= 2, "wiped, again"
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(timeout=10) == 0
    finally:
        kubelet.stop()
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def test_prepares_and_unprepares_are_counted_by_result() -> None:
    with dra_cluster(1) as cluster:
        driver = cluster.nodes[NODE].driver
        cluster.store.put("Pod", pod_with_claim("default", "p", "npu-2-ring"))
        assert cluster.run() == ["default/p"]
        channel = grpc.insecure_channel(f"unix://{driver.plugin.dra_socket}")
        missing = v1.Claim(namespace="default", uid="uid-missing", name="missing")
        answer = v1_grpc.DRAPluginStub(channel).NodePrepareResources(
            v1.NodePrepareResourcesRequest(claims=[missing]), timeout=10
        )
        channel.close()
        assert "not found" in answer.claims["uid-missing"].error
        cluster.end("default/p")
        text = driver.metrics.text()
        counted = {
            (name, result): metric(text, f"ascend_dra_driver_{name}_total", result=result)
            for name in ("prepares", "unprepares")
            for result in ("success", "error")
        }
        assert counted == {
            ("prepares", "success"): 1,
            ("prepares", "error"): 1,
            ("unprepares", "success"): 1,
            ("unprepares", "error"): 0,
        }
        assert metric(text, "ascend_dra_driver_prepared_claims") == 0
        failures = {
            reason: metric(text, "ascend_dra_driver_prepare_failures_total", reason=reason)
            for reason in FAILURE_REASONS
        }
        assert failures == {r: (1 if r == "not_found" else 0) for r in FAILURE_REASONS}


def test_readiness_names_the_first_thing_missing() -> None:
    assert why_not_ready(Status(registered=True, published=True, watch_failing_for=0)) is None
    assert why_not_ready(Status(False, False, 5.0)) == "not registered with the kubelet"
    assert why_not_ready(Status(True, False, 2.4)) == ("the ResourceSlice watch has failed for 2 s")
    assert why_not_ready(Status(True, False, 0)) == "the ResourceSlice is not published"


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (
            ["--metrics-listen=9102"],
            "error: --metrics-listen: expected HOST:PORT (e.g. 0.0.0.0:8888), got '9102'\n",
        ),
        (
            ["--driver-name=Not_A_Name"],
            "error: --driver-name: expected a DNS subdomain of at most 63 characters "
            "(npu.example.com), got 'Not_A_Name'\n",
        ),
        (
            ["--log-backups=0"],
            "error: --log-backups: expected a whole number from 1 to 30, got '0'\n",
        ),
        (["--log-format=xml"], "error: --log-format: invalid choice: 'xml' (choose from "),
        (["--node-name="], "error: --node-name (or NODE_NAME) is required\n"),
        (
            ["--log-file=/nonexistent/dir/driver.log"],
            "error: --log-file /nonexistent/dir/driver.log: No such file or directory\n",
        ),
        (
            [f"--plugins-dir=/{'p' * 100}"],
            "error: --plugins-dir: expected a socket path of at most 107 bytes",
        ),
    ],
)
def test_a_bad_flag_value_is_refused_in_one_line_with_exit_2(
    flags: list[str], error: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        sys.exit(main(["serve", "--node-name=n", "--fake-state=x", *flags]))
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(error)


def test_a_metrics_address_in_use_is_refused_in_one_line_with_exit_2(node: Node) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        driver = start(node, f"--metrics-listen=127.0.0.1:{port}")
        assert driver.wait(timeout=60) == 2
    assert (node.home / "driver.log").read_text() == (
        f"error: --metrics-listen 127.0.0.1:{port}: address already in use\n"
    )
    assert not (node.home / "registry").exists(), "nothing was registered"
    assert not published(node), "nothing was published"


def test_the_daemonset_probes_the_port_its_flags_serve() -> None:
    (daemonset,) = yaml.safe_load_all(DAEMONSET.read_text())
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args.metrics_listen == ("0.0.0.0", ports["metrics"])
    probes = {
        kind: (probe["httpGet"]["path"], probe["httpGet"]["port"])
        for kind, probe in container.items()
        if kind.endswith("Probe")
    }
    assert probes == {
        "readinessProbe": ("/readyz", "metrics"),
        "startupProbe": ("/healthz", "metrics"),
        "livenessProbe": ("/healthz", "metrics"),
    }
