"""``status``: a node's chips as rings, with who holds what, for people at a terminal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from agent.deviceinfo_publisher import configmap
from chip_topology.diagram import ring_diagram
from chip_topology.products import MODULE_910X8
from contract.chip_names import ASCEND310, ASCEND310P
from contract.deviceinfo import DeviceInfo, encode
from contract.pods import pod_view
from scheduler_core.service.state import live_view
from scheduler_core.service.views.status import cluster_json, cluster_lines
from simulation.cluster import state_file
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster, pod_object


def test_each_pod_gets_a_letter_and_a_legend() -> None:
    holders = {0: "ns/a", 1: "ns/a", 4: "ns/b", 5: "ns/b", 6: "ns/b", 7: "ns/b"}
    drawing, legend = ring_diagram(MODULE_910X8, free={2}, unhealthy={3}, holders=holders)
    assert drawing == "[aa.x|bbbb]"
    assert legend == ["a = ns/a", "b = ns/b"]


def cluster(tmp_path: Path) -> tuple[MemoryCluster, LoopbackApiServer, Path]:
    store = MemoryCluster()
    for name, allocatable in (("n1", "7"), ("n2", "8")):
        store.put(
            "Node",
            {
                "metadata": {"name": name},
                "status": {
                    "capacity": {"huawei.com/Ascend910": "8"},
                    "allocatable": {"huawei.com/Ascend910": allocatable},
                },
            },
        )
    info = DeviceInfo(
        frozenset(range(6)), frozenset({7}), frozenset(), update_time=int(time.time())
    )
    store.put(
        "ConfigMap",
        {
            "metadata": {
                "namespace": "kube-system",
                "name": "mindx-dl-deviceinfo-n1",
                "labels": {"mx-consumer-cim": "true"},
            },
            "data": encode(info),
        },
    )
    store.put(
        "Pod",
        pod_object(
            "ns",
            "train",
            "n1",
            1,
            phase="Running",
            annotations={"huawei.com/AscendReal": "Ascend910-6"},
        ),
    )
    server = LoopbackApiServer(store)
    config = tmp_path / "kubeconfig"
    config.write_text(kubeconfig(server.start()))
    return store, server, config


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def agent_status(state: Path) -> tuple[str, ...]:
    return ("agent", "status", "--fake-state", str(state), "--node-name", "n1")


def test_the_scheduler_shows_every_node_and_why_one_is_left_out(tmp_path: Path) -> None:
    _, server, config = cluster(tmp_path)
    try:
        done = run("scheduler_core", "status", "--kube", "kubeconfig", "--kubeconfig", str(config))
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    n1 = next(line for line in lines if line.startswith("n1 "))
    assert "[....|..ax]" in n1 and "a = ns/train" in n1
    assert any(
        line.startswith("n2 ") and "no mindx-dl-deviceinfo-n2 ConfigMap" in line for line in lines
    )


def test_the_agent_shows_its_chips_and_with_the_api_their_holders(tmp_path: Path) -> None:
    _, server, config = cluster(tmp_path)
    state = tmp_path / "state.yaml"
    state.write_text(state_file(unhealthy={7}))
    try:
        alone = run(*agent_status(state))
        with_api = run(*agent_status(state), "--kube", "kubeconfig", "--kubeconfig", str(config))
    finally:
        server.stop()
    assert alone.returncode == 0 and "[....|...x]" in alone.stdout
    assert with_api.returncode == 0, with_api.stderr
    assert "[....|..ax]" in with_api.stdout and "a = ns/train" in with_api.stdout


def test_status_shows_the_cluster_whatever_a_tenant_wrote_on_a_pod(tmp_path: Path) -> None:
    store, server, config = cluster(tmp_path)
    hostile = {"huawei.com/AscendReal": "Ascend910-" + "9" * 5000, "hccl/rankIndex": "²"}
    store.put("Pod", pod_object("ns", "evil", "n1", 1, phase="Running", annotations=hostile))
    try:
        done = run("scheduler_core", "status", "--kube", "kubeconfig", "--kubeconfig", str(config))
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    assert any(line.startswith("n1 ") for line in done.stdout.splitlines())


def test_both_status_commands_speak_json_and_read_kubeconfig_as_kubectl(tmp_path: Path) -> None:
    _, server, config = cluster(tmp_path)
    state = tmp_path / "state.yaml"
    state.write_text(state_file(unhealthy={7}))
    # No --kube, no --kubeconfig: KUBECONFIG names the file, as for kubectl.
    environ = {**os.environ, "KUBECONFIG": str(config)}
    try:
        scheduler = run("scheduler_core", "status", "-o", "json", env=environ)
        node = run(*agent_status(state), "--kube", "auto", "-o", "json", env=environ)
    finally:
        server.stop()
    assert scheduler.returncode == 0, scheduler.stderr
    cluster_view = json.loads(scheduler.stdout)
    (n1,) = cluster_view["nodes"]
    assert (n1["name"], n1["holders"], n1["unhealthy"]) == ("n1", {"6": "ns/train"}, [7])
    assert "no mindx-dl-deviceinfo-n2 ConfigMap" in cluster_view["left_out"]["n2"]
    assert node.returncode == 0, node.stderr
    assert json.loads(node.stdout) == {
        "node": "n1",
        "product": "module910x8",
        "free": [0, 1, 2, 3, 4, 5],
        "unhealthy": [7],
        "holders": {"6": "ns/train"},
    }


def test_status_draws_an_inference_nodes_cards_and_a_vnpu_nodes_ai_cores() -> None:
    now = 1_700_000_000
    nodes = [
        {
            "metadata": {"name": "i310", "labels": {}},
            "status": {
                "capacity": {"huawei.com/Ascend310": "8"},
                "allocatable": {"huawei.com/Ascend310": "8"},
            },
        },
        {
            "metadata": {"name": "v0", "labels": {"servertype": "Ascend310P-8"}},
            "status": {
                "capacity": {"huawei.com/npu-core": "16"},
                "allocatable": {"huawei.com/npu-core": "16"},
            },
        },
    ]
    infos = {
        "i310": DeviceInfo(
            frozenset(range(1, 8)), frozenset(), frozenset(), update_time=now, kind=ASCEND310
        ),
        "v0": DeviceInfo(
            frozenset({0, 1}), frozenset(), frozenset(), update_time=now, kind=ASCEND310P
        ),
    }
    configmaps = [configmap(name, info) for name, info in infos.items()]
    pods = [
        pod_view(
            pod_object(
                "ns",
                "serve",
                "i310",
                1,
                phase="Running",
                annotations={"huawei.com/AscendReal": "Ascend310-0"},
                resource="huawei.com/Ascend310",
            )
        ),
        pod_view(
            pod_object(
                "ns",
                "cut",
                "v0",
                2,
                phase="Running",
                annotations={"huawei.com/npu-core": "1-vir02_1c"},
                resource="huawei.com/npu-core",
            )
        ),
    ]
    snapshot = live_view.build(nodes, configmaps, pods, now)
    lines = cluster_lines(snapshot, pods)
    i310 = next(line for line in lines if line.startswith("i310 "))
    assert "[a...|....]" in i310 and "a = ns/serve" in i310, "two cards of 4, not 16"
    v0 = next(line for line in lines if line.startswith("v0 "))
    assert "0: 8/8 cores 7/7 cpus, 1: 6/8 cores 6/7 cpus creating; 14 AI cores idle" in v0
    vnodes = cluster_json(snapshot, pods)["vnpu_nodes"]
    assert isinstance(vnodes, list)
    assert vnodes[0]["pods"] == ["ns/cut"] and vnodes[0]["chips"][1]["creating"] is True
