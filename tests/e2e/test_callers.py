"""End to end through faithful stand-ins of the two callers (``simulation/kube_scheduler.py``,
``simulation/volcano.py``): every container gets its pod's chips, in both of kube-scheduler's
node modes, through Volcano's sessions, discards and binder."""

from __future__ import annotations

import pytest

from simulation.cluster import simulated_cluster
from simulation.kube_scheduler import (
    Backoff,
    ExtenderConfig,
    KubeScheduler,
)
from simulation.memory import pod_object
from simulation.volcano import VolcanoScheduler
from tests.e2e.helpers import check_invariants, place, submit

SIZES = [1, 2, 4, 1, 8, 2, 1, 4, 2, 1, 1, 2]


@pytest.mark.parametrize("node_cache", [True, False])
def test_kube_scheduler_places_a_mixed_load_in_either_node_mode(node_cache: bool) -> None:
    with simulated_cluster(4) as cluster:
        config = ExtenderConfig(cluster.url, node_cache_capable=node_cache)
        scheduler = KubeScheduler(cluster, config)
        for i, npu in enumerate(SIZES[:8]):
            submit(cluster, f"p{i:02d}", npu)
        cpu = pod_object("ns", "cpu", None, 0)
        cpu["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}  # none managed
        cluster.store.put("Pod", cpu)
        place(cluster, scheduler, *(f"p{i:02d}" for i in range(8)))
        check_invariants(cluster, scheduler)
        assert len(cluster.admitted) == 8
        assert cluster.store.get_pod("ns", "cpu")["spec"]["nodeName"], "bound by the default binder"
        scheduler.close()


def test_preemption_considers_only_nodes_the_pod_could_use_once_emptied() -> None:
    with simulated_cluster(3) as cluster:
        scheduler = KubeScheduler(cluster)
        submit(cluster, "a", 8)
        submit(cluster, "b", 8)
        place(cluster, scheduler, "a", "b")
        empty = next(
            n for n in cluster.nodes if n not in {a.node for a in cluster.admitted.values()}
        )
        submit(cluster, "never", 3)  # 3 chips: no 8-chip server serves it, full or empty
        cluster.service.refresh()
        scheduler.cycle()
        full = sorted(a.node for a in cluster.admitted.values())
        assert scheduler.preemption_candidates["ns/never"] == full, "not the empty node"
        assert "not in map[3:{} 5:{} 6:{} 7:{}]" in scheduler.reasons["ns/never"][empty]
        scheduler.close()


def test_a_filter_error_fails_the_cycle_and_the_pod_backs_off() -> None:
    with simulated_cluster(1) as cluster:
        now = [0.0]
        config = ExtenderConfig(f"{cluster.url}/nowhere")
        scheduler = KubeScheduler(cluster, config, backoff=Backoff(1.0, 10.0), clock=lambda: now[0])
        submit(cluster, "p", 1)
        assert scheduler.cycle() == 0
        assert "HTTP 404" in scheduler.reasons["ns/p"][""]
        scheduler.extender.config = ExtenderConfig(cluster.url)
        cluster.service.refresh()
        assert scheduler.cycle() == 0, "still backing off"
        now[0] = 1.5
        assert scheduler.cycle() == 1
        scheduler.close()


def test_volcano_sessions_place_a_mixed_load_and_a_gang() -> None:
    with simulated_cluster(4) as cluster:
        volcano = VolcanoScheduler(cluster)
        for i, npu in enumerate(SIZES[:6]):
            submit(cluster, f"p{i:02d}", npu, scheduler="volcano")
        submit(cluster, "g-0", 8, gang="g", size=2, scheduler="volcano")
        submit(cluster, "g-1", 8, gang="g", size=2, scheduler="volcano")
        place(cluster, volcano, "g-0", "g-1")
        check_invariants(cluster, volcano)


def test_a_gang_discarded_in_one_session_is_bound_later_with_the_chips_it_was_given() -> None:
    # Session 1: one node is free, the gang needs two: its statement is discarded. Once the
    # second node frees, Volcano's binder sends the snapshot's annotations in the Binding:
    # a discard that left its annotations on the pod would override the fresh choice.
    with simulated_cluster(2) as cluster:
        volcano = VolcanoScheduler(cluster)
        submit(cluster, "blocker", 8, scheduler="volcano")
        place(cluster, volcano, "blocker")
        submit(cluster, "g-0", 8, gang="g", size=2, scheduler="volcano")
        submit(cluster, "g-1", 8, gang="g", size=2, scheduler="volcano")
        cluster.service.refresh()
        report = volcano.session()
        assert report.bound == 0
        for name in ("g-0", "g-1"):
            notes = cluster.store.get_pod("ns", name)["metadata"]["annotations"]
            assert "huawei.com/Ascend910" not in notes, f"{name} keeps no stale choice"
        cluster.finish("ns/blocker")
        place(cluster, volcano, "g-0", "g-1")
        check_invariants(cluster, volcano)
