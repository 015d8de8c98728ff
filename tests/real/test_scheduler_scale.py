"""benchmarks/real_scheduler.py at a small size: the real kube-scheduler places seeded 1/2/4/8-chip
pods on node objects with their DeviceInfo, with the shipped extender (over HTTPS, kube-scheduler's
client certificate), without it, with the two extenders that decide nothing (Python and Go), and
kube-scheduler-ascend asking the service through its AscendNPU plugin. Every pod binds every way;
with the extender and with the plugin each carries legal chips (one HCCS ring for up to 4, no
chip twice on a node). No timing is asserted: the benchmark reports it.
"""

from __future__ import annotations

import pytest

from benchmarks.floor_extender import CHIPS
from benchmarks.real_scheduler import Bound, Scale, measure, pod_sizes

NODES, PODS, SEED = 50, 40, 11


@pytest.fixture(scope="module")
def scale() -> Scale:
    return measure(NODES, PODS, SEED, count_pods=10, latency_pods=10)


def chips(bound: Bound) -> list[int]:
    return [int(chip.rsplit("-", 1)[1]) for chip in bound.chips.split(",")]


@pytest.mark.parametrize("run", ["extender", "plugin"])
def test_every_pod_binds_with_the_extender_or_the_plugin_on_legal_chips(
    scale: Scale, run: str
) -> None:
    """The service behind the extender, and asked by kube-scheduler-ascend's plugin."""
    placed = getattr(scale, run).placed
    assert len(placed) == PODS
    wanted = pod_sizes(PODS, SEED)
    held: dict[tuple[str, int], str] = {}
    for pod, bound in placed.items():
        given = chips(bound)
        assert len(given) == wanted[int(pod.removeprefix("pod-"))], f"{pod}: {bound.chips}"
        assert len(set(given)) == len(given), f"{pod}: a chip twice in {bound.chips}"
        assert all(0 <= c < 8 for c in given)
        if len(given) <= 4:
            assert len({c // 4 for c in given}) == 1, f"{pod}: {bound.chips} spans both rings"
        for chip in given:
            owner = held.setdefault((bound.node, chip), pod)
            assert owner == pod, f"chip {chip} of {bound.node} given to {owner} and {pod}"


def test_every_pod_binds_without_the_extender(scale: Scale) -> None:
    placed = scale.plain.placed
    assert len(placed) == PODS
    assert all(b.node and not b.chips for b in placed.values()), "kube-scheduler bound them"


def test_every_pod_binds_through_both_extenders_that_decide_nothing(scale: Scale) -> None:
    for run in (scale.floor, scale.go_floor):
        assert len(run.placed) == PODS, run.mode
        assert {b.chips for b in run.placed.values()} == {CHIPS}, f"{run.mode} bound them"


def test_the_extender_is_asked_about_every_node_below_100(scale: Scale) -> None:
    """Under 100 nodes kube-scheduler filters them all (pkg/scheduler/schedule_one.go,
    numFeasibleNodesToFind); the extender sees those that still fit."""
    assert scale.feasible_to_find == NODES
    assert scale.names_per_filter, "the counting run reached /filter"
    assert max(scale.names_per_filter) <= NODES
    assert max(scale.names_per_filter) >= NODES - 8  # the first pods find nearly all free
