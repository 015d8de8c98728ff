"""The live view, fed one change at a time, always equals a whole read of the same objects."""

from __future__ import annotations

import random

import pytest

from contract.chip_names import ASCEND310P, ASCEND910, ChipKind
from contract.deviceinfo import DeviceInfo, configmap_name, encode
from contract.objects import Obj
from contract.pods import PodView, cached_pod_view
from contract.vnpu import CORE_SPECS, template_cores
from scheduler_core.service.state import live_view
from scheduler_core.service.state.live_view import LiveView
from simulation.memory import pod_object

NOW = 1_700_000_000.0


def node(name: str, allocatable: int, vnpu: bool = False) -> Obj:
    """A 910 server, or (``vnpu``) a 310P node of 8 chips offering npu-core."""
    if vnpu:
        cores = {"huawei.com/npu-core": "64"}
        labels = {"servertype": "Ascend310P-8"}
        return {"metadata": {"name": name, "labels": labels}, "status": {"capacity": cores}}
    return {
        "metadata": {"name": name},
        "status": {
            "capacity": {"huawei.com/Ascend910": "8"},
            "allocatable": {"huawei.com/Ascend910": str(allocatable)},
        },
    }


def deviceinfo(unhealthy: frozenset[int], age: float, kind: ChipKind = ASCEND910) -> dict[str, str]:
    info = DeviceInfo(
        frozenset(range(8)) - unhealthy,
        unhealthy,
        frozenset(),
        update_time=int(NOW - age),
        kind=kind,
    )
    return encode(info)


def pod(name: str, where: str | None, chips: list[int]) -> PodView:
    notes = {"huawei.com/AscendReal": ",".join(f"Ascend910-{c}" for c in chips)} if chips else {}
    return cached_pod_view(
        pod_object("ns", name, where, len(chips) or 1, annotations=notes, phase="Running")
    )


def vnpu_pod(name: str, where: str | None, chip: int, template: str, created: bool) -> PodView:
    """An npu-core pod given a vNPU of ``template`` on ``chip`` (created: recorded)."""
    notes = {"huawei.com/npu-core": f"{chip}-{template}"}
    if created:
        notes["huawei.com/AscendReal"] = f"Ascend310P-{CORE_SPECS[template]}-100-{chip}_0"
    cores = template_cores(template)
    obj = pod_object("ns", name, where, cores, annotations=notes, resource="huawei.com/npu-core")
    return cached_pod_view(obj)


def whole_read(
    nodes: dict[str, Obj], infos: dict[str, dict[str, str]], pods: dict[str, PodView], now: float
) -> dict[str, object]:
    configmaps = [
        {"metadata": {"namespace": "kube-system", "name": configmap_name(n)}, "data": d}
        for n, d in infos.items()
    ]
    snapshot = live_view.build(nodes.values(), configmaps, pods.values(), now)
    views: dict[str, object] = {s.name: s for s in snapshot.nodes}
    views.update(snapshot.vnodes)
    return {n: views.get(n) or snapshot.left_out[n] for n in [*views, *snapshot.left_out]}


def as_read(view: LiveView) -> dict[str, object]:
    return {n: v.state or v.vnode or v.reason for n, v in view.views.items()}


@pytest.mark.parametrize("seed", range(20))
def test_any_sequence_of_changes_leaves_the_view_a_whole_read_would_give(seed: int) -> None:
    rng = random.Random(seed)
    view = LiveView()
    nodes: dict[str, Obj] = {}
    infos: dict[str, dict[str, str]] = {}
    pods: dict[str, PodView] = {}
    now = NOW
    for _ in range(150):
        name = f"n{rng.randrange(4)}"
        step = rng.random()
        if step < 0.15:
            nodes[name] = node(name, rng.choice([8, 8, 7]), vnpu=rng.random() < 0.3)
            view.set_node(name, nodes[name])
        elif step < 0.2:
            nodes.pop(name, None)
            view.set_node(name, None)
        elif step < 0.35:
            kind = rng.choice([ASCEND910, ASCEND910, ASCEND310P])
            infos[name] = deviceinfo(frozenset(rng.sample(range(8), rng.randrange(2))), 0, kind)
            view.set_deviceinfo(configmap_name(name), infos[name])
        elif step < 0.4:
            infos.pop(name, None)
            view.set_deviceinfo(configmap_name(name), None)
        elif step < 0.45:
            now += rng.choice([1, 200, 400])  # DeviceInfo ages; some turns stale
        else:
            key = f"ns/p{rng.randrange(10)}"
            if key in pods and rng.random() < 0.4:
                del pods[key]
                view.set_pod(key, None)
            elif rng.random() < 0.3:
                template = rng.choice(["vir01", "vir02_1c", "vir04_3c"])
                where = rng.choice([name, None])
                created = rng.random() < 0.5
                pods[key] = vnpu_pod(key.split("/")[1], where, rng.randrange(8), template, created)
                view.set_pod(key, pods[key])
            else:
                chips = sorted(rng.sample(range(8), rng.randrange(0, 3)))
                where = rng.choice([name, None])
                pods[key] = pod(key.split("/")[1], where, chips)
                view.set_pod(key, pods[key])
        view.due(now)
        view.changed(now)
        assert as_read(view) == whole_read(nodes, infos, pods, now)


def test_a_deviceinfo_that_ages_out_is_noticed_without_any_change() -> None:
    view = LiveView()
    view.set_node("n0", node("n0", 8))
    view.set_deviceinfo(configmap_name("n0"), deviceinfo(frozenset(), 0))
    assert view.changed(NOW)["n0"] is not None
    view.due(NOW + 100)
    assert view.changed(NOW + 100) == {}, "still fresh: nothing computed again"
    view.due(NOW + 301)
    aged = view.changed(NOW + 301)["n0"]
    assert aged is not None and aged.down and "stale" in aged.reason
