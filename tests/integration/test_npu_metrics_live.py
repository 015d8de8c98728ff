"""Issue 36's series scraped from the real processes (``python -m agent``, ``python -m
scheduler_core serve``) after a known allocation and a chip fault."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from contract.deviceinfo import DeviceInfo, encode
from simulation.cluster import state_file, wait_for
from simulation.kubelet import KubeletSimulator
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster, pod_object
from simulation.processes import free_port, scheduler_process
from tests.integration.conftest import RESOURCE
from tests.integration.test_agent_cli import serve
from tests.integration.test_scheduler_service import get, post
from tests.unit.helpers import metric


def scrape(url: str) -> str:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as scraped:
        return str(scraped.read().decode())


def test_the_agent_shows_each_chips_health_and_holder_and_a_new_fault(short_dir: Path) -> None:
    store = MemoryCluster()
    store.put("Node", {"metadata": {"name": "n1"}})
    server = LoopbackApiServer(store)
    config_file = short_dir / "kubeconfig"
    config_file.write_text(kubeconfig(server.start()))
    state = short_dir / "state.yaml"
    state.write_text(state_file(unhealthy=(5,)))
    plugins = short_dir / "plugins"
    kubelet = KubeletSimulator(plugins, use_preferred=False)
    kubelet.start()
    port = free_port()
    process = serve(
        plugins,
        state,
        "-volcanoType=true",
        "--kube",
        "kubeconfig",
        "--kubeconfig",
        str(config_file),
        "--node-name",
        "n1",
        "--allow-missing-policies",
        "--metrics-listen",
        f"127.0.0.1:{port}",
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 7, timeout=20)
        chips = {"huawei.com/Ascend910": "Ascend910-6,Ascend910-7", "predicate-time": "1"}
        store.put("Pod", pod_object("ns", "p", "n1", 2, annotations=chips))
        kubelet.allocate("ns/p", "main", RESOURCE, 2)

        def held_by_p() -> bool:
            text = scrape(base)
            return metric(text, "ascend_agent_chip_allocated", node="n1", chip="Ascend910-6") == 1

        assert wait_for(held_by_p, timeout=10)
        text = scrape(base)
        holder = {"node": "n1", "chip": "Ascend910-7", "namespace": "ns", "pod": "p"}
        assert metric(text, "ascend_agent_chip_pod_info", **holder) == 1
        assert metric(text, "ascend_agent_chip_allocated", node="n1", chip="Ascend910-0") == 0
        assert metric(text, "ascend_agent_chip_healthy", node="n1", chip="Ascend910-5") == 0
        assert metric(text, "ascend_agent_chip_healthy", node="n1", chip="Ascend910-2") == 1
        assert metric(text, "ascend_npu_build_info", component="agent", version="0.1.0") == 1
        state.write_text(state_file(unhealthy=(2, 5)))  # a chip fails

        def chip_2_unhealthy() -> bool:
            text = scrape(base)
            return metric(text, "ascend_agent_chip_healthy", node="n1", chip="Ascend910-2") == 0

        assert wait_for(chip_2_unhealthy, timeout=10)
    finally:
        process.kill()
        process.wait(timeout=20)
        kubelet.close()
        server.stop()


def npu_node(store: MemoryCluster, name: str, info: DeviceInfo, allocatable: int) -> None:
    quantities = {"huawei.com/Ascend910": "8"}
    status = {"capacity": quantities, "allocatable": {"huawei.com/Ascend910": str(allocatable)}}
    store.put("Node", {"metadata": {"name": name}, "status": status})
    labels = {"mx-consumer-cim": "true"}
    metadata = {"namespace": "kube-system", "name": f"mindx-dl-deviceinfo-{name}", "labels": labels}
    store.put("ConfigMap", {"metadata": metadata, "data": encode(info)})


def test_the_scheduler_shows_chips_per_node_excluded_nodes_gangs_and_decisions(
    tmp_path: Path,
) -> None:
    store = MemoryCluster()
    now = int(time.time())
    # n1: chip 7 unhealthy; n2: its agent last wrote an hour ago.
    npu_node(
        store,
        "n1",
        DeviceInfo(frozenset(range(7)), frozenset({7}), frozenset(), update_time=now),
        7,
    )
    npu_node(
        store,
        "n2",
        DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), update_time=now - 3600),
        8,
    )
    store.put("Pod", pod_object("ns", "p", None, 4))
    gang = {"ascend.npu/gang-size": "2"}
    store.put(
        "Pod",
        pod_object("ns", "g-0", None, 8, annotations=gang, labels={"ascend.npu/gang": "g"}),
    )
    with scheduler_process(store, tmp_path, "--refresh-period", "0.2") as service:
        url = service.url
        text = scrape(url)
        chips = "ascend_scheduler_node_chips"
        assert metric(text, chips, node="n1", product="module910x8", state="free") == 7
        assert metric(text, chips, node="n1", product="module910x8", state="unhealthy") == 1
        assert metric(text, chips, node="n2", product="module910x8", state="free") is None
        assert metric(text, "ascend_scheduler_nodes_excluded", reason="deviceinfo_stale") == 1
        assert metric(text, "ascend_scheduler_leader") == 1
        assert metric(text, "ascend_npu_build_info", component="scheduler", version="0.1.0") == 1
        pod = store.get_pod("ns", "p")
        assert post(f"{url}/filter", {"Pod": pod, "NodeNames": ["n1"]})["NodeNames"] == ["n1"]
        uid = pod["metadata"]["uid"]
        bind = {"PodName": "p", "PodNamespace": "ns", "PodUID": uid, "Node": "n1"}
        assert post(f"{url}/bind", bind) == {"Error": ""}
        member = store.get_pod("ns", "g-0")
        assert post(f"{url}/filter", {"Pod": member, "NodeNames": ["n1"]})["NodeNames"] == []
        text = scrape(url)
        assert metric(text, chips, node="n1", product="module910x8", state="free") == 3
        assert metric(text, chips, node="n1", product="module910x8", state="held") == 4
        # 3 free chips, none on a node an 8-chip pod fits: all stranded
        assert metric(text, "ascend_scheduler_fragmentation_ratio", product="module910x8") == 1
        decisions = "ascend_scheduler_decision_seconds_count"
        assert metric(text, decisions, verb="filter", kind="chips") == 1
        assert metric(text, decisions, verb="bind", kind="chips") == 1
        assert metric(text, decisions, verb="filter", kind="gang") == 1
        assert metric(text, "ascend_scheduler_waiting_gangs", reason="members_missing") == 1
        assert metric(text, "ascend_scheduler_gang_ttl_seconds") == 60
        status, _ = get(f"{url}/healthz")
        assert status == 200
