"""The DeviceInfo ConfigMap as the agent keeps it published."""

from __future__ import annotations

import json

from agent.deviceinfo_publisher import DeviceInfoPublisher
from agent.pod_cache import PodCache
from chip_drivers.chips import Chip, NodeChips
from chip_drivers.state import DeviceState
from contract.deviceinfo import decode
from contract.objects import Obj
from infra.kube.port import Forbidden, Page, Selection
from simulation.cluster import wait_for
from simulation.memory import MemoryCluster, pod_object

NODE = NodeChips("Ascend910", "module910x8", tuple(Chip(i, i, healthy=i != 7) for i in range(8)))
CM = ("kube-system", "mindx-dl-deviceinfo-n1")


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def setup(api: MemoryCluster) -> tuple[DeviceInfoPublisher, PodCache, DeviceState, Clock]:
    cache = PodCache(api, "n1")
    cache.resync()
    state = DeviceState(NODE)
    clock = Clock()
    return (
        DeviceInfoPublisher(
            api, "n1", state=state, cache=cache, period=1, heartbeat=60, clock=clock
        ),
        cache,
        state,
        clock,
    )


def free_chips(api: MemoryCluster) -> set[int]:
    return set(decode(api.get_configmap(*CM)["data"]).free)


def test_the_free_list_leaves_out_unhealthy_held_and_reserved_chips() -> None:
    api = MemoryCluster()
    api.put(
        "Pod",
        pod_object(
            "ns",
            "running",
            "n1",
            2,
            annotations={
                "huawei.com/Ascend910": "Ascend910-0,Ascend910-1",
                "predicate-time": "18446744073709551615",
                "huawei.com/AscendReal": "Ascend910-0,Ascend910-1",
            },
        ),
    )
    api.put(
        "Pod",
        pod_object(
            "ns",
            "bound",
            "n1",
            1,
            annotations={"huawei.com/Ascend910": "Ascend910-4", "predicate-time": "5"},
        ),
    )
    api.put(
        "Pod",
        pod_object(
            "ns",
            "done",
            "n1",
            1,
            phase="Succeeded",
            annotations={"huawei.com/AscendReal": "Ascend910-5"},
        ),
    )
    publisher, *_ = setup(api)
    assert publisher.publish_once()
    assert free_chips(api) == {2, 3, 5, 6}
    written = api.get_configmap(*CM)
    assert written["metadata"]["labels"] == {"mx-consumer-cim": "true"}
    cache = json.loads(written["data"]["DeviceInfoCfg"])
    assert cache["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Unhealthy"] == "Ascend910-7"
    assert cache["DeviceInfo"]["UpdateTime"] == 1_700_000_000


class CountingCalls(MemoryCluster):
    """Counts the ConfigMap calls the publisher makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def get_configmap(self, namespace: str, name: str) -> Obj:
        # The fault-code override is read once per PollInterval (300 s): counted apart.
        self.calls.append("get-fault-config" if name == "mindx-dl-fault-config" else "get")
        return super().get_configmap(namespace, name)

    def read_configmap_by_patch(self, namespace: str, name: str) -> Obj:
        self.calls.append("read")  # its own DeviceInfo: the only one it reads but the override
        return super().read_configmap_by_patch(namespace, name)

    def update_configmap(self, body: Obj) -> Obj:
        self.calls.append("update")
        return super().update_configmap(body)

    def create_configmap(self, body: Obj) -> Obj:
        self.calls.append("create")
        return super().create_configmap(body)


def test_it_writes_on_change_and_at_least_every_heartbeat_and_reads_nothing_in_between() -> None:
    api = CountingCalls()
    publisher, _, state, clock = setup(api)
    assert publisher.publish_once()
    for _ in range(59):  # a minute at rest, looked at every second
        clock.now += 1
        assert not publisher.publish_once(), "nothing changed within the heartbeat"
    assert api.calls == ["read", "get-fault-config", "create"], "at rest: no call at all"
    state.update(
        NodeChips("Ascend910", "module910x8", tuple(Chip(i, i, healthy=i < 6) for i in range(8)))
    )
    assert publisher.publish_once(), "a health change is written at once"
    clock.now += 60
    assert publisher.publish_once(), "the heartbeat, changed or not"
    assert publisher.writes == 3
    assert api.calls == ["read", "get-fault-config", "create", "update", "update"], (
        "no read before a write"
    )


def test_a_write_that_lost_a_race_reads_the_configmap_and_keeps_the_admins_keys() -> None:
    api = CountingCalls()
    publisher, _, state, _ = setup(api)
    assert publisher.publish_once()
    # An admin separates chip 3 meanwhile (the agent's copy is now stale).
    current = api.get_configmap(*CM)
    current["data"]["ManuallySeparateNPU"] = "Ascend910-3"
    api.update_configmap(current)
    state.update(
        NodeChips("Ascend910", "module910x8", tuple(Chip(i, i, healthy=i < 6) for i in range(8)))
    )
    api.calls.clear()
    assert publisher.publish_once()
    assert api.calls == ["update", "read", "update"], "the conflict is read and decided again"
    assert api.get_configmap(*CM)["data"]["ManuallySeparateNPU"] == "Ascend910-3"
    assert 3 not in free_chips(api)


class HuaweisRole(CountingCalls):
    """Huawei's device-plugin ClusterRole: ConfigMaps get, create and update, no patch."""

    def read_configmap_by_patch(self, namespace: str, name: str) -> Obj:
        self.calls.append("read")
        raise Forbidden(f"configmaps {name!r} is forbidden: cannot patch resource")


def test_under_huaweis_role_it_reads_its_deviceinfo_with_a_get_and_keeps_the_admins_keys() -> None:
    """Started by Huawei's own DaemonSet (docs/compatibility.md#switching-from-mindcluster):
    the patch its own Role allows is refused, the get Huawei's grants reads it."""
    api = HuaweisRole()
    api.create_configmap(
        {
            "metadata": {"name": CM[1], "namespace": CM[0]},
            "data": {"ManuallySeparateNPU": "Ascend910-3"},
        }
    )
    publisher, _, _, _ = setup(api)
    api.calls.clear()  # the admin's create above
    assert publisher.publish_once()
    assert api.calls[:3] == ["read", "get", "get-fault-config"]
    assert api.get_configmap(*CM)["data"]["ManuallySeparateNPU"] == "Ascend910-3"
    assert 3 not in free_chips(api)


def test_manually_separated_chips_stay_out_of_the_free_list_and_other_keys_are_kept() -> None:
    api = MemoryCluster()
    api.create_configmap(
        {
            "metadata": {"namespace": CM[0], "name": CM[1]},
            "data": {"ManuallySeparateNPU": "Ascend910-3", "SomethingElse": "kept"},
        }
    )
    publisher, *_ = setup(api)
    publisher.publish_once()
    data = api.get_configmap(*CM)["data"]
    assert 3 not in free_chips(api)
    assert data["ManuallySeparateNPU"] == "Ascend910-3"
    assert data["SomethingElse"] == "kept"


def test_nothing_is_written_while_the_pods_are_unknown() -> None:
    api = MemoryCluster()
    cache = PodCache(api, "n1")  # never synced
    publisher = DeviceInfoPublisher(api, "n1", state=DeviceState(NODE), cache=cache, period=5)
    assert not publisher.publish_once()
    assert api.list_pods("n1") == ([], "0")


class FailsOnce(MemoryCluster):
    """An API adapter whose first list fails with a bug, not an API error."""

    def __init__(self) -> None:
        super().__init__()
        self.failures = 1

    def list_page(self, what: Selection, limit: int, token: str = "") -> Page:
        if self.failures:
            self.failures -= 1
            raise RuntimeError("a bug in the adapter")
        return super().list_page(what, limit, token)


def test_the_pod_cache_survives_an_unexpected_failure_and_counts_it() -> None:
    errors: list[str] = []
    cache = PodCache(FailsOnce(), "n1", on_loop_error=errors.append)
    cache.start()
    try:
        assert wait_for(lambda: cache.synced), "the loop lists again after the failure"
        assert errors == ["pod-cache"]
    finally:
        cache.stop()
