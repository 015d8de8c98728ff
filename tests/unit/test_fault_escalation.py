"""The fault pipeline: Huawei's table and customization, escalation, the override keys."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agent.faults.escalation import FaultMachine, Observation, parse_reasons
from agent.faults.pipeline import FaultPipeline
from agent.faults.table import (
    BadConfig,
    default_config,
    parse_customization,
    parse_table,
)
from chip_drivers.chips import Chip, Network, NodeChips
from contract.chip_names import ASCEND910
from contract.fault_levels import LEVELS
from simulation.memory import MemoryCluster

DATA = Path(__file__).parents[2] / "agent" / "faults" / "data"
T0 = 1_700_000_000_000  # ms
S = 1000
DAY = 86400 * S


def node(
    *,
    down: frozenset[int] = frozenset(),
    codes: dict[int, tuple[str, ...]] | None = None,
    sick: frozenset[int] = frozenset(),
) -> NodeChips:
    codes = codes or {}
    chips = tuple(
        Chip(
            i,
            i,
            healthy=i not in sick,
            network=Network.DOWN if i in down else Network.UP,
            fault_codes=codes.get(i, ()),
        )
        for i in range(8)
    )
    return NodeChips("Ascend910", "module910x8", chips)


def test_the_shipped_table_has_upstreams_counts_and_levels() -> None:
    # Counts per list in Ascend/mind-cluster component/ascend-device-plugin/build/faultCode.json
    # at 22bb3d98 (the reference's §1d): the vendored copy is that file.
    raw = json.loads((DATA / "faultCode.json").read_text())
    assert {k: len(v) for k, v in raw.items()} == {
        "NotHandleFaultCodes": 132,
        "RestartRequestCodes": 33,
        "RestartBusinessCodes": 26,
        "FreeRestartNPUCodes": 23,
        "RestartNPUCodes": 162,
        "SeparateNPUCodes": 215,
        "PreSeparateNPUCodes": 200,
        "SubHealthFaultCodes": 13,
    }
    table = default_config().table
    assert table.chip_level(["80E18402"]) == "SeparateNPU"
    assert table.chip_level(["80C98008"]) == "RestartRequest"
    assert table.chip_level(["80C98008", "80E18402"]) == "SeparateNPU"  # the severest
    assert table.chip_level(["DEADBEEF"]) == "SeparateNPU"  # unknown: getFaultTypeBySeverity
    assert table.chip_level(["DEADBEEF", "80C98008"]) == "RestartRequest"  # a known one rules
    assert table.chip_level([]) == "NormalNPU"
    assert table.network_level(["81078603"]) == "NotHandleFault"  # listed under NotHandle
    assert table.network_level(["81078607"]) == "NotHandleFault"
    assert table.network_level(["110001024"]) == "PreSeparateNPU"  # unlisted network code
    assert table.network_level(["110000002"]) == "SubHealthFault"
    assert {"ManuallySeparateNPU", "FreeRestartNPU", "SubHealthFault"} <= LEVELS


def test_the_shipped_customization_is_upstreams() -> None:
    custom = default_config().customization
    link = custom.frequency["81078603"]
    assert (link.window, link.times, link.level, link.release) == (
        86400,
        5,
        "ManuallySeparateNPU",
        172800,
    )
    assert custom.frequency["80E18005"].times == 3
    assert custom.frequency["80C98000"].release is None  # never released
    down = custom.duration["81078603"]
    assert (down.fault_timeout, down.recover_timeout, down.level) == (20, 60, "PreSeparateNPU")
    assert custom.autofill_release == 172800


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{", "faultCode.json is not JSON"),
        ('{"FooCodes": []}', "unknown list 'FooCodes'"),
        ('{"SeparateNPUCodes": ["xyz"]}', "is not a hex number"),
        ('{"SeparateNPUCodes": "80E18402"}', "is not a list of strings"),
    ],
)
def test_a_bad_table_names_what_is_wrong(text: str, error: str) -> None:
    with pytest.raises(BadConfig, match=error):
        parse_table(text)


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        (
            {"EventId": ["81078603"], "TimeWindow": 86400, "Times": 5, "FaultHandling": "Explode"},
            "FaultHandling 'Explode' is not one of",
        ),
        (
            {
                "EventId": ["81078603"],
                "TimeWindow": 10,
                "Times": 5,
                "FaultHandling": "ManuallySeparateNPU",
            },
            "TimeWindow 10 is outside 60..864000",
        ),
        (
            {
                "EventId": ["81078603"],
                "TimeWindow": 86400,
                "Times": 5,
                "FaultHandling": "SeparateNPU",
            },
            "needs a ReleaseTimeWindow",
        ),
        (
            {"EventId": [], "TimeWindow": 86400, "Times": 5, "FaultHandling": "SeparateNPU"},
            "EventId is empty",
        ),
    ],
)
def test_a_bad_frequency_rule_names_what_is_wrong(entry: dict[str, object], error: str) -> None:
    # The limits of validateFaultFrequencyCustomization (pkg/common/fault_code.go).
    with pytest.raises(BadConfig, match=error):
        parse_customization(json.dumps({"FaultFrequency": [entry]}))


def observe(machine: FaultMachine, chips: NodeChips, at: int) -> Observation:
    return machine.observe(chips, (), at)


def test_a_link_down_shorter_than_20_s_is_never_network_unhealthy() -> None:
    machine = FaultMachine(default_config())
    for t in range(0, 11):  # down for 10 s, looked at every second
        seen = observe(machine, node(down=frozenset({2})), T0 + t * S)
        assert seen.network_unhealthy == frozenset()
        (entry,) = seen.faults
        assert (entry.network, entry.level, entry.handling) == (
            True,
            "NotHandleFault",
            "NotHandleFault",
        )
    seen = observe(machine, node(), T0 + 11 * S)
    assert (seen.faults, seen.network_unhealthy, seen.levels) == ((), frozenset(), {})
    assert machine.reasons_text(ASCEND910) == "{}"


def test_a_link_down_counts_after_20_s_and_recovers_60_s_after_it_came_back() -> None:
    machine = FaultMachine(default_config())
    observe(machine, node(down=frozenset({2})), T0)
    assert observe(machine, node(down=frozenset({2})), T0 + 20 * S).network_unhealthy == set()
    seen = observe(machine, node(down=frozenset({2})), T0 + 21 * S)
    assert seen.network_unhealthy == {2} and seen.levels == {2: "PreSeparateNPU"}
    (entry,) = seen.faults
    # The reason's time is when it counted: down at T0, + FaultTimeout (handleTimeoutCondition).
    assert entry.times == (("81078603", T0 + 20 * S, "PreSeparateNPU"),)
    reasons = json.loads(machine.reasons_text(ASCEND910))
    assert reasons == {
        "Ascend910-2": [
            {
                "upgrade_time": T0 + 20 * S,
                "fault_code": "81078603",
                "fault_level": "PreSeparateNPU",
                "upgrade_type": "FaultDuration",
            }
        ]
    }
    observe(machine, node(), T0 + 30 * S)  # the link is back
    assert observe(machine, node(), T0 + 90 * S).network_unhealthy == {2}  # 60 s not over
    assert observe(machine, node(), T0 + 91 * S).network_unhealthy == frozenset()
    assert machine.reasons_text(ASCEND910) == "{}"


def test_five_counted_link_downs_in_24_h_separate_the_chip_until_48_h_after_recovery() -> None:
    machine = FaultMachine(default_config())
    at = T0
    for _ in range(5):  # five link-downs of 30 s, an hour apart
        for t in range(0, 31, 5):
            observe(machine, node(down=frozenset({4})), at + t * S)
        observe(machine, node(), at + 31 * S)
        at += 3600 * S
    seen = observe(machine, node(), at)
    assert seen.levels == {4: "ManuallySeparateNPU"}
    assert seen.network_unhealthy == {4}
    assert machine.separated(set(), at) == {4}
    assert machine.separated(set(), at) == {4}, "a write that failed is no admin's deletion"
    assert machine.separated({4}, at) == {4}
    reasons = json.loads(machine.reasons_text(ASCEND910))["Ascend910-4"]
    assert {(r["fault_level"], r["upgrade_type"]) for r in reasons} == {
        ("ManuallySeparateNPU", "FaultFrequency")
    }
    # Released 172800 s after the last recovery (ReleaseTimeWindow): ManuallySeparateNPU too.
    last_up = at - 3600 * S + 31 * S + 60 * S
    assert observe(machine, node(), last_up + 172800 * S).levels == {4: "ManuallySeparateNPU"}
    assert observe(machine, node(), last_up + 172801 * S).levels == {}
    assert machine.separated({4}, last_up + 172801 * S) == frozenset()


def test_four_link_downs_are_not_enough_and_short_ones_never_count() -> None:
    machine = FaultMachine(default_config())
    at = T0
    for i in range(20):
        seconds = 30 if i < 4 else 10  # four counted, sixteen too short to count
        for t in range(0, seconds + 1, 5):
            observe(machine, node(down=frozenset({4})), at + t * S)
        observe(machine, node(), at + (seconds + 1) * S)
        at += 600 * S
    assert observe(machine, node(), at).levels == {}
    assert machine.separated(set(), at) == frozenset()


def test_an_admin_deleting_a_separated_chip_releases_it_and_additions_are_kept() -> None:
    machine = FaultMachine(default_config())
    for t in (0, 1, 2):  # 80E18005: 3 times in 24 h → ManuallySeparateNPU
        observe(machine, node(codes={1: ("80E18005",)}), T0 + t * 10 * S)
        observe(machine, node(), T0 + t * 10 * S + S)
    assert machine.separated(set(), T0 + DAY // 2) == {1}
    assert machine.separated({1, 6}, T0 + DAY // 2) == {1, 6}  # an admin adds chip 6
    assert machine.separated({6}, T0 + DAY // 2) == {6}  # and deletes chip 1
    assert observe(machine, node(), T0 + DAY // 2).levels == {6: "ManuallySeparateNPU"}
    # The deleted chip's reasons are released once, for the release Event
    # (upgradefault.go RemoveManuallySeparateReasonCache → removedEvent).
    released = json.loads(machine.take_released(ASCEND910) or "")
    assert [(r["fault_code"], r["upgrade_type"]) for r in released["Ascend910-1"]] == [
        ("80E18005", "FaultFrequency")
    ]
    assert set(released) == {"Ascend910-1"} and machine.take_released(ASCEND910) is None


def test_a_chip_released_while_still_listed_is_not_taken_for_an_admins_addition() -> None:
    # A release whose write failed leaves the chip listed in the ConfigMap: it stays out
    # until a write no longer lists it.
    machine = FaultMachine(default_config())
    machine.restore({2}, "", ASCEND910, T0)  # listed at start: an autofill reason, 48 h
    machine.take_released(ASCEND910)
    assert observe(machine, node(), T0 + 172801 * S).levels == {}
    assert machine.separated({2}, T0 + 172801 * S) == frozenset()
    assert machine.separated({2}, T0 + 172802 * S) == frozenset(), "the write failed"
    assert machine.separated(set(), T0 + 172803 * S) == frozenset()
    assert machine.separated({2}, T0 + 172804 * S) == {2}, "now an admin's addition"


def test_a_restarted_agent_takes_back_separated_chips_and_reasons() -> None:
    # ascendcommon.go LoadDeviceInfoCm / FixManuallySeparateReason.
    text = json.dumps(
        {
            "Ascend910-3": [
                {
                    "upgrade_time": T0,
                    "fault_code": "81078603",
                    "fault_level": "ManuallySeparateNPU",
                    "upgrade_type": "FaultFrequency",
                }
            ],
            "Ascend910-5": [
                {
                    "upgrade_time": T0,
                    "fault_code": "81078603",
                    "fault_level": "ManuallySeparateNPU",
                    "upgrade_type": "FaultFrequency",
                }
            ],
        }
    )
    machine = FaultMachine(default_config())
    machine.restore({3, 7}, text, ASCEND910, T0 + S)
    reasons = parse_reasons(machine.reasons_text(ASCEND910), ASCEND910)
    assert set(reasons) == {3, 7}  # 5 is no longer separated: its reason goes
    assert reasons[7][0].kind == "FaultAutofill" and reasons[7][0].code == "AutofillFaultCode"
    seen = observe(machine, node(), T0 + 2 * S)
    assert seen.network_unhealthy == {3}
    assert machine.separated({3, 7}, T0 + 2 * S) == {3, 7}


def test_the_sub_health_codes_flag_adds_to_the_table() -> None:
    table = default_config().table.with_sub_health({"80e01801"})
    assert table.chip_level(["80E01801"]) == "SubHealthFault"  # RestartBusiness in the table


def test_an_unhealthy_chip_without_codes_is_separated_and_a_restart_code_is_unhealthy() -> None:
    machine = FaultMachine(default_config())
    seen = observe(machine, node(sick=frozenset({0}), codes={5: ("80C98008",)}), T0)
    assert seen.unhealthy == {0, 5}
    assert seen.levels == {0: "SeparateNPU", 5: "RestartRequest"}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def record(self, about: object, kind: str, reason: str, message: str, action: str = "") -> None:
        self.events.append((kind, reason, action, message))


def test_one_event_per_transition_never_per_poll() -> None:
    from infra.events import pod_ref  # noqa: PLC0415

    recorder = Recorder()
    pipeline = FaultPipeline(events=recorder, pod=pod_ref("kube-system", "agent-x"), node="n1")  # type: ignore[arg-type]
    for t in range(5):
        pipeline.observe(node(codes={3: ("80E18402",)}), (), 1_700_000_000.0 + t)
    pipeline.observe(node(), (), 1_700_000_010.0)
    assert [(k, r, a) for k, r, a, _ in recorder.events] == [
        ("Warning", "Occur", "SeparateNPU"),
        ("Normal", "Recovery", "SeparateNPU"),
    ]
    assert "npu:Ascend910-3, faultCodes:80E18402" in recorder.events[0][3]


def override(api: MemoryCluster, data: dict[str, str]) -> None:
    api.put(
        "ConfigMap",
        {"metadata": {"name": "mindx-dl-fault-config", "namespace": "kube-system"}, "data": data},
    )


def test_the_override_configmap_replaces_a_table_and_a_bad_key_keeps_the_last_good(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = MemoryCluster()
    pipeline = FaultPipeline(api, poll_interval=1)
    sick = node(codes={1: ("80E18402",)})
    assert pipeline.observe(sick, (), 0.0).levels == {1: "SeparateNPU"}
    override(api, {"faultCode.json": json.dumps({"RestartNPUCodes": ["80E18402"]})})
    assert pipeline.observe(sick, (), 1.0).levels == {1: "RestartNPU"}
    override(
        api,
        {
            "faultCode.json": '{"SeparateNPUCodes": ["nothex"]}',
            "faultCustomization.json": '{"FaultDuration": [{"EventId": ["81078603"], '
            '"FaultTimeout": 5, "RecoverTimeout": 5, "FaultHandling": "Nonsense"}]}',
        },
    )
    with caplog.at_level(logging.ERROR):
        assert pipeline.observe(sick, (), 2.0).levels == {1: "RestartNPU"}  # last good
        pipeline.observe(sick, (), 3.0)  # the same bad keys: not logged again
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(lines) == 2
    assert "key faultCode.json ignored" in lines[0] and "not a hex number" in lines[0]
    assert "key faultCustomization.json ignored" in lines[1] and "Nonsense" in lines[1]
    # The shipped customization stays: a link-down still counts after 20 s.
    assert pipeline.machine.config.customization.duration["81078603"].fault_timeout == 20
