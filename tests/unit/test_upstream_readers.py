"""Our agent's DeviceInfo, as ClusterD and Huawei's Volcano plugin read it (readers written from
their Go code: tests/upstream_readers.py), fault for fault: ClusterD accepts its CheckCode and
decodes every fault entry into the code, level and time we meant; Volcano finds the fault
cards, the sub-health and the PreSeparate reasons our scheduler finds
(``scheduler_core/engine/chip_faults.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from agent.deviceinfo_publisher import configmap, device_info
from agent.faults.escalation import FaultMachine, Observation
from agent.faults.table import FaultConfig, default_config
from chip_drivers.chips import Chip, Network, NodeChips
from contract.chip_names import chip_name
from contract.deviceinfo import decode
from scheduler_core.engine.chip_faults import KEEPS_RUNNING, handling, node_faults
from tests.upstream_readers import (
    Refused,
    clusterd_device_info,
    clusterd_faults,
    clusterd_list,
    volcano_node,
)

T0 = 1_700_000_000_000  # ms
S = 1000
RESOURCE = "huawei.com/Ascend910"
SUB_HEALTH_CODE = "80E01801"  # made sub-health by the node's table (--sub-health-codes)


def chips(
    *,
    down: frozenset[int] = frozenset(),
    codes: dict[int, tuple[str, ...]] | None = None,
    sick: frozenset[int] = frozenset(),
) -> NodeChips:
    codes = codes or {}
    return NodeChips(
        "Ascend910",
        "module910x8",
        tuple(
            Chip(
                i,
                i,
                healthy=i not in sick,
                network=Network.DOWN if i in down else Network.UP,
                fault_codes=codes.get(i, ()),
            )
            for i in range(8)
        ),
    )


@dataclass(frozen=True, slots=True)
class Case:
    """What the chips went through (the agent's fault machine driven over time) and what
    each upstream reader must find."""

    drive: Callable[[FaultMachine], tuple[Observation, int]]  # the last observation, its time
    fault_cards: dict[int, str]  # Volcano: chip → CardUnhealthy / CardNetworkUnhealthy
    levels: dict[tuple[int, str], str]  # ClusterD: (chip, code) → level
    sub_healthy: bool = False
    pre_separate: frozenset[int] = frozenset()  # Volcano: restarts only if the job fails
    separated: frozenset[int] = frozenset()  # ManuallySeparateNPU


def card(machine: FaultMachine) -> tuple[Observation, int]:
    node = chips(codes={1: ("80E18402",), 2: ("80C98008",)}, sick=frozenset({1}))
    return machine.observe(node, (), T0), T0


def short_link_down(machine: FaultMachine) -> tuple[Observation, int]:
    for t in range(0, 11):  # 10 s down: NotHandleFault, never network-unhealthy
        seen = machine.observe(chips(down=frozenset({3})), (), T0 + t * S)
    return seen, T0 + 10 * S


def long_link_down(machine: FaultMachine) -> tuple[Observation, int]:
    machine.observe(chips(down=frozenset({3})), (), T0)
    return machine.observe(chips(down=frozenset({3})), (), T0 + 21 * S), T0 + 21 * S


def sub_health(machine: FaultMachine) -> tuple[Observation, int]:
    return machine.observe(chips(codes={5: (SUB_HEALTH_CODE,)}), (), T0), T0


def escalated(machine: FaultMachine) -> tuple[Observation, int]:
    for t in (0, 1, 2):  # 80E18005 three times in 24 h: ManuallySeparateNPU
        machine.observe(chips(codes={1: ("80E18005",)}), (), T0 + t * 10 * S)
        machine.observe(chips(), (), T0 + t * 10 * S + S)
    at = T0 + 60 * S
    return machine.observe(chips(), (), at), at


CASES = {
    "card": Case(
        card,
        {1: "CardUnhealthy", 2: "CardUnhealthy"},
        {(1, "80E18402"): "SeparateNPU", (2, "80C98008"): "RestartRequest"},
    ),
    "short-link-down": Case(short_link_down, {}, {(3, "81078603"): "NotHandleFault"}),
    "long-link-down": Case(
        long_link_down,
        {3: "CardNetworkUnhealthy"},
        {(3, "81078603"): "PreSeparateNPU"},
        pre_separate=frozenset({3}),
    ),
    "sub-health": Case(sub_health, {}, {(5, SUB_HEALTH_CODE): "SubHealthFault"}, sub_healthy=True),
    "escalated": Case(
        escalated,
        {1: "CardUnhealthy"},
        {(1, "80E18005"): "ManuallySeparateNPU"},
        separated=frozenset({1}),
    ),
}


def published(case: Case) -> dict[str, str]:
    defaults = default_config()
    table = defaults.table.with_sub_health(frozenset({SUB_HEALTH_CODE}))
    machine = FaultMachine(FaultConfig(table, defaults.customization))
    seen, at = case.drive(machine)
    info = device_info(chips(), (), at // 1000, seen=seen)
    data: dict[str, str] = configmap("node-a", info, machine.separated(set(), at))["data"]
    return data


@pytest.mark.parametrize("name", sorted(CASES))
def test_clusterd_accepts_our_deviceinfo_and_reads_each_fault_as_we_meant_it(name: str) -> None:
    case = CASES[name]
    data = published(case)
    device = clusterd_device_info(data)  # the CheckCode as ClusterD computes it
    faults = clusterd_faults(device, RESOURCE)
    assert {(int(f.npu_name.rsplit("-", 1)[1]), f.code): f.level for f in faults} == case.levels
    assert all(f.fault_time is not None for f in faults), "each code carries its time"
    unhealthy = {c for c, kind in case.fault_cards.items() if kind == "CardUnhealthy"}
    network = {c for c, kind in case.fault_cards.items() if kind == "CardNetworkUnhealthy"}
    assert clusterd_list(device, f"{RESOURCE}-Unhealthy") == sorted(map(chip_name, unhealthy))
    assert clusterd_list(device, f"{RESOURCE}-NetworkUnhealthy") == sorted(map(chip_name, network))
    assert data["ManuallySeparateNPU"] == ",".join(map(chip_name, sorted(case.separated)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_volcano_finds_the_fault_cards_sub_health_and_pre_separation_our_scheduler_finds(
    name: str,
) -> None:
    case = CASES[name]
    data = published(case)
    device = clusterd_device_info(data)
    volcano = volcano_node(device.device_list, RESOURCE)
    assert volcano.fault_cards == {chip_name(c): kind for c, kind in case.fault_cards.items()}
    assert volcano.sub_healthy == case.sub_healthy
    pre = {c for c in range(8) if volcano.restarts_only_if_it_fails(chip_name(c))}
    assert pre == case.pre_separate
    # Ours, from the same ConfigMap: a fault card stops its pod unless every handling on it
    # leaves a running pod alone (PreSeparateNPU: only if the job fails, as Volcano).
    ours = node_faults(decode(data))
    assert ours.sub_healthy == volcano.sub_healthy
    stopping = {
        c
        for c in case.fault_cards
        if not volcano.handlings.get(chip_name(c), frozenset()) <= KEEPS_RUNNING
        or not volcano.handlings.get(chip_name(c))
    }
    assert ours.failed == stopping
    assert {handling(f) for f in decode(data).faults} == set(case.levels.values())


def test_a_deviceinfo_edited_after_its_checkcode_is_refused_by_clusterd() -> None:
    data = published(CASES["card"])
    edited = {**data, "DeviceInfoCfg": data["DeviceInfoCfg"].replace("Ascend910-0,", "")}
    with pytest.raises(Refused, match="not valid"):
        clusterd_device_info(edited)
