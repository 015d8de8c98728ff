"""ClusterD's cluster-info-* ConfigMaps decoded (contract.clusterd) and read by the live view
in their place of the DeviceInfo and NodeD ConfigMaps, with the last good content kept."""

from __future__ import annotations

import pytest

from contract import clusterd
from contract.chip_names import InvalidInput
from scheduler_core.service.state.live_view import LiveView
from tests.clusterd_maps import (
    UPDATE_TIME,
    device_entry,
    devices,
    nodes,
    public_fault,
    switches,
)

NODE = {
    "metadata": {"name": "n0", "labels": {}},
    "status": {
        "capacity": {"huawei.com/Ascend910": "8"},
        "allocatable": {"huawei.com/Ascend910": "8"},
    },
}


def data(cm: dict[str, object]) -> dict[str, str]:
    value = cm["data"]
    assert isinstance(value, dict)
    return value


def test_a_device_map_gives_each_node_its_deviceinfo_public_faults_included() -> None:
    cm = devices(0, device_entry("n0", {3}, [public_fault(3)]), device_entry("n1"))
    infos = clusterd.decode_devices("cluster-info-device-0", data(cm))
    assert sorted(infos) == ["n0", "n1"]
    assert infos["n0"].unhealthy == {3} and 3 not in infos["n0"].free
    assert [(f.chip, f.level) for f in infos["n0"].faults] == [(3, "SeparateNPU")]
    assert infos["n0"].update_time == UPDATE_TIME and infos["n1"].unhealthy == frozenset()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not JSON"),
        ('["a list"]', "not a map"),
        ('{"mindx-dl-deviceinfo-n0": 3}', "not an object"),
        ('{"mindx-dl-deviceinfo-n0": {"DeviceList": {"huawei.com/Ascend910": 7}}}', "map of str"),
        ('{"mindx-dl-deviceinfo-n0": {"UpdateTime": "soon"}}', "UpdateTime"),
        (
            '{"mindx-dl-deviceinfo-n0": {"DeviceList": {"huawei.com/Ascend910": "GPU-1"}}}',
            "n0",
        ),
    ],
)
def test_a_malformed_device_map_is_refused_naming_why(text: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        clusterd.decode_devices("cluster-info-device-0", {"cluster-info-device-0": text})


def test_an_empty_value_is_no_entry_and_a_missing_key_is_refused() -> None:
    assert clusterd.decode_devices("cluster-info-device-0", {"cluster-info-device-0": ""}) == {}
    with pytest.raises(InvalidInput, match="no cluster-info-device-0 key"):
        clusterd.decode_devices("cluster-info-device-0", {})
    big = "x" * (clusterd.MAX_BYTES + 1)
    with pytest.raises(InvalidInput, match="at most"):
        clusterd.decode_switches("cluster-info-switch-0", {"cluster-info-switch-0": big})


def test_node_and_switch_maps() -> None:
    fault = {"DeviceType": "CPU", "DeviceId": 0, "FaultCode": ["00000011"], "FaultLevel": "X"}
    cm = nodes({"n0": ("UnHealthy", [fault]), "n1": ("Healthy", [])})
    reports = clusterd.decode_nodes(clusterd.NODE_NAME, data(cm))
    assert reports["n0"].status == "UnHealthy" and reports["n1"].status == "Healthy"
    bad = nodes({"n0": ("Broken", [])})
    with pytest.raises(InvalidInput, match=r"n0.*NodeStatus"):
        clusterd.decode_nodes(clusterd.NODE_NAME, data(bad))
    sw = switches(0, {"n0": ("SubHealthy", "SubHealthFault"), "n1": ("Healthy", "NotHandle")})
    read = clusterd.decode_switches("cluster-info-switch-0", data(sw))
    assert read["n0"].sub_healthy and not read["n1"].sub_healthy


def view() -> LiveView:
    live = LiveView(clusterd=True)
    live.set_node("n0", NODE)
    return live


def test_the_live_view_reads_clusterd_and_keeps_the_last_good_content(
    caplog: pytest.LogCaptureFixture,
) -> None:
    live = view()
    live.changed(UPDATE_TIME)
    assert live.views["n0"].state is None, "no ClusterD entry yet: no DeviceInfo"
    cm = devices(0, device_entry("n0", {3}, [public_fault(3)]))
    live.set_clusterd("cluster-info-device-0", data(cm))
    live.changed(UPDATE_TIME + 10_000)  # ClusterD's UpdateTime does not age out
    state = live.views["n0"].state
    assert state is not None and 3 not in state.free and 3 in state.unhealthy
    # The kubelet still counts the publicly faulty chip: upstream lets device info be fewer.
    for _ in range(2):
        live.set_clusterd("cluster-info-device-0", {"cluster-info-device-0": "{oops"})
    assert sum("cluster-info-device-0 ignored" in r.message for r in caplog.records) == 1
    live.changed(UPDATE_TIME)
    kept = live.views["n0"].state
    assert kept is not None and 3 not in kept.free, "the last good content stays"
    live.set_clusterd("cluster-info-device-0", None)
    live.changed(UPDATE_TIME)
    assert live.views["n0"].state is None, "deleted: its nodes have no DeviceInfo"


def test_clusterd_node_report_and_switch_reach_the_view() -> None:
    live = view()
    cm = devices(0, device_entry("n0"))
    live.set_clusterd("cluster-info-device-0", data(cm))
    live.set_clusterd(clusterd.NODE_NAME, data(nodes({"n0": ("UnHealthy", [])})))
    live.changed(UPDATE_TIME)
    assert live.views["n0"].state is None and live.views["n0"].down
    live.set_clusterd(clusterd.NODE_NAME, data(nodes({})))  # each version replaces all
    live.set_clusterd("cluster-info-switch-0", data(switches(0, {"n0": ("SubHealthy", "")})))
    live.changed(UPDATE_TIME)
    assert live.views["n0"].state is not None and live.views["n0"].sub_healthy
    live.set_clusterd("some-other-cm", {"x": "y"})  # not ClusterD's: ignored
