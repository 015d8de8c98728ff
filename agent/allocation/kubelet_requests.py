"""Pure answers to the kubelet: request checks, container responses, preferred chips."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent.allocation.base import InvalidRequest
from chip_drivers.chips import Chip, NodeChips
from chip_drivers.container import ENV_RUNTIME_OPTIONS, ENV_VISIBLE, MANAGER_DEVICES
from chip_topology.products import select_huawei
from chip_topology.routing import product_by_name
from deviceplugin_api.v1beta1 import api_pb2 as dp

# Limits of Huawei's device plugin (``pkg/server/plugin.go checkAllocateRequest``).
MAX_CONTAINER_REQUESTS = 300_000
MAX_DEVICES_PER_CONTAINER = 800
MAX_DEVICE_ID_LENGTH = 50


def check_device_ids(ids: Sequence[str], known: dict[str, Chip], what: str) -> list[Chip]:
    if not ids:
        raise InvalidRequest(f"{what}: no device ids")
    if len(ids) > MAX_DEVICES_PER_CONTAINER:
        raise InvalidRequest(f"{what}: {len(ids)} device ids (at most {MAX_DEVICES_PER_CONTAINER})")
    if len(set(ids)) != len(ids):
        raise InvalidRequest(f"{what}: a device id appears twice in {list(ids)}")
    chips = []
    for device in ids:
        if len(device) > MAX_DEVICE_ID_LENGTH:
            raise InvalidRequest(
                f"{what}: device id {device[:60]!r}… is longer than {MAX_DEVICE_ID_LENGTH}"
            )
        chip = known.get(device)
        if chip is None:
            raise InvalidRequest(f"{what}: unknown device id {device!r}")
        chips.append(chip)
    return chips


def check_allocate_request(request: dp.AllocateRequest, node: NodeChips) -> list[list[Chip]]:
    """The chips named by each container request, or InvalidRequest."""
    if not request.container_requests:
        raise InvalidRequest("allocate request has no container requests")
    if len(request.container_requests) > MAX_CONTAINER_REQUESTS:
        raise InvalidRequest(
            f"allocate request has {len(request.container_requests)} container requests"
        )
    known = node.by_device_id()
    requests = [
        check_device_ids(list(c.devices_ids), known, f"container request {i}")
        for i, c in enumerate(request.container_requests)
    ]
    given: dict[int, int] = {}
    for i, chips in enumerate(requests):
        for chip in chips:
            if chip.id in given:
                raise InvalidRequest(
                    f"container requests {given[chip.id]} and {i} both name "
                    f"{node.device_id(chip)}: a chip goes to one container"
                )
            given[chip.id] = i
    return requests


def container_response(
    chips: Sequence[Chip], ascend_runtime: bool, dev_root: Path = Path("/dev")
) -> dp.ContainerAllocateResponse:
    """With the Ascend container runtime: environment only (the runtime mounts the devices).
    Without it: device nodes, the manager devices first (those present on the host; the
    davinci_manager is always needed)."""
    return device_response([c.id for c in chips], "", "davinci", ascend_runtime, dev_root)


def device_response(
    ids: Sequence[int],
    runtime_options: str,
    host_device: str,
    ascend_runtime: bool,
    dev_root: Path = Path("/dev"),
) -> dp.ContainerAllocateResponse:
    """The answer for devices ``ids``: ``ASCEND_VISIBLE_DEVICES`` and
    ``ASCEND_RUNTIME_OPTIONS`` with the runtime; else the manager devices and each host
    ``<host_device><id>`` as the container's ``/dev/davinci<id>``."""
    response = dp.ContainerAllocateResponse()
    if ascend_runtime:
        response.envs[ENV_VISIBLE] = ",".join(str(i) for i in ids)
        response.envs[ENV_RUNTIME_OPTIONS] = runtime_options
        return response
    add_manager_devices(response, dev_root)
    for i in ids:
        response.devices.add(
            container_path=f"/dev/davinci{i}",
            host_path=str(dev_root / f"{host_device}{i}"),
            permissions="rw",
        )
    return response


def add_manager_devices(response: dp.ContainerAllocateResponse, dev_root: Path) -> None:
    """The manager devices present on the host (the davinci_manager is always needed)."""
    for path in MANAGER_DEVICES:
        host = dev_root / Path(path).name
        if path == MANAGER_DEVICES[0] or host.exists():
            response.devices.add(container_path=path, host_path=str(host), permissions="rw")


def preferred_chips(
    node: NodeChips, available: Sequence[str], must_include: Sequence[str], size: int
) -> list[str]:
    """The HCCS-affine choice for a container of ``size`` chips.

    Inside the product's rings the choice follows Huawei's ring priority (a 2-chip container
    takes a ring with exactly 2 free chips first), so it leaves the least fragmentation and
    never splits a ≤ 4-chip container across rings when one ring can hold it. Chips the
    kubelet must keep (``must_include``) are kept. Without a known topology: the lowest ids.
    """
    known = node.by_device_id()
    chips = [known[d] for d in available if d in known]
    kept = [d for d in must_include if d in known][:size]
    if len(kept) == size:
        return kept
    by_id = {c.id: node.device_id(c) for c in chips}
    free = sorted(c.id for c in chips if by_id[c.id] not in kept)
    if node.product is not None:
        product = product_by_name(node.product)
        kept_ids = [known[d].id for d in kept]
        if kept_ids:
            # Stay in the ring of the chips already chosen when it can take the rest.
            groups = {product.group_of(c) for c in kept_ids}
            same = [c for c in free if product.group_of(c) in groups]
            need = size - len(kept)
            if len(same) >= need:
                return kept + [by_id[c] for c in same[:need]]
        else:
            choice = select_huawei(product, free, size, distributed=False)
            if choice:
                return [by_id[c] for c in choice]
    return kept + [by_id[c] for c in free[: size - len(kept)]]


class KubeletChoice:
    """No Kubernetes API (``--kube off``): the kubelet's IDs are the chips."""

    def give_chips(self, requested: list[Chip], node: NodeChips) -> list[Chip]:
        return requested

    def preferred(
        self, node: NodeChips, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        return preferred_chips(node, available, must_include, size)
