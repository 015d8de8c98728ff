"""The vendored DRA protos on the wire: the registration and prepare trace of
``shared/reference/dra.md`` §2.5 (a 2-chip claim), encoded by the generated code and by hand
from the field numbers the upstream protos give, byte for byte; and the gRPC method paths."""

from __future__ import annotations

from deviceplugin_api.dra.v1 import api_pb2 as v1
from deviceplugin_api.dra.v1beta1 import api_pb2 as v1beta1
from deviceplugin_api.dra_health.v1alpha1 import api_pb2 as health
from deviceplugin_api.pluginregistration.v1 import api_pb2 as reg


def text(number: int, value: str) -> bytes:
    """A length-delimited field (wire type 2) of a short string or message."""
    payload = value.encode()
    assert len(payload) < 128, "one-byte lengths only"
    return bytes([number << 3 | 2, len(payload)]) + payload


def message(number: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes([number << 3 | 2, len(body)]) + body


def varint(number: int, value: int) -> bytes:
    assert value < 128
    return bytes([number << 3, value])


DRIVER = "npu.ascend.example.com"
ENDPOINT = "/var/lib/kubelet/plugins/npu.ascend.example.com/dra.sock"
CLAIM = text(1, "train") + text(2, "8c1f") + text(3, "job-0-npus-x7k2q")


def test_get_info_answers_as_the_kubelet_reads_it() -> None:
    info = reg.PluginInfo(
        type="DRAPlugin",
        name=DRIVER,
        endpoint=ENDPOINT,
        supported_versions=["v1.DRAPlugin", "v1beta1.DRAPlugin"],
    )
    expected = (
        text(1, "DRAPlugin")
        + text(2, DRIVER)
        + text(3, ENDPOINT)
        + text(4, "v1.DRAPlugin")
        + text(4, "v1beta1.DRAPlugin")
    )
    assert info.SerializeToString() == expected
    status = reg.RegistrationStatus(plugin_registered=True)
    assert status.SerializeToString() == varint(1, 1)


def test_a_prepare_request_and_its_answer_match_the_upstream_field_numbers() -> None:
    for api in (v1, v1beta1):
        request = api.NodePrepareResourcesRequest(
            claims=[api.Claim(namespace="train", uid="8c1f", name="job-0-npus-x7k2q")]
        )
        assert request.SerializeToString() == message(1, CLAIM)
    answer = v1.NodePrepareResourcesResponse()
    answer.claims["8c1f"].devices.add(
        request_names=["npus"],
        pool_name="node-a",
        device_name="npu-4",
        cdi_device_ids=["k8s.npu.ascend.example.com/npu=8c1f-npu-4"],
    )
    device = (
        text(1, "npus")
        + text(2, "node-a")
        + text(3, "npu-4")
        + text(4, "k8s.npu.ascend.example.com/npu=8c1f-npu-4")
    )
    entry = text(1, "8c1f") + message(2, message(1, device))  # map<string, …>: key 1, value 2
    assert answer.SerializeToString() == message(1, entry)
    shared = v1.Device(pool_name="p", device_name="d", share_id="s")
    assert shared.SerializeToString() == text(2, "p") + text(3, "d") + text(5, "s")


def test_an_unprepare_answer_carries_an_entry_per_claim() -> None:
    answer = v1.NodeUnprepareResourcesResponse()
    answer.claims["8c1f"].error = ""
    assert answer.SerializeToString() == message(1, text(1, "8c1f") + message(2, b""))


def test_a_health_report_matches_the_upstream_field_numbers() -> None:
    report = health.DeviceHealth(
        device=health.DeviceIdentifier(pool_name="node-a", device_name="npu-1"),
        health=health.UNHEALTHY,
        last_updated_time=5,
    )
    identifier = text(1, "node-a") + text(2, "npu-1")
    assert report.SerializeToString() == message(1, identifier) + varint(2, 2) + varint(3, 5)


def test_the_services_have_the_kubelets_method_paths() -> None:
    paths = {
        f"/{s.full_name}/{m.name}"
        for module in (v1, v1beta1, reg, health)
        for s in module.DESCRIPTOR.services_by_name.values()
        for m in s.methods
    }
    assert paths == {
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
        "/v1alpha1.DRAResourceHealth/NodeWatchResources",
    }
