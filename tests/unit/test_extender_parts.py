"""The extender's parts on their own: assumed binds, gang hold-back, fault restarts, the
ToRs under spanning jobs."""

from __future__ import annotations

import dataclasses

from contract import tor_topology
from contract.pods import PodView
from scheduler_core.engine import locality
from scheduler_core.engine.model import Placement
from scheduler_core.engine.rescheduling import FORCE, JobPod, restore
from scheduler_core.engine.session import Session
from scheduler_core.service.state.assumed import Assumed, AssumedBinds
from scheduler_core.service.state.fault_restarts import FaultRestarts
from scheduler_core.service.state.gang_pods import BoundMember, GangPods
from scheduler_core.service.state.gangs import Gangs, NotReserved, Reservation
from scheduler_core.service.state.holds import Hold
from scheduler_core.service.state.tor_state import TorState
from scheduler_core.service.wire import PodRequest
from simulation.cluster import tor_configmap
from tests.unit.helpers import node

FULL = range(8)


BIND = Assumed("uid", "n", (0, 1), since=0, job="default/ns/p", task="p")


def test_an_assumed_bind_stays_until_the_view_shows_its_pod_holding_its_chips() -> None:
    assumed = AssumedBinds(ttl=60)
    assumed.add("ns/p", BIND)
    still_pending = PodView("ns", "p", "uid", npu_limit=2)
    assert assumed.settled("ns/p", still_pending) is None
    bound = dataclasses.replace(
        still_pending, node="n", annotations={"huawei.com/Ascend910": "Ascend910-0,Ascend910-1"}
    )
    assert assumed.settled("ns/p", bound) == BIND
    assert assumed.given("ns/p") is None


def test_an_assumed_bind_ends_with_its_pod_or_its_ttl() -> None:
    assumed = AssumedBinds(ttl=60)
    assumed.add("ns/p", BIND)
    assert assumed.settled("ns/p", PodView("ns", "p", "another-uid")) == BIND, "a new pod"
    assumed.add("ns/p", BIND)
    assert assumed.expired(now=59) == []
    assert assumed.expired(now=61) == [BIND]


def gang_request(gang: str, size: int) -> PodRequest:
    """A member of a gang whose PodGroup states its size."""
    return PodRequest("ns", f"{gang}-0", "uid", 8, "module910x8", gang, size, gang_stated=True)


def test_the_member_asked_about_counts_before_the_watch_shows_it() -> None:
    """The call read the pod; a watch that lags must not make it a missing member (seen in
    tests/real/test_pod_rescheduling.py: a resubmitted rank refused as "3 of 4 pods exist",
    then left for kube-scheduler's 5-minute flush)."""
    session = Session([node(n, FULL) for n in "abc"])
    request = gang_request("job", 3)
    answers = [
        Gangs(ttl=60, hold_limit=100, hold_share=1).reserve(
            request,
            session=session,
            network=locality.Network(),
            settings=locality.Settings(),
            pods=GangPods(pending={"ns/job": names}),
            fault=None,
            excluded=(),
            now=0.0,
        )
        for names in (["job-1", "job-2"], [request.name, "job-1"])
    ]
    assert not isinstance(answers[0], NotReserved), "its two mates and itself: all 3 exist"
    assert answers[1] == NotReserved("gang ns/job: 2 of 3 pods exist; waiting for the rest")


def test_a_waiting_gang_holds_a_node_for_each_member_that_exists_oldest_first() -> None:
    gangs = Gangs(ttl=60, hold_limit=100, hold_share=1)
    nodes = [node(n, FULL) for n in "abcd"] + [node("e", [0])]
    session = Session(nodes)
    for gang, size, now in (("ns/old", 3, 0.0), ("ns/new", 3, 5.0)):
        request = gang_request(gang.split("/")[1], size)
        pods = GangPods(pending={gang: [request.name, "two"]})  # 2 of its 3 pods exist
        answer = gangs.reserve(
            request,
            session=session,
            network=locality.Network(),
            settings=locality.Settings(),
            pods=pods,
            fault=None,
            excluded=(),
            now=now,
        )
        assert answer == NotReserved(f"gang {gang}: 2 of 3 pods exist; waiting for the rest")
    held = gangs.held_nodes(session, {}, now=10)
    old = Hold("held for gang ns/old (8 chips), waiting since 10 s", 8, "module910x8")
    new = Hold("held for gang ns/new (8 chips), waiting since 5 s", 8, "module910x8")
    assert held == {"a": old, "b": old, "c": new, "d": new}, "2 pods each; e has no room"
    assert gangs.held_nodes(session, {}, now=200) == {}, "past the hold limit"


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
    assert faults.get("ns/j") is None and faults.holds(now=50) == {}


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


def test_the_tors_under_a_job_that_spans_several_are_known_bound_or_reserved() -> None:
    # Four ToRs of two servers: node-i has InternalIP 192.168.0.<i+1>.
    topology = tor_topology.parse_topology(tor_configmap(nodes=8, per_tor=2)["data"]["tor_info"])
    addresses = {f"node-{i:02d}": f"192.168.0.{i + 1}" for i in range(8)}
    bound = GangPods(
        bound={
            "ns/wide": [BoundMember("node-00", {}, False), BoundMember("node-02", {}, False)],
            "ns/narrow": [BoundMember("node-04", {}, False)],  # ToR 2 alone
        }
    )
    reserved = Reservation(
        {0: Placement("r-0", "node-06", (0,)), 1: Placement("r-1", "node-07", (0,))},
        expires=60,
        notes={0: {}, 1: {}},
    )
    state = TorState(locality.Settings())
    state.addresses.update(addresses)
    state.set_topology(topology)
    assert state.view(bound, {}).multi_job_tors == frozenset({0, 1})
    state.stale = True  # as a reservation's expiry marks it
    network = state.view(bound, {"ns/r": reserved})
    assert network.multi_job_tors == frozenset({0, 1}), "one ToR: not a spanning job"
    spanning = Reservation(
        {0: Placement("s-0", "node-05", (0,)), 1: Placement("s-1", "node-07", (0,))},
        expires=60,
        notes={0: {}, 1: {}},
    )
    state.stale = True
    assert state.view(bound, {"ns/s": spanning}).multi_job_tors == frozenset({0, 1, 2, 3})
    assert state.tor_share_data() is None, "tor-share-cm is written under NSLB 2.0 only"
