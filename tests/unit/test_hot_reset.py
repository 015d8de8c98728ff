"""The hot reset's decisions (agent/hot_reset.py), from Ascend/mind-cluster
component/ascend-device-plugin pkg/server/hot_reset_manager_test.go and token_bucket_test.go
(cases named) and the rules of hot_reset_manager.go."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import hot_reset as hr
from agent.__main__ import _agent_config, build_parser, go_spellings
from chip_drivers.chips import Chip, NodeChips

RESTART = "RestartNPU"


def node(product: str | None, n: int, unhealthy: set[int], **extra: object) -> NodeChips:
    chips = tuple(Chip(i, i, healthy=i not in unhealthy) for i in range(n))
    resource = extra.pop("resource", "Ascend910")
    return NodeChips(str(resource), product, chips, **extra)  # type: ignore[arg-type]


def run(book: hr.Book, n: NodeChips, levels: dict[int, str], busy: set[int], now: float):  # type: ignore[no-untyped-def]
    return hr.decide(book, hr.Cycle(n, levels, frozenset(busy), now))


def test_only_modes_0_and_2_reset() -> None:  # TestUnifiedHotResetHotResetClose
    assert [m for m in (-1, 0, 1, 2) if hr.enabled(m)] == [0, 2]


def test_levels_reset_skipped_or_external() -> None:  # TestFilterFaultDevices(SeparateNPU)
    n = node("module910x8", 8, {0, 1, 2, 3, 4, 5})
    levels = {0: RESTART, 1: "NotHandleFault", 2: "PreSeparateNPU", 3: "SubHealthFault"}
    levels |= {4: "SeparateNPU", 5: "ManuallySeparateNPU"}
    assert hr.candidates(hr.Cycle(n, levels, frozenset(), 0)) == ((0,), (4, 5))
    # A healthy chip is never a candidate, whatever its level.
    healthy = node("module910x8", 8, set())
    assert hr.candidates(hr.Cycle(healthy, {0: RESTART}, frozenset(), 0)) == ((), ())


def test_a_code_of_a_reset_level_makes_a_chip_the_driver_calls_healthy_faulty() -> None:
    # Upstream's Health follows the codes' level (a RestartNPU code: Unhealthy) whatever the
    # driver's own health says; a level left over from before a reset, with no code any
    # more, does not (the chip came back).
    n = NodeChips("Ascend910", "module910x8", tuple(Chip(i, i) for i in range(8)))
    coded = NodeChips(
        "Ascend910",
        "module910x8",
        tuple(Chip(i, i, fault_codes=("80E18008",) if i == 2 else ()) for i in range(8)),
    )
    assert hr.candidates(hr.Cycle(coded, {2: RESTART}, frozenset(), 0)) == ((2,), ())
    assert hr.candidates(hr.Cycle(coded, {2: "NotHandleFault"}, frozenset(), 0)) == ((), ())
    assert hr.candidates(hr.Cycle(n, {2: RESTART}, frozenset(), 0)) == ((), ())
    book, _ = run(hr.Book(idle_since={2: 0.0}), n, {2: RESTART}, set(), 1.0)
    assert book.idle_since == {}, "back healthy: the idle time is forgotten"


def test_reset_groups_per_product() -> None:  # TestGetRingSize, TestGetHccsRingDevices
    assert hr.reset_group(node("module910x8", 8, set()), 1) == {0, 1, 2, 3}  # 910A: 4
    assert hr.reset_group(node("module910bx8", 8, set()), 5) == set(range(8))  # A2: 8
    assert hr.reset_group(node("module910bx16", 16, set()), 9) == set(range(16))  # 200T: 16
    # 910B infer board should return 1 (A300IA2BoardId 0x28; 800I A2 without HCCS 0x3c)
    assert hr.reset_group(node("module910bx8", 8, set(), board_id=0x28), 5) == {5}
    assert hr.reset_group(node("module910bx8", 8, set(), board_id=0x3C), 5) == {5}
    a3 = node("module910a3x16", 16, set(), die_size=2)
    assert hr.reset_group(a3, 7) == {6, 7}
    duo = node("chip310px2", 4, set(), resource="Ascend310P")
    assert hr.reset_group(duo, 3) == {2, 3}  # TestGetDuoCardDevices
    assert hr.reset_group(node("ascend310p", 4, set(), resource="Ascend310P"), 3) == {3}
    assert hr.reset_group(node(None, 8, set(), resource="npu"), 3) == {3}  # A5 ring: 1
    assert hr.reset_group(node("atlas850x8", 8, set()), 3) == {3}  # A5 chips named Ascend910
    assert hr.reset_group(node("card910x2", 8, set()), 5) == {4, 5, 6, 7}  # the 910 family's 4
    # A ring that cannot be named: the whole node is its group.
    assert hr.reset_group(node(None, 6, set()), 1) == set(range(6))


def test_a_ring_with_a_pod_or_a_process_is_not_reset() -> None:  # TestIsRingFreeWithPod
    n = node("module910x8", 8, {1})
    book, started = run(hr.Book(), n, {1: RESTART}, {3}, 0.0)
    book, started = run(book, n, {1: RESTART}, {3}, 100.0)
    assert started == ()
    assert 1 not in book.idle_since


def test_the_group_must_be_idle_60_s_in_a_row() -> None:
    n = node("module910x8", 8, {1})
    book, started = run(hr.Book(), n, {1: RESTART}, set(), 0.0)
    assert started == () and book.idle_since[1] == 0.0
    book, started = run(book, n, {1: RESTART}, set(), 59.0)
    assert started == ()
    book, started = run(book, n, {1: RESTART}, {2}, 59.5)  # busy again: starts over
    book, started = run(book, n, {1: RESTART}, set(), 70.0)
    assert started == ()
    book, started = run(book, n, {1: RESTART}, set(), 130.0)
    assert started == (hr.Reset(1, frozenset({0, 1, 2, 3})),)
    assert book.resetting == {0, 1, 2, 3} and book.tokens(1, 130.0) == 2


def test_one_reset_per_group_at_a_time() -> None:  # TestConfirmAndPrepareReset
    n = node("module910x8", 8, {1, 2})
    book, _ = run(hr.Book(), n, {1: RESTART, 2: RESTART}, set(), 0.0)
    book, started = run(book, n, {1: RESTART, 2: RESTART}, set(), 60.0)
    assert [r.fault for r in started] == [1]
    _, started = run(book, n, {1: RESTART, 2: RESTART}, set(), 120.0)
    assert started == ()


def test_token_bucket() -> None:  # token_bucket_test.go TestTokenBucket*
    bucket = hr.Bucket.new(0.0)
    assert bucket.tokens == hr.TOKENS == 3
    spent = hr.Bucket(0, 0.0)
    assert spent.refilled(hr.REFILL_SECONDS - 3600).tokens == 0  # before interval
    assert spent.refilled(hr.REFILL_SECONDS + 1).tokens == 3  # refill after interval


def test_the_fourth_fault_in_6_h_needs_external_ops() -> None:
    n = node("module910x8", 8, {1})
    book, now = hr.Book(), 0.0
    for _ in range(3):
        book, _ = run(book, n, {1: RESTART}, set(), now)
        book, started = run(book, n, {1: RESTART}, set(), now + 60)
        assert len(started) == 1
        book = hr.finished(book, started[0], True, now + 61, a3=False, delay=300)
        now += 3600
    book, _ = run(book, n, {1: RESTART}, set(), now)
    book, started = run(book, n, {1: RESTART}, set(), now + 60)
    assert started == () and book.manual == {1}
    # Healthy again: out of ResetInfo (checkDeviceRecovered / clearNeedExternalOps).
    book, _ = run(book, node("module910x8", 8, set()), {}, set(), now + 70)
    assert book.manual == frozenset()


def test_a_failed_reset_waits_for_a_third_party_on_an_a3() -> None:
    a3 = node("module910a3x16", 16, {4}, die_size=2)
    reset = hr.Reset(4, frozenset({4, 5}))
    book = hr.finished(hr.Book(resetting=reset.group), reset, False, 10.0, a3=True, delay=300)
    assert book.resetting == frozenset() and book.third_party == {4: 310.0}
    book, started = run(book, a3, {4: RESTART}, set(), 200.0)
    assert started == () and book.manual == frozenset()
    book, _ = run(book, a3, {4: RESTART}, set(), 311.0)  # execRescan: still faulty
    assert book.third_party == {} and book.manual == {4}
    other = hr.finished(
        hr.Book(resetting=frozenset({1})), hr.Reset(1, frozenset({1})), False, 0, a3=False, delay=1
    )
    assert other.manual == {1}


def test_reset_info_is_upstreams_json() -> None:  # TestMarkNeedExternalOps
    n = NodeChips("Ascend910", "module910x8", (Chip(10, 7, healthy=False, card=(0, 1)),))
    text = hr.reset_info(n, [], [10, 5])
    assert text == (
        '{"ThirdPartyResetDevs":[],"ManualResetDevs":['
        '{"CardId":-1,"DeviceId":-1,"AssociatedCardId":0,"PhyID":5,"LogicID":5},'
        '{"CardId":0,"DeviceId":1,"AssociatedCardId":0,"PhyID":10,"LogicID":7}]}'
    )
    assert hr.parse_reset_info(text) == (frozenset(), frozenset({5, 10}))
    assert hr.parse_reset_info('{"ThirdPartyResetDevs":null,"ManualResetDevs":null}') == (
        frozenset(),
        frozenset(),
    )
    assert json.loads(text)["ManualResetDevs"][1]["PhyID"] == 10


PRODUCTS = st.sampled_from(
    [
        ("module910x8", 8, 0),
        ("module910bx8", 8, 0),
        ("module910bx16", 16, 0),
        ("module910a3x16", 16, 2),
        (None, 8, 0),
    ]
)
LEVELS = st.sampled_from(
    [RESTART, "RestartRequest", "FreeRestartNPU", "SeparateNPU", "NotHandleFault"]
)


@settings(max_examples=300, deadline=None)
@given(
    PRODUCTS,
    st.lists(
        st.tuples(
            st.frozensets(st.integers(0, 15)),
            st.frozensets(st.integers(0, 15)),
            st.dictionaries(st.integers(0, 15), LEVELS),
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_a_reset_never_touches_a_busy_chip(product, rounds) -> None:  # type: ignore[no-untyped-def]
    name, n, die = product
    book, now = hr.Book(), 0.0
    for unhealthy, busy, levels in rounds:
        chips = node(name, n, {c for c in unhealthy if c < n}, die_size=die)
        book, started = run(book, chips, levels, set(busy), now)
        for reset in started:
            assert not reset.group & busy
            assert reset.fault in reset.group
        now += 61.0


@pytest.mark.parametrize(("mode", "on"), [("-1", False), ("0", True), ("2", True)])
def test_the_flags_reach_the_agents_configuration(mode: str, on: bool) -> None:
    # -hotReset 0 and 2 both turn the reset on (upstream's unified reset), -1 off;
    # -thirdPartyScanDelay is the seconds a third party has after a failed A3 reset.
    parser = build_parser()
    options = {o for a in parser.commands["serve"]._actions for o in a.option_strings}
    argv = ["--kube=off", f"-hotReset={mode}", "-thirdPartyScanDelay=30"]
    config = _agent_config(parser.parse_args(["serve", *go_spellings(argv, options)]))
    assert (config.hot_reset, config.third_party_scan_delay) == (on, 30.0)
