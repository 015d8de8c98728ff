"""Events on pods: timestamps, a count, the reporting controller, and repeats aggregated."""

from __future__ import annotations

from infra.events import MAX_MESSAGE, EventRecorder, pod_ref
from simulation.memory import MemoryCluster


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


POD = pod_ref("team", "train-0", "uid-1")


def test_repeats_within_the_window_are_counted_and_the_next_event_carries_the_count() -> None:
    api, clock = MemoryCluster(), Clock()
    events = EventRecorder(api, "ascend-npu-scheduler", "replica-a", clock, window=600)
    for _ in range(50):  # a filter loop meeting the same condition
        events.normal(POD, "NPUGangWaiting", "gang team/train: 1 of 2 pods exist")
        clock.now += 1
    events.flush()
    (first,) = api.events
    assert (first["count"], first["type"], first["reason"]) == (1, "Normal", "NPUGangWaiting")
    assert first["reportingComponent"] == "ascend-npu-scheduler"
    assert first["reportingInstance"] == "replica-a"
    assert first["involvedObject"] == {
        "kind": "Pod",
        "namespace": "team",
        "name": "train-0",
        "uid": "uid-1",
    }
    clock.now += 600
    events.normal(POD, "NPUGangWaiting", "gang team/train: 1 of 2 pods exist")
    events.flush()
    second = api.events[-1]
    assert second["count"] == 51
    assert second["firstTimestamp"] == "2023-11-14T22:13:20Z"
    assert second["lastTimestamp"] == "2023-11-14T22:24:10Z"  # 650 s later


def test_another_reason_or_message_is_another_event_and_long_messages_are_cut() -> None:
    api = MemoryCluster()
    events = EventRecorder(api, "ascend-npu-agent", "node-a")
    events.warn(POD, "NPUChipsRefused", "Ascend910-3 is held by team/other")
    events.warn(POD, "NPUChipsRefused", "Ascend910-4 is held by team/other")
    events.warn(POD, "NPUBindRefused", "x" * 5000)
    events.flush()
    assert [e["reason"] for e in api.events] == ["NPUChipsRefused"] * 2 + ["NPUBindRefused"]
    assert len(api.events[-1]["message"]) == MAX_MESSAGE
