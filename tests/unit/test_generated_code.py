"""The committed gRPC code is what the pinned generator writes from the committed .proto files,
and the wire names are upstream's."""

from __future__ import annotations

from pathlib import Path

from deviceplugin_api.generate import PROTOS, ROOT, generate
from deviceplugin_api.podresources.v1 import api_pb2 as podresources
from deviceplugin_api.v1beta1 import api_pb2 as deviceplugin


def test_the_committed_generated_code_is_not_stale(tmp_path: Path) -> None:
    fresh = generate(tmp_path)
    assert len(fresh) == 4 * len(PROTOS)
    for path in fresh:
        committed = ROOT / path.relative_to(tmp_path)
        assert committed.read_text() == path.read_text(), (
            f"{committed} is stale: run .venv/bin/python -m deviceplugin_api.generate"
        )


def test_device_plugin_services_and_methods_have_upstream_wire_names() -> None:
    services = deviceplugin.DESCRIPTOR.services_by_name
    assert services["Registration"].full_name == "v1beta1.Registration"
    assert [m.name for m in services["DevicePlugin"].methods] == [
        "GetDevicePluginOptions",
        "ListAndWatch",
        "GetPreferredAllocation",
        "Allocate",
        "PreStartContainer",
    ]
    assert services["DevicePlugin"].methods_by_name["ListAndWatch"].server_streaming


def test_device_plugin_field_names_and_numbers_are_upstreams() -> None:
    def fields(message: str) -> dict[str, int]:
        descriptor = deviceplugin.DESCRIPTOR.message_types_by_name[message]
        return {f.name: f.number for f in descriptor.fields}

    assert fields("ContainerPreferredAllocationRequest") == {
        "available_deviceIDs": 1,
        "must_include_deviceIDs": 2,
        "allocation_size": 3,
    }
    assert fields("ContainerAllocateRequest") == {"devices_ids": 1}
    assert fields("Device") == {"ID": 1, "health": 2, "topology": 3}
    assert fields("ContainerAllocateResponse") == {
        "envs": 1,
        "mounts": 2,
        "devices": 3,
        "annotations": 4,
        "cdi_devices": 5,
    }


def test_podresources_service_has_upstream_wire_names() -> None:
    service = podresources.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
    claim = podresources.DESCRIPTOR.message_types_by_name["ClaimResource"]
    assert {f.name: f.number for f in claim.fields}["share_id"] == 5
