"""Jobs in the shapes their controllers create, end to end on the simulated cluster: a Volcano
Job of Huawei's documented shape through Volcano's sessions, a chip fault and its restart;
a PyTorchJob with a coscheduling PodGroup under kube-scheduler, and its fault restart; their
replacement pods (same names, new UIDs) go back to their ranks' nodes."""

from __future__ import annotations

from typing import Any

from simulation.cluster import SimulatedCluster, simulated_cluster, tor_configmap, wait_for
from simulation.kube_scheduler import KubeScheduler
from simulation.volcano import VolcanoScheduler
from tests.e2e.helpers import check_invariants, place, restart_after_fault
from tests.jobs import submit


def keys(pods: list[dict[str, Any]]) -> list[str]:
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods]


def placed(cluster: SimulatedCluster, pods: list[dict[str, Any]]) -> dict[int, str]:
    """Rank → node, from the hccl/rankIndex the scheduler wrote."""
    result = {}
    for pod in pods:
        meta = pod["metadata"]
        stored = cluster.store.get_pod(meta["namespace"], meta["name"])
        result[int(stored["metadata"]["annotations"]["hccl/rankIndex"])] = stored["spec"][
            "nodeName"
        ]
    return result


def test_a_volcano_job_restarts_after_a_chip_fault_and_its_healthy_ranks_keep_their_nodes() -> None:
    # Three ToRs of 4. The Job's labels (large-model ToR affinity, forced fault rescheduling,
    # two retries) reach only its PodGroup, as Volcano's job controller copies them.
    with simulated_cluster(12) as cluster:
        cluster.store.put("ConfigMap", tor_configmap(nodes=12, per_tor=4))
        pods = submit(cluster.store, "volcano")
        volcano = VolcanoScheduler(cluster)
        place(cluster, volcano, *keys(pods))
        check_invariants(cluster, volcano)
        first = placed(cluster, pods)
        assert sorted(first) == [0, 1, 2, 3]
        assert len({int(n[-2:]) // 4 for n in first.values()}) == 1, "one whole ToR"

        faulty = first[3]
        # fault-scheduling: force is the PodGroup's: the service restarts the whole job.
        restart_after_fault(cluster, faulty, len(pods))
        again = submit(cluster.store, "volcano", generation=1)  # Volcano makes them again
        assert wait_for(lambda: all(cluster.published_free(n) >= 7 for n in first.values()))
        place(cluster, volcano, *keys(again))
        check_invariants(cluster, volcano)
        second = placed(cluster, again)
        assert faulty not in second.values()
        assert {r: second[r] for r in range(3)} == {r: first[r] for r in range(3)}


def test_a_pytorchjob_with_a_coscheduling_podgroup_runs_ranked_and_restarts_in_place() -> None:
    # Its template's fault-scheduling label reaches its pods (the operator copies it); the
    # PodGroup, created by the operator, carries none.
    with simulated_cluster(5) as cluster:
        pods = submit(cluster.store, "pytorch")
        scheduler = KubeScheduler(cluster)
        place(cluster, scheduler, *keys(pods))
        check_invariants(cluster, scheduler)
        first = placed(cluster, pods)
        assert sorted(first) == [0, 1, 2, 3] and len(set(first.values())) == 4
        master = cluster.store.get_pod("train", "llama-sft-master-0")
        assert master["metadata"]["annotations"]["hccl/rankIndex"] == "0"

        faulty = first[2]
        restart_after_fault(cluster, faulty, len(pods))
        again = submit(cluster.store, "pytorch", generation=1)  # the operator makes them again
        place(cluster, scheduler, *keys(again))
        check_invariants(cluster, scheduler)
        second = placed(cluster, again)
        assert faulty not in second.values()
        assert {r: second[r] for r in (0, 1, 3)} == {r: first[r] for r in (0, 1, 3)}
        scheduler.close()


def test_a_kueue_pod_group_and_an_indexed_job_run_as_gangs_under_kube_scheduler() -> None:
    with simulated_cluster(4) as cluster:
        shards = submit(cluster.store, "kueue")
        indexed = submit(cluster.store, "indexed")
        scheduler = KubeScheduler(cluster)
        place(cluster, scheduler, *keys(shards), *keys(indexed))
        check_invariants(cluster, scheduler)
        given = [
            cluster.store.get_pod("batch", p["metadata"]["name"])["metadata"]["annotations"]
            for p in indexed
        ]
        assert [a["hccl/rankIndex"] for a in given] == ["0", "1"], "the completion index"
        scheduler.close()
