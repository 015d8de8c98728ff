"""Fault levels, per-job silencing and NodeD's ConfigMap, as Huawei's components read them."""

from __future__ import annotations

import pytest

from contract import nodeinfo
from contract.chip_names import InvalidInput
from contract.deviceinfo import ChipFault, DeviceInfo
from contract.nodeinfo import DeviceFault, NodeInfo
from scheduler_core.engine.chip_faults import (
    Silence,
    job_failed_chips,
    node_faults,
    silence_ends,
    silence_of,
)

NOW = 1_700_000_000.0
MS = int(NOW * 1000)


def info(
    *faults: ChipFault, unhealthy: set[int], network: frozenset[int] = frozenset()
) -> DeviceInfo:
    return DeviceInfo(frozenset(range(8)) - unhealthy, frozenset(unhealthy), network, faults, 1)


@pytest.mark.parametrize(
    ("level", "fails"),
    [
        ("RestartRequest", True),
        ("RestartBusiness", True),
        ("FreeRestartNPU", True),
        ("RestartNPU", True),
        ("SeparateNPU", True),
        ("ManuallySeparateNPU", True),
        ("NormalNPU", True),  # listed for a reason its codes do not give: the list decides
        ("NotHandleFault", False),
        ("SubHealthFault", False),
        ("PreSeparateNPU", False),  # no eviction: the job restarts only if it fails
    ],
)
def test_a_listed_chip_fails_by_its_fault_handling(level: str, fails: bool) -> None:
    fault = ChipFault(2, False, level, ("80E01801",), handling=level)
    assert (node_faults(info(fault, unhealthy={2})).failed == {2}) is fails


def test_the_handling_rules_over_the_level_and_an_entry_less_chip_stays_failed() -> None:
    fault = ChipFault(2, False, "SeparateNPU", ("80E01801",), handling="SubHealthFault")
    faults = node_faults(info(fault, unhealthy={2, 5}))
    assert faults.failed == {5} and faults.sub_healthy


def test_a_chip_listed_only_network_unhealthy_stops_no_running_pod() -> None:
    # ascend-for-volcano v26.1.0 rescheduling/task.go getTaskUseFaultCardHealthState reads the
    # -Unhealthy list only; the real plugin deleted no pod for it (testbed/differential/
    # faults.py, case force-network-unhealthy). It still keeps new distributed pods off it.
    link = ChipFault(4, True, "SeparateNPU", ("81078603",))
    faults = node_faults(info(link, unhealthy=set(), network=frozenset({4})))
    assert faults.failed == frozenset()
    assert node_faults(info(link, unhealthy={4}, network=frozenset({4}))).failed == {4}


def restart_request(since_ms: int | None) -> ChipFault:
    times = () if since_ms is None else (("80E01801", since_ms, "RestartRequest"),)
    return ChipFault(
        1, False, "RestartRequest", ("80E01801",), handling="RestartRequest", times=times
    )


def test_a_silenced_level_hides_a_young_fault_from_the_job_and_not_after_its_window() -> None:
    silence = silence_of({"huawei.com/schedule.filter.faultLevel": "RestartRequest"})
    assert silence == Silence(levels=(("RestartRequest", 60),))
    faults = {"n": node_faults(info(restart_request(MS - 59_000), unhealthy={1}))}
    assert job_failed_chips(silence, faults, NOW) == {"n": frozenset()}
    assert job_failed_chips(Silence(), faults, NOW) == {"n": {1}}, "others see it"
    assert silence_ends(silence, faults.values(), NOW) == NOW + 1
    assert job_failed_chips(silence, faults, NOW + 1.001) == {"n": {1}}
    # no time for the code: always reported (custom_filter_fault_processor.go l.201-204)
    timeless = {"n": node_faults(info(restart_request(None), unhealthy={1}))}
    assert job_failed_chips(silence, timeless, NOW) == {"n": {1}}


def test_a_code_entry_rules_over_its_level_and_every_bad_code_must_be_silenced() -> None:
    silence = silence_of(
        {
            "huawei.com/schedule.filter.faultLevel": "RestartRequest:600",
            "huawei.com/schedule.filter.faultCode": "80E01801:10",
        }
    )
    assert silence == Silence((("80E01801", 10),), (("RestartRequest", 600),))
    faults = {"n": node_faults(info(restart_request(MS - 30_000), unhealthy={1}))}
    assert job_failed_chips(silence, faults, NOW) == {"n": {1}}
    two = ChipFault(
        1,
        False,
        "SeparateNPU",
        ("80E01801", "80CB8002"),
        handling="SeparateNPU",
        times=(("80E01801", MS, "RestartRequest"), ("80CB8002", MS, "SeparateNPU")),
    )
    level_only = silence_of({"huawei.com/schedule.filter.faultLevel": "RestartRequest"})
    assert isinstance(level_only, Silence)
    assert job_failed_chips(level_only, {"n": node_faults(info(two, unhealthy={1}))}, NOW) == {
        "n": {1}
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", ()),
        ("RestartRequest", (("RestartRequest", 60),)),
        (
            " RestartRequest : 0 ，SeparateNPU：86400",
            (("RestartRequest", 0), ("SeparateNPU", 86400)),
        ),
        ("RestartRequestFault:5", (("RestartRequest", 5),)),  # a switch level's name
        ("a,,b:+7", (("a", 60), ("b", 7))),
    ],
)
def test_silencing_annotations_parse_as_clusterd_does(
    value: str, expected: tuple[tuple[str, int], ...]
) -> None:
    assert silence_of({"huawei.com/schedule.filter.faultLevel": value}) == Silence(levels=expected)


@pytest.mark.parametrize("value", ["RestartRequest:86401", "RestartRequest:-1", "x:1_0", "x:soon"])
def test_a_malformed_window_says_why_and_silences_nothing(value: str) -> None:
    answer = silence_of({"huawei.com/schedule.filter.faultCode": value})
    assert isinstance(answer, str) and "huawei.com/schedule.filter.faultCode" in answer
    assert "0–86400" in answer


def test_noded_configmap_round_trips_and_its_checkcode_is_nodeds() -> None:
    faults = (DeviceFault("CPU", 0, ("00000011", "0000001A"), "SeparateFault"),)
    data = nodeinfo.encode(NodeInfo("UnHealthy", faults))
    # Go's json.Marshal of NodeD's FaultDevInfo struct, field order kept (common/type.go)
    assert data["NodeInfo"].startswith(
        '{"NodeInfo":{"FaultDevList":[{"DeviceType":"CPU","DeviceId":0,'
        '"FaultCode":["00000011","0000001A"],"FaultLevel":"SeparateFault"}],'
        '"NodeStatus":"UnHealthy"},"CheckCode":"'
    )
    assert nodeinfo.decode(data) == NodeInfo("UnHealthy", faults)
    empty = nodeinfo.encode(NodeInfo("Healthy"))  # a nil list is Go's null
    assert '"FaultDevList":null' in empty["NodeInfo"]
    assert nodeinfo.decode(empty) == NodeInfo("Healthy")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"NodeInfo":{"NodeStatus":"UnHealthy"},"CheckCode":"00"}', "CheckCode does not match"),
        ('{"NodeInfo":{"NodeStatus":"Broken"},"CheckCode":""}', "none of Healthy"),
        ('{"NodeInfo":{"FaultDevList":[{"DeviceId":1.5}]},"CheckCode":""}', "malformed"),
        ('{"NodeInfo":{"FaultDevList":{}},"CheckCode":""}', "malformed"),
        ("[" * 100_000, "characters"),
        ("{", "malformed"),
    ],
)
def test_bad_noded_content_is_refused_with_its_reason(text: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        nodeinfo.decode({"NodeInfo": text})
