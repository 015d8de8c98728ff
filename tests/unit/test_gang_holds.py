"""Gang holds within quota (issue 38, audit finding 2): the pure decision (``plan_holds``,
``backoff_after``), the session's part of it (``fitting``, ``crowded``) and the hold's life in
``Gangs``: only a gang whose PodGroup states its size holds, only for its members whose pods
exist, each held node charged as a whole server against its namespace's share and against
all namespaces' together, and a namespace whose holds end unused backs off."""

from __future__ import annotations

from collections.abc import Iterable

from contract.node_affinity import EVERYWHERE, PodConstraints
from scheduler_core.engine import locality
from scheduler_core.engine.model import Job, Task
from scheduler_core.engine.session import Session
from scheduler_core.service.state.gang_pods import GangPods
from scheduler_core.service.state.gangs import Gangs, NotReserved, Reservation
from scheduler_core.service.state.holds import (
    BACKOFF_DOUBLINGS,
    Backoff,
    Hold,
    WaitingGang,
    backoff_after,
    plan_holds,
)
from scheduler_core.service.wire import PodRequest
from tests.unit.helpers import node

PRODUCT = "module910x8"
FULL = range(8)


def waiting(
    since: float = 0.0,
    namespace: str = "a",
    npu: int = 8,
    missing: int = 2,
    *,
    stated: bool = True,
    pending: int | None = None,
) -> WaitingGang:
    """A waiting gang; its ``missing`` members' pods all exist unless ``pending`` says how
    many do."""
    exist = missing if pending is None else pending
    return WaitingGang(since, namespace, PRODUCT, npu, missing, stated, pending=exist)


def plan(
    gangs: dict[str, WaitingGang],
    nodes: Iterable[str] = ("n0", "n1", "n2", "n3"),
    *,
    now: float = 10.0,
    budget: int = 1000,
    total: int | None = None,
    backoff: dict[str, Backoff] | None = None,
    taken: Iterable[str] = (),
) -> dict[str, str]:
    """plan_holds over one shared order of ``nodes`` (node → gang); all namespaces together
    within ``total`` (default: unbounded)."""
    order = iter(list(nodes))
    held = plan_holds(
        gangs,
        now=now,
        hold_limit=100,
        budget=budget,
        total=10**9 if total is None else total,
        backoff=backoff or {},
        candidates=lambda gang, wait: order,
        taken=frozenset(taken),
    )
    return {n: gang for gang, nodes in held.items() for n in nodes}


def test_a_size_only_its_pods_claim_holds_nothing() -> None:
    claimed = {f"t/g{i}": waiting(namespace="t", npu=1, stated=False) for i in range(3)}
    assert plan(claimed) == {}


def test_a_stated_gang_holds_one_node_per_missing_member_oldest_first() -> None:
    gangs = {"a/new": waiting(since=5, missing=2), "a/old": waiting(since=1, missing=1)}
    assert plan(gangs) == {"n0": "a/old", "n1": "a/new", "n2": "a/new"}


def test_fault_nodes_are_not_held_again_nor_past_the_hold_limit() -> None:
    assert plan({"a/g": waiting(missing=2)}, taken=["n0"]) == {"n1": "a/g", "n2": "a/g"}
    assert plan({"a/g": waiting(since=0)}, now=101) == {}


def test_a_namespace_holds_at_most_its_budget_and_another_namespace_its_own() -> None:
    gangs = {
        "a/first": waiting(since=1, missing=3),  # 24 chips asked, 16 allowed
        "a/second": waiting(since=2, missing=1),  # nothing left for it
        "b/other": waiting(since=3, namespace="b", missing=1),
    }
    assert plan(gangs, budget=16) == {"n0": "a/first", "n1": "a/first", "n2": "b/other"}
    assert plan(gangs, budget=7) == {}, "not even one member's 8 chips fit in 7"


SERVERS = [f"n{i}" for i in range(8)]  # 8 servers of 8 chips: 64 chips
SHARE = 0.25


def whole_for_eight_chips(held: dict[str, str]) -> list[str]:
    """The servers where another tenant's 8-chip pod passes: those nothing is held on."""
    return [n for n in SERVERS if n not in held]


def test_the_finding_a_podgroup_of_1000_with_one_one_chip_pod_holds_one_server() -> None:
    # A PodGroup of minMember 1000 and one 1-chip pod: 999 members not created. Before, its
    # budget (16 of 64 chips) became a 1-chip hold on each of the 8 servers.
    huge = {"t/huge": waiting(namespace="t", npu=1, missing=1000, pending=1)}
    held = plan(huge, SERVERS, budget=int(64 * SHARE), total=int(64 * SHARE))
    assert held == {"n0": "t/huge"}, "only the member that exists is held for"
    assert len(whole_for_eight_chips(held)) == 7


def test_one_chip_members_that_exist_hold_at_most_the_share_of_whole_servers() -> None:
    # Even with 1000 pods created (each charged by its ResourceQuota), each held server costs
    # its 8 chips: 16 chips are 2 servers, and 6 of 8 (1 - share) stay whole for others.
    many = {"t/many": waiting(namespace="t", npu=1, missing=1000)}
    held = plan(many, SERVERS, budget=int(64 * SHARE), total=int(64 * SHARE))
    assert sorted(held) == ["n0", "n1"]
    assert len(whole_for_eight_chips(held)) >= (1 - SHARE) * len(SERVERS)


def test_a_tenants_namespaces_together_hold_at_most_the_total() -> None:
    # One tenant's PodGroups in 8 namespaces, 1000 1-chip pods each: each namespace within its
    # own share, and all of them together within the total (the same share by default).
    spread = {
        f"t{i}/many": waiting(since=i, namespace=f"t{i}", npu=1, missing=1000) for i in range(8)
    }
    held = plan(spread, SERVERS, budget=int(64 * SHARE), total=int(64 * SHARE))
    assert held == {"n0": "t0/many", "n1": "t0/many"}, "the oldest first, the rest nothing"
    assert len(whole_for_eight_chips(held)) >= (1 - SHARE) * len(SERVERS)
    # A total larger than one namespace's share: two namespaces hold their share each.
    held = plan(spread, SERVERS, budget=16, total=32)
    assert sorted(held.values()) == ["t0/many"] * 2 + ["t1/many"] * 2


def test_a_member_whose_pod_does_not_exist_holds_nothing() -> None:
    declared = {"a/g": waiting(missing=3, pending=0), "a/h": waiting(since=1, missing=3, pending=2)}
    assert plan(declared) == {"n0": "a/h", "n1": "a/h"}


def test_a_namespace_backing_off_holds_nothing_until_its_backoff_ends() -> None:
    gangs = {"a/g": waiting(missing=1), "b/g": waiting(namespace="b", missing=1)}
    backoff = {"a": Backoff(1, until=50)}
    assert plan(gangs, backoff=backoff, now=10) == {"n0": "b/g"}
    assert plan(gangs, backoff=backoff, now=50) == {"n0": "a/g", "n1": "b/g"}


def test_the_backoff_doubles_with_each_unused_end_up_to_a_cap() -> None:
    first = backoff_after(None, now=0, hold_limit=100)
    assert first == Backoff(1, 100)
    second = backoff_after(first, now=1000, hold_limit=100)
    assert second == Backoff(2, 1200)
    backoff = second
    for _ in range(10):
        backoff = backoff_after(backoff, now=0, hold_limit=100)
    assert backoff.until == 100 * 2**BACKOFF_DOUBLINGS


def test_fitting_nodes_are_those_a_member_fits_the_policys_best_first() -> None:
    session = Session([node("whole", FULL), node("half", range(4)), node("one", [0])])
    assert list(session.fitting(PRODUCT, 8)) == ["whole"]
    assert list(session.fitting(PRODUCT, 4)) == ["half", "whole"], "best fit first"
    assert session.chips == 24


def leaves_room(session: Session, name: str, job: Job, req: int, keep: int) -> bool:
    """Whether ``job``'s ``req`` chips on ``name`` leave room for a held member of ``keep``."""
    return session.crowded([name], job, req, PRODUCT, keep) == []


def test_a_one_pod_job_passes_a_held_node_only_if_the_held_member_still_fits() -> None:
    session = Session([node("n", FULL)])
    one, four, eight = (Job(f"p{k}", PRODUCT, (Task(f"p{k}", k),), "ns") for k in (1, 4, 8))
    assert leaves_room(session, "n", one, 1, 4), "1 chip of 8 leaves a free ring"
    assert leaves_room(session, "n", four, 4, 4)
    assert not leaves_room(session, "n", eight, 8, 1)
    assert not leaves_room(session, "n", one, 1, 8), "a member of 8 needs the node"


def request(
    gang: str,
    npu: int,
    size: int,
    *,
    stated: bool,
    namespace: str = "ns",
    constraints: PodConstraints = EVERYWHERE,
) -> PodRequest:
    return PodRequest(
        namespace,
        f"{gang}-0",
        f"uid-{gang}",
        npu,
        PRODUCT,
        gang,
        size,
        gang_stated=stated,
        constraints=constraints,
    )


def wait_for_rest(
    gangs: Gangs, session: Session, req: PodRequest, now: float, pods: int = 1
) -> Reservation | NotReserved:
    """``pods`` members of the gang exist (unbound); one tries to reserve (and waits)."""
    names = [req.name] + [f"{req.gang}-{i}" for i in range(1, pods)]
    return gangs.reserve(
        req,
        session=session,
        network=locality.Network(),
        settings=locality.Settings(),
        pods=GangPods(pending={req.gang_key: names}),
        fault=None,
        excluded=(),
        now=now,
    )


def test_the_attack_three_one_chip_pods_claiming_gangs_of_two_hold_nothing() -> None:
    gangs = Gangs(ttl=60, hold_limit=600, hold_share=1)
    session = Session([node(f"n{i}", FULL) for i in range(3)])
    for i in range(3):
        answer = wait_for_rest(gangs, session, request(f"g{i}", 1, 2, stated=False), now=0)
        assert isinstance(answer, NotReserved)
    assert gangs.held_nodes(session, {}, now=1) == {}


def test_a_podgroup_gang_of_one_chip_members_holds_a_chip_per_member_not_whole_nodes() -> None:
    gangs = Gangs(ttl=60, hold_limit=600, hold_share=1)
    session = Session([node(f"n{i}", FULL) for i in range(3)])
    wait_for_rest(gangs, session, request("g", 1, 3, stated=True), now=0, pods=2)
    held = gangs.held_nodes(session, {}, now=1)
    assert sorted(held) == ["n0", "n1"] and {h.npu for h in held.values()} == {1}
    eight = Job("p", PRODUCT, (Task("p", 8),), "other")
    assert not leaves_room(session, "n0", eight, 8, 1), "the member's chip is kept"
    four = Job("p", PRODUCT, (Task("p", 4),), "other")
    assert leaves_room(session, "n0", four, 4, 1), "the rest of the node is not"


def test_a_gang_holds_only_nodes_its_pods_may_go_to() -> None:
    # Its pods select pool b (n2, n3): a hold on n0 or n1, the policy's first, would keep chips
    # from one-pod jobs and serve nobody.
    gangs = Gangs(ttl=60, hold_limit=600, hold_share=1)
    session = Session([node(f"n{i}", FULL) for i in range(4)])
    pool_b = PodConstraints(selector=(("pool", "b"),))
    req = request("g", 8, 3, stated=True, constraints=pool_b)
    wait_for_rest(gangs, session, req, now=0, pods=2)
    assert sorted(gangs.held_nodes(session, {}, now=1)) == ["n0", "n1"], "unconstrained"

    def ruled_out(constraints: PodConstraints) -> frozenset[str]:
        return frozenset({"n0", "n1"}) if constraints == pool_b else frozenset()

    assert sorted(gangs.held_nodes(session, {}, now=1, ruled_out=ruled_out)) == ["n2", "n3"]


def test_a_hold_that_ends_unused_backs_its_namespace_off_until_a_gang_completes() -> None:
    gangs = Gangs(ttl=60, hold_limit=100, hold_share=1)
    session = Session([node(f"n{i}", FULL) for i in range(4)])
    first = request("g1", 8, 3, stated=True)
    wait_for_rest(gangs, session, first, now=0, pods=2)
    assert len(gangs.held_nodes(session, {}, now=1)) == 2
    gangs.expire(session, {first.gang_key: ["g1-0"]}, now=101, partial=())  # limit passed
    # Re-created under a new name (2 of its 3 pods again), it waits again: its namespace
    # holds nothing for 100 s.
    again = request("g2", 8, 3, stated=True)
    gangs.expire(session, {}, now=102, partial=())
    wait_for_rest(gangs, session, again, now=102, pods=2)
    assert gangs.held_nodes(session, {}, now=103) == {}
    other = request("o", 8, 3, stated=True, namespace="other")
    wait_for_rest(gangs, session, other, now=103, pods=2)
    assert set(gangs.held_nodes(session, {}, now=104).values()) == {
        Hold("held for gang other/o (8 chips), waiting since 1 s", 8, PRODUCT)
    }, "another namespace holds as before"
    # The backoff ends at 201: g2 holds.
    assert len(held_by(gangs, session, "ns", now=201)) == 2
    # g2 goes while holding: the second unused end doubles the backoff (until 403).
    gangs.expire(session, {other.gang_key: ["o-0"]}, now=203, partial=())
    wait_for_rest(gangs, session, request("g3", 8, 3, stated=True), now=350, pods=2)
    assert held_by(gangs, session, "ns", now=402) == []
    assert len(held_by(gangs, session, "ns", now=403)) == 2


def held_by(gangs: Gangs, session: Session, namespace: str, now: float) -> list[Hold]:
    return [
        h
        for h in gangs.held_nodes(session, {}, now=now).values()
        if h.why.startswith(f"held for gang {namespace}/")
    ]


def test_a_gang_that_completes_resets_its_namespaces_backoff() -> None:
    gangs = Gangs(ttl=60, hold_limit=100, hold_share=1)
    session = Session([node(f"n{i}", FULL) for i in range(4)])
    held = request("g1", 8, 3, stated=True)
    wait_for_rest(gangs, session, held, now=0, pods=2)
    gangs.held_nodes(session, {}, now=1)
    gangs.expire(session, {}, now=2, partial=())  # gone while holding: backs off
    # A whole gang of the namespace is reserved and binds: the backoff ends.
    whole = request("w", 8, 2, stated=True)
    reservation = gangs.reserve(
        whole,
        session=session,
        network=locality.Network(),
        settings=locality.Settings(),
        pods=GangPods(pending={whole.gang_key: ["w-0", "w-1"]}),
        fault=None,
        excluded=(),
        now=3,
    )
    assert isinstance(reservation, Reservation)
    for rank, placement in reservation.placements.items():
        member = PodRequest("ns", f"w-{rank}", f"u{rank}", 8, PRODUCT, "w", 2, rank=rank)
        gangs.take_rank(member, placement.node)
    later = request("g4", 8, 3, stated=True)
    wait_for_rest(gangs, session, later, now=4, pods=2)
    assert len(gangs.held_nodes(session, {}, now=5)) == 2
