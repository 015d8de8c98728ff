"""End to end, DRA: 910 nodes running the DRA driver (its kubelet plugin over unix sockets,
its slice through the official client over HTTP), the kubelet's DRA side and kube-scheduler's
allocation as stand-ins (``simulation/dra_cluster.py``), the deployed DeviceClass and claim
templates."""

from __future__ import annotations

from typing import Any

import grpc

from contract.dra import CLAIM_KIND
from deviceplugin_api.dra.v1 import api_pb2 as v1
from deviceplugin_api.dra.v1 import api_pb2_grpc as v1_grpc
from deviceplugin_api.dra_health.v1alpha1 import api_pb2 as health
from deviceplugin_api.dra_health.v1alpha1 import api_pb2_grpc as health_grpc
from simulation.cluster import tor_configmap, wait_for
from simulation.dra_cluster import DraCluster, dra_cluster, pod_with_claim

NODE = "node-00"


def chips_of(cluster: DraCluster, key: str) -> list[int]:
    (container,) = cluster.running[key].values()
    return sorted(
        int(path.removeprefix("/dev/davinci"))
        for path in container.device_nodes
        if path.removeprefix("/dev/davinci").isdigit()
    )


def submit(cluster: DraCluster, name: str, template: str) -> str:
    cluster.store.put("Pod", pod_with_claim("default", name, template))
    return f"default/{name}"


def device(cluster: DraCluster, node: str, name: str) -> dict[str, Any]:
    published = cluster.slice_of(node)
    assert published is not None
    (found,) = [d for d in published["spec"]["devices"] if d["name"] == name]
    return {k: next(iter(v.values())) for k, v in found["attributes"].items()}


def ring_free_is(cluster: DraCluster, chip: int, free: int) -> bool:
    return (
        cluster.slice_of(NODE) is not None
        and device(cluster, NODE, f"npu-{chip}").get("ringFree") == free
    )


def test_ring_claims_get_chips_of_one_ring_and_their_containers_get_those_chips() -> None:
    with dra_cluster(1) as cluster:
        keys = [
            submit(cluster, f"p{i}", t)
            for i, t in enumerate(["npu-2-ring", "npu-1", "npu-4-ring", "npu-1"])
        ]
        assert sorted(cluster.run()) == keys
        given = {k: chips_of(cluster, k) for k in keys}
        assert given == {
            "default/p0": [0, 1],
            "default/p1": [2],
            "default/p2": [4, 5, 6, 7],
            "default/p3": [3],
        }
        for chips in given.values():
            assert len({c // 4 for c in chips}) == 1, "one HCCS ring"
        submit(cluster, "late", "npu-1")
        cluster.run()
        assert cluster.scheduler.reasons == {
            "default/late": "no node has devices for all of its claims"
        }
        cluster.end("default/p1")
        assert cluster.run() == ["default/late"]
        assert chips_of(cluster, "default/late") == [2]


def test_a_chip_fault_is_published_and_streamed_and_the_next_claim_avoids_its_ring() -> None:
    with dra_cluster(1) as cluster:
        node = cluster.nodes[NODE]
        channel = grpc.insecure_channel(f"unix://{node.driver.plugin.dra_socket}")
        stream = iter(
            health_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
                health.NodeWatchResourcesRequest(), timeout=20
            )
        )
        first = next(stream)
        assert {d.device.device_name: d.health for d in first.devices}["npu-1"] == health.HEALTHY
        node.set_health(frozenset({1}))
        changed = next(stream)
        assert {d.device.device_name: d.health for d in changed.devices}["npu-1"] == (
            health.UNHEALTHY
        )
        channel.close()
        assert wait_for(lambda: device(cluster, NODE, "npu-1")["healthy"] is False)
        key = submit(cluster, "four", "npu-4-ring")
        assert cluster.run() == [key]
        assert chips_of(cluster, key) == [4, 5, 6, 7], "ring 0 has a faulty chip"


def test_a_kubelet_restart_wipes_the_nodes_slice_and_the_driver_publishes_it_again() -> None:
    with dra_cluster(1) as cluster:
        node = cluster.nodes[NODE]
        writes = node.driver.publisher.writes
        node.kubelet.restart()
        assert node.kubelet.wiped >= 1
        assert wait_for(lambda: cluster.slice_of(NODE) is not None, timeout=20)
        assert node.driver.publisher.writes > writes
        assert wait_for(lambda: node.kubelet.plugin(node.driver.config.driver) is not None)
        key = submit(cluster, "after", "npu-2-ring")
        assert cluster.run() == [key]


def test_a_driver_restart_keeps_its_prepared_claims_and_still_refuses_their_chips() -> None:
    with dra_cluster(1) as cluster:
        key = submit(cluster, "kept", "npu-2-ring")
        assert cluster.run() == [key]
        (container,) = cluster.running[key].values()
        cluster.restart_driver(NODE)
        node = cluster.nodes[NODE]
        assert wait_for(lambda: node.kubelet.plugin(node.driver.config.driver) is not None)
        assert node.driver.preparer.prepared_chips() == frozenset({0, 1})
        assert wait_for(lambda: ring_free_is(cluster, 0, 2), timeout=20)
        (info,) = node.kubelet.claims.values()
        stub = v1_grpc.DRAPluginStub(
            grpc.insecure_channel(f"unix://{node.driver.plugin.dra_socket}")
        )
        again = stub.NodePrepareResources(
            v1.NodePrepareResourcesRequest(
                claims=[v1.Claim(namespace=info.namespace, uid=info.uid, name=info.name)]
            ),
            timeout=10,
        )
        assert [i for d in again.claims[info.uid].devices for i in d.cdi_device_ids] == list(
            container.cdi_ids
        ), "the same devices again (the kubelet asks after its restarts)"
        thief = cluster.store.get_object(CLAIM_KIND, "default", info.name)
        thief["metadata"].update(name="thief", uid="uid-thief")
        cluster.store.create_object(CLAIM_KIND, thief)
        stolen = stub.NodePrepareResources(
            v1.NodePrepareResourcesRequest(
                claims=[v1.Claim(namespace="default", uid="uid-thief", name="thief")]
            ),
            timeout=10,
        )
        assert "are prepared for claim default/" in stolen.claims["uid-thief"].error
        cluster.end(key)
        assert node.driver.preparer.prepared() == {}
        assert not any((node.home / "cdi").iterdir()), "its CDI spec is gone"


def test_the_plugin_answers_every_claim_it_is_asked_even_those_it_cannot_prepare() -> None:
    with dra_cluster(1) as cluster:
        node = cluster.nodes[NODE]
        stub = v1_grpc.DRAPluginStub(
            grpc.insecure_channel(f"unix://{node.driver.plugin.dra_socket}")
        )
        empty = stub.NodePrepareResources(v1.NodePrepareResourcesRequest(), timeout=10)
        assert dict(empty.claims) == {}, "the liveness probe's empty call"
        key = submit(cluster, "p", "npu-1")
        cluster.run()
        (info,) = node.kubelet.claims.values()
        answer = stub.NodePrepareResources(
            v1.NodePrepareResourcesRequest(
                claims=[
                    v1.Claim(namespace="default", uid="uid-other", name=info.name),
                    v1.Claim(namespace="default", uid="uid-gone", name="gone"),
                ]
            ),
            timeout=10,
        )
        assert "got replaced" in answer.claims["uid-other"].error
        assert "not found" in answer.claims["uid-gone"].error
        never = stub.NodeUnprepareResources(
            v1.NodeUnprepareResourcesRequest(
                claims=[v1.Claim(namespace="default", uid="uid-never", name="never")]
            ),
            timeout=10,
        )
        assert never.claims["uid-never"].error == "", "unknown claims unprepare as success"
        assert key in cluster.running


def test_a_kubelet_that_knows_only_v1beta1_prepares_through_it() -> None:
    with dra_cluster(1, kubelet_services=("v1beta1.DRAPlugin",)) as cluster:
        node = cluster.nodes[NODE]
        plugin = node.kubelet.plugin(node.driver.config.driver)
        assert plugin is not None and plugin.service == "v1beta1.DRAPlugin"
        key = submit(cluster, "old", "npu-2-ring")
        assert cluster.run() == [key]
        assert chips_of(cluster, key) == [0, 1]


def test_the_exact_fit_ladder_takes_the_ring_first_fit_would_split() -> None:
    """Ring 1 has two healthy chips, ring 0 three free: a 2-chip claim by the ladder takes
    ring 1 whole (Huawei's priority: a ring with exactly 2 free), first fit splits ring 0."""
    with dra_cluster(1) as cluster:
        cluster.nodes[NODE].set_health(frozenset({4, 5}))
        assert wait_for(lambda: ring_free_is(cluster, 6, 2), timeout=20)
        one = submit(cluster, "one", "npu-1")
        assert cluster.run() == [one] and chips_of(cluster, one) == [0]
        assert wait_for(lambda: ring_free_is(cluster, 1, 3), timeout=20)
        fit = submit(cluster, "fit", "npu-2-fit")
        assert cluster.run() == [fit]
        assert chips_of(cluster, fit) == [6, 7]
        plain = submit(cluster, "plain", "npu-2-ring")
        assert cluster.run() == [plain]
        assert chips_of(cluster, plain) == [1, 2]


def test_a_kubelet_that_knows_none_of_the_services_refuses_and_the_driver_says_why() -> None:
    with dra_cluster(1, kubelet_services=("v2.DRAPlugin",)) as cluster:
        node = cluster.nodes[NODE]
        plugin = node.driver.plugin
        assert wait_for(lambda: plugin.refusals >= 1)
        assert not plugin.registered.is_set()
        assert "is a DRA service this kubelet knows" in plugin.last_status
        assert node.kubelet.plugin(node.driver.config.driver) is None


def test_each_chip_names_its_nodes_leaf_switch_once_the_topology_is_imported() -> None:
    with dra_cluster(2) as cluster:
        assert "torIP" not in device(cluster, "node-01", "npu-0")
        cluster.store.put("ConfigMap", tor_configmap(nodes=2, per_tor=1))
        assert wait_for(lambda: device(cluster, "node-01", "npu-0").get("torIP") == "1.0.0.1")
        assert wait_for(lambda: device(cluster, NODE, "npu-7").get("torIP") == "1.0.0.0")
