"""The Allocate handshake end to end on one node: pod cache, annotation allocator, agent and
kubelet simulator over real sockets, with the in-memory gateway and with the official
kubernetes client over HTTP against the loopback API server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.allocation.handshake import ChipHandshake
from agent.builder import NodeAddress
from agent.device_plugin import DevicePlugin
from agent.pod_cache import PodCache
from chip_drivers.chips import Chip, NodeChips
from chip_drivers.fake import FakeDriver
from contract.objects import Obj
from infra.kube.client import KubernetesGateway
from infra.kube.port import KubeGateway, Page, Selection, WatchEvent
from simulation.cluster import state_file, wait_for
from simulation.kubelet import KubeletError, KubeletSimulator
from simulation.loopback import LoopbackApiServer
from simulation.memory import MemoryCluster, pod_object
from tests.integration.conftest import RESOURCE

NODE = "node-1"


@dataclass
class Cluster:
    api: MemoryCluster
    kubelet: KubeletSimulator
    cache: PodCache
    agent: DevicePlugin
    state: Path
    server: LoopbackApiServer | None

    def bind(self, name: str, chips: str, when: str, npu: int | None = None) -> None:
        count = len(chips.split(",")) if npu is None else npu
        annotations = {"huawei.com/Ascend910": chips, "predicate-time": when}
        self.api.put("Pod", pod_object("ns", name, NODE, count, annotations=annotations))

    def down(self) -> None:
        if self.server is not None:
            self.server.stop()
        else:
            self.api.reachable = False

    def up(self) -> None:
        if self.server is not None:
            self.server.start()
        else:
            self.api.reachable = True

    def annotations(self, name: str) -> Mapping[str, str]:
        pod: Obj = self.api.get_pod("ns", name)
        return dict(pod["metadata"]["annotations"])


class ConsumedByAnotherPlugin(MemoryCluster):
    """Another device-plugin instance consumes the pod right before our first patch lands."""

    def __init__(self) -> None:
        super().__init__()
        self.conflicts = 0

    def patch_metadata(
        self,
        kind: str,
        namespace: str,
        name: str,
        changes: Mapping[str, Mapping[str, str | None]],
        resource_version: str = "",
    ) -> Obj:
        if self.conflicts == 0 and resource_version:
            self.conflicts += 1
            pod = self.get_pod(namespace, name)
            pod["metadata"]["annotations"]["predicate-time"] = "18446744073709551615"
            pod["metadata"]["annotations"]["huawei.com/AscendReal"] = "Ascend910-1"
            self.put("Pod", pod)
        return super().patch_metadata(kind, namespace, name, changes, resource_version)


def build(short_dir: Path, api: MemoryCluster, over_http: bool) -> Cluster:
    state = short_dir / "state.yaml"
    state.write_text(state_file(unhealthy=(7,)))
    api.put(
        "Node",
        {
            "metadata": {"name": NODE},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.10.11"}]},
        },
    )
    server = LoopbackApiServer(api) if over_http else None
    gateway: KubeGateway = KubernetesGateway.for_url(server.start()) if server else api
    kubelet = KubeletSimulator(short_dir / "plugins")
    kubelet.start()
    cache = PodCache(gateway, NODE)
    cache.start()
    allocator = ChipHandshake(gateway, cache, lambda: "192.168.10.11", wait_for_pod=0.5)
    agent = DevicePlugin(
        FakeDriver(state), short_dir / "plugins", ascend_runtime=True, allocator=allocator
    )
    agent.start()
    assert agent.wait_registered(30)
    assert kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 7)
    return Cluster(api, kubelet, cache, agent, state, server)


@contextmanager
def running(short_dir: Path, api: MemoryCluster, over_http: bool) -> Iterator[Cluster]:
    built = build(short_dir, api, over_http)
    try:
        yield built
    finally:
        built.agent.stop()
        built.cache.stop()
        built.kubelet.close()
        if built.server is not None:
            built.server.stop()


@pytest.fixture(params=["memory", "http"])
def cluster(short_dir: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with running(short_dir, MemoryCluster(), request.param == "http") as built:
        yield built


def test_the_container_gets_the_scheduler_chips_and_the_pod_records_them(cluster: Cluster) -> None:
    cluster.bind("train", "Ascend910-4,Ascend910-5", "100")
    allocation = cluster.kubelet.allocate("ns/train", "main", RESOURCE, 2)
    assert allocation.response.envs["ASCEND_VISIBLE_DEVICES"] == "4,5"
    written = cluster.annotations("train")
    assert written["predicate-time"] == "18446744073709551615"
    assert written["huawei.com/AscendReal"] == "Ascend910-4,Ascend910-5"
    # GetPreferredAllocation steered the kubelet to the same chips: its records tell the truth.
    assert written["huawei.com/kltDev"] == written["huawei.com/AscendReal"]
    table = json.loads(written["ascend.kubectl.kubernetes.io/ascend-910-configuration"])
    # As Huawei's plugin: server_id the pod's UID, host_ip and server_ip the node's address.
    pod_uid = cluster.api.get_pod("ns", "train")["metadata"]["uid"]
    assert (table["server_id"], table["host_ip"], table["server_ip"]) == (
        pod_uid,
        "192.168.10.11",
        "192.168.10.11",
    )


def test_two_pending_pods_with_equal_counts_are_served_oldest_first(cluster: Cluster) -> None:
    cluster.bind("late", "Ascend910-0,Ascend910-1", "200")
    cluster.bind("early", "Ascend910-4,Ascend910-5", "100")
    first = cluster.kubelet.allocate("ns/early", "main", RESOURCE, 2)
    second = cluster.kubelet.allocate("ns/late", "main", RESOURCE, 2)
    assert first.response.envs["ASCEND_VISIBLE_DEVICES"] == "4,5"
    assert second.response.envs["ASCEND_VISIBLE_DEVICES"] == "0,1"


def test_a_malformed_predicate_time_waits_behind_valid_ones(cluster: Cluster) -> None:
    cluster.bind("garbled", "Ascend910-0", "abcdef")
    cluster.bind("valid", "Ascend910-3", "5")
    assert (
        cluster.kubelet.allocate("ns/x", "main", RESOURCE, 1).response.envs[
            "ASCEND_VISIBLE_DEVICES"
        ]
        == "3"
    )
    assert (
        cluster.kubelet.allocate("ns/y", "main", RESOURCE, 1).response.envs[
            "ASCEND_VISIBLE_DEVICES"
        ]
        == "0"
    )


@pytest.mark.parametrize(
    ("chips", "reason"),
    [
        ("Ascend910-9", "Ascend910-9 does not exist on this node"),
        ("Ascend910-7", "Ascend910-7 is unhealthy"),
    ],
)
def test_chips_that_cannot_be_given_fail_allocate_with_an_event(
    cluster: Cluster, chips: str, reason: str
) -> None:
    cluster.bind("bad", chips, "100")
    with pytest.raises(KubeletError, match=reason):
        cluster.kubelet.allocate("ns/bad", "main", RESOURCE, 1)
    assert wait_for(lambda: bool(cluster.api.events)), "Events are written by their own thread"
    event = cluster.api.events[-1]
    assert (event["reason"], event["type"]) == ("NPUChipsRefused", "Warning")
    assert (event["count"], event["reportingComponent"]) == (1, "ascend-npu-agent")
    assert event["firstTimestamp"] == event["lastTimestamp"]
    assert event["message"].endswith(reason)
    assert cluster.annotations("bad")["predicate-time"] == "100", "a refused pod is not consumed"


def test_a_chip_held_by_a_running_pod_is_never_handed_out_twice(cluster: Cluster) -> None:
    cluster.bind("first", "Ascend910-2", "100")
    cluster.kubelet.allocate("ns/first", "main", RESOURCE, 1)
    cluster.bind("second", "Ascend910-2", "200")
    with pytest.raises(KubeletError, match="Ascend910-2 is held by ns/first"):
        cluster.kubelet.allocate("ns/second", "main", RESOURCE, 1)


def test_no_waiting_pod_fails_with_the_reference_message(cluster: Cluster) -> None:
    with pytest.raises(KubeletError, match=r"not get valid pod .*no pod of huawei\.com/Ascend910"):
        cluster.kubelet.allocate("ns/ghost", "main", RESOURCE, 1)
    # Then it counts what the node's pods were, by why none matched (no names: the message
    # lands in the refused pod's status).
    cluster.bind("first", "Ascend910-2", "100")
    cluster.kubelet.allocate("ns/first", "main", RESOURCE, 1)
    cluster.bind("pair", "Ascend910-0,Ascend910-1", "200")
    with pytest.raises(KubeletError) as refused:
        cluster.kubelet.allocate("ns/ghost", "main", RESOURCE, 4)
    said = str(refused.value)
    assert "1 consumed, 1 waiting for 2" in said and "ns/" not in said, said


class StalledWatch(MemoryCluster):
    """Watches that deliver nothing (a stream the network holds up): only lists are fresh."""

    def watch(
        self,
        what: Selection,
        resource_version: str,
        timeout: float,
        until: threading.Event | None = None,
    ) -> Iterator[WatchEvent]:
        (until or threading.Event()).wait(min(timeout, 5))
        return iter(())


def test_a_pod_the_caches_watch_never_delivered_is_found_by_a_list(short_dir: Path) -> None:
    # The kubelet admits what its own watch showed; the agent's watch may lag far behind
    # (cut, the API server away, the agent just restarted): Allocate lists before refusing.
    with running(short_dir, StalledWatch(), over_http=False) as stalled:
        stalled.bind("unseen", "Ascend910-3", "100")
        allocation = stalled.kubelet.allocate("ns/unseen", "main", RESOURCE, 1)
        assert allocation.response.envs["ASCEND_VISIBLE_DEVICES"] == "3"
        assert stalled.annotations("unseen")["huawei.com/AscendReal"] == "Ascend910-3"


class BindsAfterTheNextList(MemoryCluster):
    """Runs ``then`` once, right after the next list of pods is answered: a pod bound just
    after an Allocate began (with its first list)."""

    then: Callable[[], None] | None = None

    def list_page(self, what: Selection, limit: int, token: str = "") -> Page:
        page = super().list_page(what, limit, token)
        then, self.then = self.then, None
        if then is not None and what.kind == "Pod":
            then()
        return page


def test_a_pod_bound_after_an_allocate_began_is_not_that_allocates(short_dir: Path) -> None:
    """The kubelet asks Allocate only for a pod it has seen bound, so the list the Allocate
    starts with shows it; a pod bound later is another pod's. Before, an Allocate for a pod
    deleted while it was admitted took the next pod of its count, whose own Allocate then
    found nothing (seen under load: "not get valid pod ... 1 consumed")."""
    api = BindsAfterTheNextList()
    with running(short_dir, api, over_http=False) as cluster:
        # Straight to Allocate (GetPreferredAllocation lists first, back to back with it).
        cluster.kubelet.use_preferred = False
        api.then = lambda: cluster.bind("later", "Ascend910-6", "100")
        with pytest.raises(KubeletError, match="not get valid pod"):
            cluster.kubelet.allocate("ns/gone", "main", RESOURCE, 1)
        assert cluster.annotations("later")["predicate-time"] == "100", "not consumed"
        allocation = cluster.kubelet.allocate("ns/later", "main", RESOURCE, 1)
        assert allocation.response.envs["ASCEND_VISIBLE_DEVICES"] == "6"


@pytest.mark.parametrize("over_http", [False, True])
def test_a_pod_consumed_by_someone_else_meanwhile_is_reread_and_never_given_twice(
    short_dir: Path, over_http: bool
) -> None:
    api = ConsumedByAnotherPlugin()
    with running(short_dir, api, over_http) as built:
        built.bind("p", "Ascend910-1", "100")
        built.bind("q", "Ascend910-2", "200")
        allocation = built.kubelet.allocate("ns/q", "main", RESOURCE, 1)
        assert api.conflicts == 1
        assert allocation.response.envs["ASCEND_VISIBLE_DEVICES"] == "2", "decided again: q"
        assert "huawei.com/kltDev" not in built.annotations("p"), "p was not consumed twice"
        assert built.annotations("q")["huawei.com/AscendReal"] == "Ascend910-2"


def test_with_the_api_server_down_allocate_fails_cleanly_and_health_still_flows(
    cluster: Cluster,
) -> None:
    cluster.bind("p", "Ascend910-1", "100")
    assert wait_for(lambda: any(p.name == "p" for p in cluster.cache.pods()))
    cluster.down()
    with pytest.raises(KubeletError, match="API server"):
        cluster.kubelet.allocate("ns/p", "main", RESOURCE, 1)
    cluster.state.write_text(state_file(unhealthy=(6, 7)))
    assert cluster.kubelet.wait_for(lambda: cluster.kubelet.allocatable(RESOURCE) == 6)
    cluster.up()
    assert (
        cluster.kubelet.allocate("ns/p", "main", RESOURCE, 1).response.envs[
            "ASCEND_VISIBLE_DEVICES"
        ]
        == "1"
    )


def test_an_agent_restart_mid_stream_loses_nothing_and_gives_nothing_twice(
    cluster: Cluster,
) -> None:
    cluster.bind("first", "Ascend910-0,Ascend910-1", "100")
    cluster.kubelet.allocate("ns/first", "main", RESOURCE, 2)
    cluster.bind("second", "Ascend910-1,Ascend910-2", "200")  # a stale decision: chip 1 is taken
    cluster.bind("third", "Ascend910-4,Ascend910-5", "300")
    cluster.agent.stop()
    cluster.cache.stop()
    gateway: KubeGateway = (
        KubernetesGateway.for_url(cluster.server.url) if cluster.server else cluster.api
    )
    cluster.cache = PodCache(gateway, NODE)
    cluster.cache.start()
    allocator = ChipHandshake(gateway, cluster.cache, lambda: "192.168.10.11", wait_for_pod=0.5)
    cluster.agent = DevicePlugin(
        FakeDriver(cluster.state), cluster.agent.plugin_dir, True, allocator
    )
    cluster.agent.start()
    assert cluster.agent.wait_registered(30)
    assert cluster.kubelet.wait_for(lambda: cluster.kubelet.allocatable(RESOURCE) == 7)
    with pytest.raises(KubeletError, match="Ascend910-1 is held by ns/first"):
        cluster.kubelet.allocate("ns/second", "main", RESOURCE, 2)
    cluster.api.delete("Pod", "ns", "second")
    third = cluster.kubelet.allocate("ns/third", "main", RESOURCE, 2)
    assert third.response.envs["ASCEND_VISIBLE_DEVICES"] == "4,5"
    assert cluster.annotations("first")["huawei.com/AscendReal"] == "Ascend910-0,Ascend910-1"


def admit(cluster: Cluster, pod: str, errors: list[Exception]) -> None:
    try:
        cluster.kubelet.allocate(pod, "main", RESOURCE, 1)
    except KubeletError as failed:
        errors.append(failed)


def test_a_hundred_pods_pass_through_one_node_without_a_chip_given_twice(cluster: Cluster) -> None:
    chips = [0, 1, 2, 3, 4, 5, 6]
    for wave in range(15):
        names = []
        for i, chip in enumerate(chips[: 7 if wave < 14 else 2]):
            name = f"p{wave}-{i}"
            cluster.bind(name, f"Ascend910-{chip}", str(1000 * wave + i))
            names.append(name)
        errors: list[Exception] = []
        threads = [threading.Thread(target=admit, args=(cluster, f"ns/{n}", errors)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        real = [cluster.annotations(n)["huawei.com/AscendReal"] for n in names]
        assert len(set(real)) == len(real), "no chip twice at once"
        for name in names:  # the wave finishes: pods succeed, the kubelet frees their IDs
            pod = cluster.api.get_pod("ns", name)
            pod["status"]["phase"] = "Succeeded"
            cluster.api.put("Pod", pod)
            cluster.kubelet.release(f"ns/{name}")
    assert sum(1 for a in cluster.api.list_pods(NODE)[0]) == 100


def test_a_stale_holder_in_the_cache_is_reread_before_a_chip_is_refused() -> None:
    api = MemoryCluster()
    node = NodeChips("Ascend910", "module910x8", tuple(Chip(i, i) for i in range(8)))
    cache = PodCache(api, NODE)  # resynced by hand, never watching: stale by construction
    allocator = ChipHandshake(api, cache, lambda: "", wait_for_pod=0)
    api.put(
        "Pod",
        pod_object(
            "ns",
            "first",
            NODE,
            1,
            annotations={"huawei.com/Ascend910": "Ascend910-2", "predicate-time": "1"},
        ),
    )
    cache.resync()
    assert [c.id for c in allocator.give_chips([node.chips[0]], node)] == [2]
    finished = api.get_pod("ns", "first")
    finished["status"]["phase"] = "Succeeded"
    api.put("Pod", finished)  # the cache still shows it running
    api.put(
        "Pod",
        pod_object(
            "ns",
            "second",
            NODE,
            1,
            annotations={"huawei.com/Ascend910": "Ascend910-2", "predicate-time": "2"},
        ),
    )
    cache.apply(api.get_pod("ns", "second"))
    assert [c.id for c in allocator.give_chips([node.chips[5]], node)] == [2]


def test_an_agent_started_while_the_api_server_is_away_learns_its_address_later() -> None:
    # The rank table's server id is the node's InternalIP: an agent that could not read it
    # at start asks again, rather than writing rank tables without it for its whole life.
    api = MemoryCluster()
    address_of_node = {"type": "InternalIP", "address": "192.168.10.11"}
    api.put("Node", {"metadata": {"name": NODE}, "status": {"addresses": [address_of_node]}})
    api.reachable = False
    address = NodeAddress(api, NODE)
    assert address() == ""
    api.reachable = True
    assert address() == "192.168.10.11"
