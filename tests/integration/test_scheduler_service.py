"""``python -m scheduler_core serve`` as an operator runs it: a process, HTTP, JSON logs."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agent.deviceinfo_publisher import configmap
from contract.deviceinfo import DeviceInfo
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.memory import MemoryCluster, pod_object, put_npu_node
from simulation.processes import scheduler_process
from tests.unit.helpers import metric


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as failed:
        return failed.code, failed.read().decode()


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def test_the_service_filters_binds_and_reports_health_and_metrics(tmp_path: Path) -> None:
    store = MemoryCluster()
    info = DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), update_time=int(time.time()))
    put_npu_node(store, "n1", info)
    store.put("Pod", pod_object("ns", "p", None, 4))
    with scheduler_process(store, tmp_path, "--refresh-period", "0.2") as service:
        url = service.url
        assert get(f"{url}/healthz") == (200, "ok\n")
        pod = store.get_pod("ns", "p")
        filtered = post(f"{url}/filter", {"Pod": pod, "Nodes": None, "NodeNames": ["n1", "n2"]})
        assert filtered["NodeNames"] == ["n1"]
        assert filtered["FailedAndUnresolvableNodes"] == {"n2": "n2 is not an Ascend NPU node"}
        assert post(f"{url}/prioritize", {"Pod": pod, "NodeNames": ["n1"]}) == [
            {"Host": "n1", "Score": 10}
        ]
        bound = post(
            f"{url}/bind",
            {"PodName": "p", "PodNamespace": "ns", "PodUID": pod["metadata"]["uid"], "Node": "n1"},
        )
        assert bound == {"Error": ""}
        assert store.get_pod("ns", "p")["metadata"]["annotations"]["huawei.com/Ascend910"] == (
            "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3"
        )
        status, metrics = get(f"{url}/metrics")
        assert status == 200 and metric(metrics, "ascend_scheduler_binds_total") == 1
        assert metric(metrics, "ascend_scheduler_requests_total", verb="filter") == 1
        assert metric(metrics, "ascend_scheduler_request_seconds_count", verb="bind") == 1
        bucket = metric(
            metrics, "ascend_scheduler_request_seconds_bucket", verb="filter", le="+Inf"
        )
        assert bucket == 1
        service.process.send_signal(signal.SIGTERM)
        _, stderr = service.process.communicate(timeout=20)
        assert service.process.returncode == 0
        logs = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
        bind_log = next(e for e in logs if e["message"].startswith("bound "))
        assert (bind_log["pod"], bind_log["node"]) == ("ns/p", "n1")


def test_concurrent_binds_over_http_never_share_a_chip() -> None:
    store = MemoryCluster()
    for name in ("n1", "n2"):
        store.put(
            "Node",
            {
                "metadata": {"name": name},
                "status": {
                    "capacity": {"huawei.com/Ascend910": "8"},
                    "allocatable": {"huawei.com/Ascend910": "8"},
                },
            },
        )
        info = DeviceInfo(
            frozenset(range(8)), frozenset(), frozenset(), update_time=int(time.time())
        )
        store.put("ConfigMap", configmap(name, info))
    for i in range(16):
        store.put("Pod", pod_object("ns", f"p{i}", None, 1))
    service = SchedulerService(store, Extender(store), refresh_period=60)
    url = service.start()

    def schedule(i: int) -> str:
        pod = store.get_pod("ns", f"p{i}")
        for _ in range(10):
            passing = post(f"{url}/filter", {"Pod": pod, "NodeNames": ["n1", "n2"]})["NodeNames"]
            answer = post(
                f"{url}/bind",
                {
                    "PodName": f"p{i}",
                    "PodNamespace": "ns",
                    "PodUID": pod["metadata"]["uid"],
                    "Node": passing[0],
                },
            )
            if not answer["Error"]:
                bound = store.get_pod("ns", f"p{i}")
                chips = bound["metadata"]["annotations"]["huawei.com/Ascend910"]
                return f"{bound['spec']['nodeName']}/{chips}"
        raise AssertionError(f"p{i} never bound")

    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            given = list(pool.map(schedule, range(16)))
    finally:
        service.stop()
    assert len(set(given)) == 16, given
