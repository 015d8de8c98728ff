"""The agent as a kubelet device plugin: real gRPC over unix sockets, driven by the simulator."""

from __future__ import annotations

import stat
import threading
from concurrent import futures
from pathlib import Path
from typing import cast

import grpc
import pytest

from agent.allocation.kubelet_requests import KubeletChoice
from agent.device_plugin import DevicePlugin
from agent.plugin_server import DevicePluginService
from agent.resources import plan
from chip_drivers.fake import FakeDriver
from chip_topology.products import MODULE_910X8
from deviceplugin_api.v1beta1 import api_pb2 as dp
from deviceplugin_api.v1beta1 import api_pb2_grpc as dp_grpc
from simulation.cluster import state_file, wait_for
from simulation.kubelet import KubeletSimulator
from tests.integration.conftest import RESOURCE, Node


def plugin_stub(node: Node) -> tuple[grpc.Channel, dp_grpc.DevicePluginStub]:
    channel = grpc.insecure_channel(f"unix://{node.dir / 'Ascend910.sock'}")
    return channel, dp_grpc.DevicePluginStub(channel)


def test_the_agent_registers_its_resource_and_lists_every_chip(node: Node) -> None:
    assert node.kubelet.registrations == [RESOURCE]
    assert node.kubelet.devices(RESOURCE) == {f"Ascend910-{i}": "Healthy" for i in range(8)}
    endpoint = node.kubelet.endpoint(RESOURCE)
    assert endpoint is not None and endpoint.options.get_preferred_allocation_available
    assert not endpoint.options.pre_start_required
    mode = (node.dir / "Ascend910.sock").stat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600


def test_a_fault_written_to_the_state_file_reaches_the_kubelet_and_so_does_recovery(
    node: Node,
) -> None:
    node.write_state(state_file(unhealthy=(3,)))
    assert node.kubelet.wait_for(
        lambda: node.kubelet.devices(RESOURCE)["Ascend910-3"] == "Unhealthy"
    )
    assert node.kubelet.allocatable(RESOURCE) == 7
    node.write_state(state_file())
    assert node.kubelet.wait_for(lambda: node.kubelet.allocatable(RESOURCE) == 8)


def test_allocate_with_the_ascend_runtime_answers_with_physical_ids_in_the_environment(
    node: Node,
) -> None:
    allocation = node.kubelet.allocate("default/pod-a", "main", RESOURCE, 2)
    ids = [int(d.rsplit("-", 1)[1]) for d in allocation.device_ids]
    envs = dict(allocation.response.envs)
    assert envs == {"ASCEND_VISIBLE_DEVICES": ",".join(map(str, ids)), "ASCEND_RUNTIME_OPTIONS": ""}
    assert not allocation.response.devices and not allocation.response.mounts


def test_allocate_without_the_runtime_answers_with_device_nodes(node_without_runtime: Node) -> None:
    allocation = node_without_runtime.kubelet.allocate("default/pod-a", "main", RESOURCE, 1)
    paths = [d.container_path for d in allocation.response.devices]
    chip = allocation.device_ids[0].rsplit("-", 1)[1]
    assert paths[0] == "/dev/davinci_manager"
    assert paths[-1] == f"/dev/davinci{chip}"
    assert all(d.permissions == "rw" for d in allocation.response.devices)
    assert not allocation.response.envs


def test_containers_of_up_to_four_chips_get_one_ring_through_the_preferred_allocation(
    node: Node,
) -> None:
    for i, size in enumerate([1, 2, 1, 2, 2]):
        allocation = node.kubelet.allocate(f"default/pod-{i}", "main", RESOURCE, size)
        chips = [int(d.rsplit("-", 1)[1]) for d in allocation.device_ids]
        assert len({MODULE_910X8.group_of(c) for c in chips}) == 1, allocation.device_ids
    # 1 + 2 + 1 + 2 + 2 = 8: the rings were packed so that every container fit in one ring.
    assert node.kubelet.allocatable(RESOURCE) == 8


def test_a_two_chip_container_takes_the_ring_with_exactly_two_free(node: Node) -> None:
    node.kubelet.allocate("default/one", "main", RESOURCE, 1)  # ring 0 now has 3 free
    node.kubelet.allocate("default/two", "main", RESOURCE, 2)  # ring 0 has 3 → ring 1 has 4
    allocation = node.kubelet.allocate("default/three", "main", RESOURCE, 2)
    chips = sorted(int(d.rsplit("-", 1)[1]) for d in allocation.device_ids)
    assert {MODULE_910X8.group_of(c) for c in chips} == {1}, "the ring with exactly 2 free"


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([], "no container requests"),
        ([["Ascend910-9"]], "unknown device id 'Ascend910-9'"),
        ([["Ascend910-1", "Ascend910-1"]], "appears twice"),
        ([["Ascend910-" + "1" * 60]], "longer than 50"),
        ([[]], "container request 0: no device ids"),
    ],
)
def test_a_bad_allocate_request_is_refused_with_a_clear_error(
    node: Node, ids: list[list[str]], message: str
) -> None:
    channel, stub = plugin_stub(node)
    with channel, pytest.raises(grpc.RpcError) as raised:
        stub.Allocate(
            dp.AllocateRequest(
                container_requests=[dp.ContainerAllocateRequest(devices_ids=c) for c in ids]
            )
        )
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (raised.value.details() or "")


def test_a_bad_preferred_allocation_request_is_refused(node: Node) -> None:
    channel, stub = plugin_stub(node)
    request = dp.PreferredAllocationRequest(
        container_requests=[
            dp.ContainerPreferredAllocationRequest(
                available_deviceIDs=["Ascend910-0"], allocation_size=2
            )
        ]
    )
    with channel, pytest.raises(grpc.RpcError) as raised:
        stub.GetPreferredAllocation(request)
    assert "allocation_size 2 with 1 available" in (raised.value.details() or "")


def test_twenty_kubelet_restarts_in_a_row_each_end_in_a_new_registration(node: Node) -> None:
    for restart in range(1, 21):
        node.kubelet.restart()

        def registered_again(expected: int = restart + 1) -> bool:
            registered = len(node.kubelet.registrations) == expected
            return registered and node.kubelet.allocatable(RESOURCE) == 8

        assert node.kubelet.wait_for(registered_again), (
            f"no re-registration after restart {restart}"
        )
    assert (node.dir / "Ascend910.sock").exists()


def test_a_closed_list_and_watch_stream_is_noticed_and_the_agent_registers_when_the_kubelet_is_back(
    node: Node,
) -> None:
    before = node.agent.registrations
    node.kubelet.stop()  # streams break; kubelet.sock stays until a new kubelet starts
    # The agent's side notices (no kubelet-side change wakes the kubelet's own wait): poll. Under
    # load its retry may reach the stopping kubelet's registration service before it is gone,
    # and register again between two polls: that is noticing too.
    assert wait_for(
        lambda: not node.agent.wait_registered(0) or node.agent.registrations > before,
        timeout=30,
    ), "the agent did not notice the kubelet's streams closing"
    node.kubelet.start()
    assert node.agent.wait_registered(30), "the agent did not register with the new kubelet"
    assert node.kubelet.wait_for(lambda: node.kubelet.allocatable(RESOURCE) == 8), (
        f"the new kubelet has {node.kubelet.allocatable(RESOURCE)} chips allocatable, "
        f"{node.kubelet.registrations} registrations; the agent registered "
        f"{node.agent.registrations - before} more times"
    )


class _ActiveContext:
    def is_active(self) -> bool:
        return True


def test_a_stream_dropped_right_after_its_first_list_is_noticed(node: Node) -> None:
    # What grpc does when the kubelet left while the first list was on its way: it stops
    # iterating and drops the generator there. Under load the real race lost this (CI).
    assert node.agent.state is not None
    closed = threading.Event()
    devices = plan(node.agent.state.node, chips=KubeletChoice(), ascend_runtime=True)[0]
    service = DevicePluginService(node.agent.state, devices, closed.set)
    stream = service.ListAndWatch(dp.Empty(), cast(grpc.ServicerContext, _ActiveContext()))
    assert len(next(stream).devices) == 8
    stream.close()
    assert closed.is_set(), "a stream closed at its first list went unnoticed"


def test_an_agent_restart_while_the_kubelet_stays_registers_again(node: Node) -> None:
    node.agent.stop()
    assert not (node.dir / "Ascend910.sock").exists(), "a clean stop removes our socket"
    assert node.kubelet.wait_for(lambda: node.kubelet.allocatable(RESOURCE) == 0)
    node.new_agent()
    assert node.agent.wait_registered(30)
    assert node.kubelet.wait_for(lambda: node.kubelet.allocatable(RESOURCE) == 8)
    assert node.kubelet.registrations == [RESOURCE, RESOURCE]


def test_an_agent_started_before_the_kubelet_registers_once_it_appears(short_dir: Path) -> None:
    root = short_dir
    (root / "state.yaml").write_text(state_file())
    agent = DevicePlugin(FakeDriver(root / "state.yaml"), root / "plugins", ascend_runtime=True)
    agent.start()
    kubelet = KubeletSimulator(root / "plugins")
    try:
        assert not agent.wait_registered(0.3)
        kubelet.start()
        assert agent.wait_registered(30)
    finally:
        agent.stop()
        kubelet.close()


def test_concurrent_allocate_calls_each_get_their_own_answer(node: Node) -> None:
    channel, stub = plugin_stub(node)
    answers: dict[int, str] = {}
    errors: list[grpc.RpcError] = []

    def call(i: int) -> None:
        try:
            chip = f"Ascend910-{i % 8}"
            response = stub.Allocate(
                dp.AllocateRequest(
                    container_requests=[dp.ContainerAllocateRequest(devices_ids=[chip])]
                )
            )
            answers[i] = response.container_responses[0].envs["ASCEND_VISIBLE_DEVICES"]
        except grpc.RpcError as failed:
            errors.append(failed)

    with channel:
        threads = [threading.Thread(target=call, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert answers == {i: str(i % 8) for i in range(64)}


class RecordingRegistration(dp_grpc.RegistrationServicer):
    """A kubelet that records registrations and never dials back (so no stream exists)."""

    def __init__(self) -> None:
        self.requests: list[dp.RegisterRequest] = []
        self.arrived = threading.Semaphore(0)

    def Register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:  # noqa: N802
        self.requests.append(request)
        self.arrived.release()
        return dp.Empty()


def serve_registration(directory: Path, servicer: RecordingRegistration) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    dp_grpc.add_RegistrationServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
    server.start()
    return server


def test_a_new_kubelet_socket_alone_triggers_a_new_registration(short_dir: Path) -> None:
    plugins = short_dir / "plugins"
    plugins.mkdir()
    (short_dir / "state.yaml").write_text(state_file())
    kubelet = RecordingRegistration()
    server = serve_registration(plugins, kubelet)
    agent = DevicePlugin(FakeDriver(short_dir / "state.yaml"), plugins, ascend_runtime=True)
    agent.start()
    try:
        assert kubelet.arrived.acquire(timeout=5)
        request = kubelet.requests[0]
        assert (request.version, request.endpoint, request.resource_name) == (
            "v1beta1",
            "Ascend910.sock",
            RESOURCE,
        )
        server.stop(grace=None).wait()
        (plugins / "kubelet.sock").unlink(missing_ok=True)
        server = serve_registration(plugins, kubelet)
        assert kubelet.arrived.acquire(timeout=5), "the new kubelet.sock was not noticed"
    finally:
        agent.stop()
        server.stop(grace=None).wait()
