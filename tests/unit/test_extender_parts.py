"""The extender's parts on their own: assumed binds, gang hold-back, fault restarts."""

from __future__ import annotations

from scheduler_core.engine import locality
from scheduler_core.engine.rescheduling import FORCE, JobPod, restore
from scheduler_core.engine.session import Session
from scheduler_core.service.assumed import AssumedBinds
from scheduler_core.service.fault_restarts import FaultRestarts
from scheduler_core.service.gangs import GangPods, Gangs, NotReserved
from scheduler_core.service.wire import PodRequest
from tests.unit.helpers import node

FULL = range(8)


def test_an_assumed_bind_is_held_in_each_new_view_until_the_view_shows_it() -> None:
    assumed = AssumedBinds(ttl=60)
    assumed.add("ns/p", "n", (0, 1), now=0)
    stale = Session([node("n", FULL)])  # listed before the bind landed
    assumed.hold_in(stale, now=1)
    assert stale.usable("n") == (2, 3, 4, 5, 6, 7)
    shown = Session([node("n", range(2, 8))])  # the pod holds chips 0 and 1 now
    assumed.hold_in(shown, now=2)
    assert shown.usable("n") == (2, 3, 4, 5, 6, 7)
    again = Session([node("n", FULL)])
    assumed.hold_in(again, now=3)
    assert again.usable("n") == tuple(FULL), "a bind the view showed is no longer assumed"


def test_an_assumed_bind_is_forgotten_after_its_ttl() -> None:
    assumed = AssumedBinds(ttl=60)
    assumed.add("ns/p", "n", (0,), now=0)
    session = Session([node("n", FULL)])
    assumed.hold_in(session, now=61)
    assert session.usable("n") == tuple(FULL)


def gang_request(gang: str, size: int) -> PodRequest:
    return PodRequest("ns", f"{gang}-0", "uid", 8, "module910x8", gang, size)


def test_a_waiting_gang_holds_as_many_whole_free_nodes_as_it_has_pods_oldest_first() -> None:
    gangs = Gangs(ttl=60, hold_limit=100)
    session = Session([node("a", FULL), node("b", FULL), node("c", FULL), node("d", [0])])
    for gang, now in (("ns/old", 0.0), ("ns/new", 5.0)):
        request = gang_request(gang.split("/")[1], 3)
        pods = GangPods(pending={gang: ["one", "two"]})  # 2 of its 3 pods exist
        answer = gangs.reserve(
            request,
            session=session,
            network=locality.Network(),
            settings=locality.Settings(),
            pods=pods,
            fault=None,
            held=(),
            now=now,
        )
        assert answer == NotReserved(f"gang {gang}: 2 of 3 pods exist; waiting for the rest")
    pending = {"ns/old": ["x", "y"], "ns/new": ["z"]}
    held = gangs.held_nodes(session, pending, {}, now=10)
    assert held == {
        "a": "held for gang ns/old, waiting since 10 s",
        "b": "held for gang ns/old, waiting since 10 s",
        "c": "held for gang ns/new, waiting since 5 s",
    }
    assert gangs.held_nodes(session, pending, {}, now=200) == {}, "past the hold limit"


def test_a_fault_job_holds_its_healthy_nodes_until_placed_or_the_hold_limit() -> None:
    faults = FaultRestarts(hold_limit=100, grace_over=900)
    pods = [JobPod("ns", f"j-{r}", f"u{r}", f"n{r}", r, (0,)) for r in range(3)]
    running = {"ns/j": (FORCE, pods)}
    deletions = faults.update(running, (), {"n2": frozenset({0})}, (), now=0)
    assert sorted(d.name for d in deletions) == ["j-0", "j-1", "j-2"]
    assert all(d.grace_seconds == 0 for d in deletions)
    assert faults.holds(now=50) == {"n0": "ns/j", "n1": "ns/j"}
    assert faults.holds(now=150) == {}
    faults.placed("ns/j")
    assert not faults and faults.holds(now=50) == {}


def test_a_fault_job_that_never_comes_back_is_forgotten_after_the_hold_limit() -> None:
    faults = FaultRestarts(hold_limit=100, grace_over=900)
    pods = [JobPod("ns", "j-0", "u0", "n0", 0, (0,))]
    faults.update({"ns/j": (FORCE, pods)}, (), {"n0": frozenset({0})}, (), now=0)
    faults.update({}, (), {}, (), now=50)
    assert faults.get("ns/j") is not None
    faults.update({}, (), {}, (), now=101)
    assert faults.get("ns/j") is None


def test_the_fault_record_round_trips_through_a_restart() -> None:
    faults = FaultRestarts(hold_limit=100, grace_over=900)
    pods = [JobPod("ns", f"j-{r}", f"u{r}", f"n{r}", r, (0,)) for r in range(2)]
    faults.update({"ns/j": (FORCE, pods)}, (), {"n1": frozenset({0})}, (), now=7)
    record, configs = faults.records()
    assert list(configs) == [("ns", "fault-config-j")]
    restarted = FaultRestarts(hold_limit=100, grace_over=900)
    restarted.restore(restore(record))
    assert restarted.holds(now=8) == {"n0": "ns/j"}
