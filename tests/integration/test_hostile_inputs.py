"""What a tenant of a shared cluster can write (annotations, ConfigMaps, requests) harms only
the object it wrote: no loop stops, no node is taken out, no other pod's Allocate fails."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contract.deviceinfo import DATA_KEY, DeviceInfo, check_code, encode
from infra.kube.port import KubeError, Page, Selection
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from scheduler_core.service.wire import BadPod, pod_request
from simulation.memory import MemoryCluster, pod_object
from tests.integration.test_extender import Harness, add_node, bind_args, pending
from tests.integration.test_volcano import call, task
from tests.unit.helpers import metric

HUGE_CHIP = "Ascend910-" + "9" * 5000


def running(h: Harness, name: str, node: str, npu: int, **annotations: str) -> None:
    h.api.put("Pod", pod_object("ns", name, node, npu, annotations=annotations, phase="Running"))


def test_a_running_pod_naming_a_huge_chip_id_stops_nothing_and_new_nodes_are_seen() -> None:
    h = Harness(1)
    running(h, "evil", "n0", 2, **{"huawei.com/AscendReal": HUGE_CHIP})
    h.service.refresh_once_safely()
    add_node(h.api, "n1")
    h.names.append("n1")
    h.service.refresh_once_safely()
    assert h.service.metrics.refresh_errors == 0
    assert h.filter(pending(h.api, "p", 8)).NodeNames == ["n1"]


def test_a_gang_pod_with_an_unreadable_rank_stops_nothing() -> None:
    h = Harness(2)
    pod = pod_object("ns", "g-0", "n0", 8, annotations={"hccl/rankIndex": "²"}, phase="Running")
    pod["metadata"]["labels"] = {"ascend.npu/gang": "g"}
    h.api.put("Pod", pod)
    h.service.refresh_once_safely()
    assert h.service.metrics.refresh_errors == 0


@pytest.mark.parametrize("size", ["²", "9" * 5000, "-1"])
def test_an_unreadable_gang_size_is_the_pods_own_bad_request(size: str) -> None:
    pod = pod_object("ns", "p", None, 8, annotations={"ascend.npu/gang-size": size})
    pod["metadata"]["labels"] = {"ascend.npu/gang": "g"}
    with pytest.raises(BadPod, match="gang-size"):
        pod_request(pod)


def test_a_pod_that_requests_no_npu_holds_no_chips_whatever_it_carries() -> None:
    h = Harness(1)
    running(h, "squatter", "n0", 0, **{"huawei.com/Ascend910": "Ascend910-0"})
    h.service.refresh()
    assert h.filter(pending(h.api, "p", 8)).NodeNames == ["n0"]


def deviceinfo_data(text: str) -> dict[str, str]:
    return {DATA_KEY: text}


def valid_cache(devices: dict[str, str], update_time: int) -> str:
    return json.dumps(
        {
            "DeviceInfo": {"DeviceList": devices, "UpdateTime": update_time},
            "CheckCode": check_code(devices, update_time),
        }
    )


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (deviceinfo_data("[" * 100_000), "characters"),
        (deviceinfo_data("[" * 60_000), "nests too deep"),
        (
            deviceinfo_data(valid_cache({"huawei.com/Ascend910": HUGE_CHIP}, 1_700_000_000)),
            "chip list",
        ),
        (
            encode(
                DeviceInfo(frozenset(range(8)), frozenset(), frozenset(), update_time=1_800_000_000)
            ),
            "in the future",
        ),
    ],
)
def test_a_malformed_deviceinfo_leaves_only_its_node_out_with_the_reason(
    data: dict[str, str], reason: str
) -> None:
    h = Harness(2)
    h.api.put(
        "ConfigMap",
        {
            "metadata": {
                "namespace": "kube-system",
                "name": "mindx-dl-deviceinfo-n1",
                "labels": {"mx-consumer-cim": "true"},
            },
            "data": data,
        },
    )
    h.service.refresh_once_safely()
    assert h.service.metrics.refresh_errors == 0
    answer = h.filter(pending(h.api, "p", 8))
    assert answer.NodeNames == ["n0"]
    assert reason in answer.FailedNodes["n1"]
    assert len(answer.FailedNodes["n1"]) < 300, "a huge value makes no huge message"


def test_readyz_turns_false_when_the_last_good_read_is_three_periods_old() -> None:
    h = Harness(1)
    assert h.service.ready()
    h.api.reachable = False
    h.clock.now += 2.5
    h.service.refresh_once_safely()
    assert h.service.ready(), "two and a half periods: still ready"
    h.clock.now += 1
    h.service.refresh_once_safely()
    assert not h.service.ready()
    assert h.service.metrics.refresh_errors == 2
    h.api.reachable = True
    h.service.refresh_once_safely()
    assert h.service.ready()


def test_a_malformed_pod_is_reported_once_with_a_warning_event_and_a_counter() -> None:
    h = Harness(1)
    running(h, "garbled", "n0", 2, **{"huawei.com/AscendReal": "Ascend910-1,Ascend910-1"})
    for _ in range(3):
        h.service.refresh()
    h.extender.state.events.flush()
    (event,) = h.api.events
    assert (event["type"], event["reason"]) == ("Warning", "NPUAnnotationMalformed")
    assert event["involvedObject"]["name"] == "garbled"
    assert "names a chip twice" in event["message"]
    text = h.service.metrics.text()
    assert metric(text, "ascend_scheduler_malformed_objects_total", kind="pod") == 1


def test_a_binding_stored_but_answered_503_keeps_its_chips(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(1)
    pod = pending(h.api, "p", 8)
    store = h.api.bind_pod

    def stored_then_503(*args: Any) -> None:
        store(*args)
        raise KubeError("create binding: 503 Service Unavailable")

    monkeypatch.setattr(h.api, "bind_pod", stored_then_503)
    assert h.filter(pod).NodeNames == ["n0"]  # kube-scheduler's filter before its bind
    assert h.extender.bind(bind_args(pod, "n0")).Error == "", "the pod was bound"
    assert h.filter(pending(h.api, "next", 8)).NodeNames == []


def test_a_failed_binding_whose_pod_cannot_be_read_keeps_its_chips_in_doubt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(1)
    pod = pending(h.api, "p", 8)
    store = h.api.bind_pod

    def stored_then_down(*args: Any) -> None:
        store(*args)
        h.api.reachable = False
        raise KubeError("create binding: connection reset")

    monkeypatch.setattr(h.api, "bind_pod", stored_then_down)
    assert h.filter(pod).NodeNames == ["n0"]
    assert "stay held" in h.extender.bind(bind_args(pod, "n0")).Error
    h.api.reachable = True
    assert h.filter(pending(h.api, "next", 8)).NodeNames == []


def test_a_forged_deallocate_gives_back_nothing_this_service_did_not_give_that_pod() -> None:
    h = Harness(1)
    first = pending(h.api, "first", 8)
    assert call(h, "allocateFunc", {"task": task(first, "n0")}) == {"errorMessage": ""}
    forged = json.loads(json.dumps(first))
    forged["metadata"]["uid"] = "someone-else"
    assert call(h, "deallocateFunc", {"task": task(forged, "n0")}) == {"errorMessage": ""}
    stranger = pending(h.api, "stranger", 8)
    assert call(h, "deallocateFunc", {"task": task(stranger, "n0")}) == {"errorMessage": ""}
    refused = call(h, "allocateFunc", {"task": task(stranger, "n0")})["errorMessage"]
    # no chip idle: MindCluster's framework's words (plugin/job.go checkNodeNum)
    assert "requires 8 NPU cards but node idle is 0" in refused, "first's chips are still first's"


def test_a_made_up_allocate_for_a_pod_without_npus_writes_nothing() -> None:
    h = Harness(1)
    h.api.put("Pod", pod_object("kube-system", "coredns", None, 0))
    real = h.api.get_pod("kube-system", "coredns")
    forged = json.loads(json.dumps(real))
    forged["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend910"] = "8"
    answer = call(h, "allocateFunc", {"task": task(forged, "n0")})
    assert "requests no huawei.com/Ascend910" in answer["errorMessage"]
    assert (
        "huawei.com/Ascend910"
        not in h.api.get_pod("kube-system", "coredns")["metadata"]["annotations"]
    )


class CountingReads(MemoryCluster):
    def __init__(self) -> None:
        super().__init__()
        self.node_lists = 0

    def list_page(self, what: Selection, limit: int, token: str = "") -> Page:
        self.node_lists += what.kind == "Node"
        return super().list_page(what, limit, token)


def test_a_stream_of_session_openings_reads_the_cluster_once_a_period() -> None:
    api = CountingReads()
    service = SchedulerService(api, Extender(api), refresh_period=60)
    for _ in range(200):
        service.routes.handle("volcano/onSessionOpen", {})
    assert api.node_lists == 1


def test_session_openings_read_nothing_once_the_cluster_is_watched() -> None:
    api = CountingReads()
    service = SchedulerService(api, Extender(api), refresh_period=60)
    service.start()
    try:
        for _ in range(200):
            service.routes.handle("volcano/onSessionOpen", {})
        assert api.node_lists == 1, "the first read only"
    finally:
        service.stop()


def test_an_allocate_for_another_schedulers_npu_pod_writes_nothing() -> None:
    # Volcano's allocateFunc annotates only pods of a scheduler the service places for: the
    # token holder cannot hand chips to a pod placed some other way (issue 38).
    h = Harness(1)
    stray = pending(h.api, "stray", 8)
    stray["spec"]["schedulerName"] = "default-scheduler"
    h.api.put("Pod", stray)
    live = h.api.get_pod(stray["metadata"]["namespace"], "stray")
    answer = call(h, "allocateFunc", {"task": task(live, "n0")})
    assert answer["errorMessage"].endswith(
        "the pod is for scheduler 'default-scheduler', not ours"
    ), answer
    assert "huawei.com/Ascend910" not in (live["metadata"].get("annotations") or {})
    assert "huawei.com/Ascend910" not in (
        h.api.get_pod(stray["metadata"]["namespace"], "stray")["metadata"].get("annotations") or {}
    )
