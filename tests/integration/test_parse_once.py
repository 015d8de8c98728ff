"""A pod's annotations are parsed once, when its view is made: a pod change in the scheduler
builds one view and nothing parses after it; an Allocate decides on the cached views and
parses nothing but the consumed pod's new version, once, as it arrives."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from agent.allocation.handshake import ChipHandshake
from agent.pod_cache import PodCache
from chip_drivers.chips import Chip, NodeChips
from contract.chip_names import parse_chip_list
from contract.pods import PodView
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.verbs.extender import Extender
from simulation.memory import MemoryCluster, pod_object
from tests.integration.test_extender import add_node

EIGHT = ",".join(f"Ascend910-{c}" for c in range(8))


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Views built and chip lists parsed, counted."""
    counted: Counter[str] = Counter()
    made = PodView.__post_init__

    def view(self: PodView, source: Any, env_rank: Any) -> None:
        counted["views"] += 1
        made(self, source, env_rank)

    def chip_list(*args: Any, **kwargs: Any) -> tuple[int, ...]:
        counted["chip lists"] += 1
        return parse_chip_list(*args, **kwargs)

    monkeypatch.setattr(PodView, "__post_init__", view)
    monkeypatch.setattr("contract.pods.parse_chip_list", chip_list)
    yield counted


def test_a_pod_change_of_a_gang_is_parsed_once_where_it_arrives(parses: Counter[str]) -> None:
    api = MemoryCluster()
    for i in range(4):
        add_node(api, f"n{i}")
    service = SchedulerService(api, Extender(api))
    for rank in range(4):
        notes = {
            "huawei.com/Ascend910": EIGHT,
            "huawei.com/AscendReal": EIGHT,
            "predicate-time": "18446744073709551615",
            "ascend.npu/gang-size": "4",
            "hccl/rankIndex": str(rank),
        }
        api.put(
            "Pod",
            pod_object(
                "ns", f"g-{rank}", f"n{rank}", 8, annotations=notes, labels={"ascend.npu/gang": "g"}
            ),
        )
    service.refresh()
    changed = api.get_pod("ns", "g-1")
    changed["metadata"]["annotations"]["note"] = "a user's own"
    changed["metadata"]["resourceVersion"] = "999999"
    parses.clear()
    service.informers.pods.apply(changed)
    # Before: 20 parses for this change (12 chip lists, 8 ranks), the gang's members re-read.
    assert parses == Counter({"views": 1, "chip lists": 2})


def test_an_allocate_decides_on_parsed_views(parses: Counter[str]) -> None:
    api = MemoryCluster()
    node = NodeChips("Ascend910", "module910x8", tuple(Chip(i, i) for i in range(8)))
    for i, chips in enumerate(((0, 1), (2, 3), (4, 5))):
        names = ",".join(f"Ascend910-{c}" for c in chips)
        notes = {
            "huawei.com/Ascend910": names,
            "huawei.com/AscendReal": names,
            "predicate-time": "18446744073709551615",
        }
        api.put("Pod", pod_object("ns", f"r{i}", "node-1", 2, annotations=notes, phase="Running"))
    claim = {"huawei.com/Ascend910": "Ascend910-6,Ascend910-7", "predicate-time": "5"}
    api.put("Pod", pod_object("ns", "new", "node-1", 2, annotations=claim))
    cache = PodCache(api, "node-1")
    cache.resync()
    handshake = ChipHandshake(api, cache, lambda: "", wait_for_pod=0)
    parses.clear()
    given = handshake.give_chips([node.chips[0], node.chips[1]], node)
    assert [c.id for c in given] == [6, 7]
    # Before: 7 parses in the decision (6 chip lists, a predicate-time). Now the only view
    # built is the consumed pod's new version, as the cache takes it.
    assert parses == Counter({"views": 1, "chip lists": 2})
