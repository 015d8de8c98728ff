"""The fault pipeline through the publisher: what a link that goes down writes to the DeviceInfo
ConfigMap, and the Events on the agent's pod (Huawei's shipped faultCustomization.json:
81078603 counts after 20 s, recovers 60 s after it came back, 5 counted in 24 h →
ManuallySeparateNPU, released 48 h after the last recovery)."""

from __future__ import annotations

import json
from typing import Any

from agent.deviceinfo_publisher import DeviceInfoPublisher
from agent.faults.pipeline import RELEASE_REASON, FaultPipeline
from agent.pod_cache import PodCache
from chip_drivers.chips import Chip, Network, NodeChips
from chip_drivers.state import DeviceState
from contract.deviceinfo import REASON_KEY, SEPARATED_KEY, DeviceInfo, decode
from infra.events import EventRecorder, pod_ref
from simulation.cluster import wait_for
from simulation.memory import MemoryCluster

CM = ("kube-system", "mindx-dl-deviceinfo-n1")
POD = pod_ref("kube-system", "ascend-device-plugin-n1")
LINK_DOWN = "81078603"


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def node(link_down: bool) -> NodeChips:
    return NodeChips(
        "Ascend910",
        "module910x8",
        tuple(
            Chip(i, i, network=Network.DOWN if link_down and i == 3 else Network.UP)
            for i in range(8)
        ),
    )


class Agent:
    """The publisher as the agent builds it, with a fault pipeline recording Events."""

    def __init__(self) -> None:
        self.api = MemoryCluster()
        self.clock = Clock()
        cache = PodCache(self.api, "n1")
        cache.resync()
        self.state = DeviceState(node(False))
        events = EventRecorder(self.api, "ascend-device-plugin", "n1", clock=self.clock)
        faults = FaultPipeline(self.api, events=events, pod=POD, node="n1")
        self.publisher = DeviceInfoPublisher(
            self.api,
            "n1",
            state=self.state,
            cache=cache,
            period=1,
            heartbeat=60,
            faults=faults,
            clock=self.clock,
        )

    def run(self, seconds: int, *, link_down: bool) -> None:
        """The link as given for ``seconds``, the publisher looking every second."""
        self.state.update(node(link_down))
        for _ in range(seconds):
            self.publisher.publish_once()
            self.clock.now += 1

    def data(self) -> dict[str, str]:
        data: dict[str, str] = self.api.get_configmap(*CM)["data"]
        return data

    def info(self) -> DeviceInfo:
        return decode(self.data())

    def events(self, count: int) -> list[dict[str, Any]]:
        assert wait_for(lambda: len(self.api.events) >= count), self.api.events
        return list(self.api.events)


def test_a_10_s_link_down_writes_no_fault_that_evicts_and_one_event_each_way() -> None:
    agent = Agent()
    agent.run(1, link_down=False)
    agent.state.update(node(True))
    for _ in range(10):
        agent.publisher.publish_once()
        info = agent.info()
        assert info.network_unhealthy == frozenset(), "a link down under 20 s is not listed"
        assert 3 in info.free and info.unhealthy == frozenset()
        (fault,) = info.faults
        assert (fault.chip, fault.network, fault.level, fault.codes) == (
            3,
            True,
            "NotHandleFault",
            (LINK_DOWN,),
        )
        agent.clock.now += 1
    agent.run(70, link_down=False)
    info = agent.info()
    assert info.faults == () and info.network_unhealthy == frozenset()
    assert agent.data()[SEPARATED_KEY] == ""
    occur, recovery = agent.events(2)
    for event, reason, kind in ((occur, "Occur", "Warning"), (recovery, "Recovery", "Normal")):
        assert event["involvedObject"]["name"] == POD.name
        assert (event["reason"], event["type"], event["action"]) == (
            reason,
            kind,
            "NotHandleFault",  # the code's level in faultCode.json, as upstream's Event names
        )
        assert (
            "npu:Ascend910-3" in event["message"] and f"faultCodes:{LINK_DOWN}" in event["message"]
        )
    assert len(agent.api.events) == 2, "one Event per transition, never per poll"


def test_five_counted_link_downs_in_24_h_separate_the_chip_until_48_h_after_recovery() -> None:
    agent = Agent()
    for _ in range(4):
        agent.run(30, link_down=True)  # counted after 20 s
        agent.run(3600, link_down=False)
        assert agent.data()[SEPARATED_KEY] == ""
    agent.run(30, link_down=True)
    data = agent.data()
    assert data[SEPARATED_KEY] == "Ascend910-3"
    info = agent.info()
    assert 3 not in info.free
    ((chip, reasons),) = json.loads(data[REASON_KEY]).items()
    assert chip == "Ascend910-3"
    assert {(r["fault_code"], r["fault_level"], r["upgrade_type"]) for r in reasons} >= {
        (LINK_DOWN, "ManuallySeparateNPU", "FaultFrequency")
    }
    # Per link-down: Occur, Recovery, and the release of its FaultDuration reason 60 s after
    # the link came back (fault_code.go RemoveTimeoutReasonCache → a release Event); the
    # fifth is still down.
    reasons = [e["reason"] for e in agent.events(13)]
    assert reasons == ["Occur", "Recovery", RELEASE_REASON] * 4 + ["Occur"]
    assert all(e["involvedObject"]["name"] == POD.name for e in agent.api.events)
    # The link comes back: still separated until 48 h after its recovery, then released
    # with one Event naming the released reasons.
    agent.run(61, link_down=False)
    agent.clock.now += 48 * 3600 - 120
    agent.run(1, link_down=False)
    assert agent.data()[SEPARATED_KEY] == "Ascend910-3"
    agent.clock.now += 120
    agent.run(1, link_down=False)
    data = agent.data()
    assert data[SEPARATED_KEY] == "" and data[REASON_KEY] == "{}"
    assert 3 in agent.info().free
    release = agent.events(16)[-1]
    assert (release["reason"], release["action"], release["type"]) == (
        RELEASE_REASON,
        RELEASE_REASON,
        "Normal",
    )
    assert json.loads(release["message"])["Ascend910-3"][0]["fault_level"] == "ManuallySeparateNPU"
