"""The rank table annotation ``ascend.kubectl.kubernetes.io/ascend-910-configuration``."""

from __future__ import annotations

from collections.abc import Iterable

from contract.go_json import go_json


def rank_table(pod_name: str, server_id: str, devices: Iterable[tuple[int, str]]) -> str:
    """The pod's chips (physical id, device IP) sorted by id, as Go marshals Huawei's
    ``RankTable`` struct (field order, not sorted keys)."""
    listed = ",".join(
        '{"device_id":' + go_json(str(chip)) + ',"device_ip":' + go_json(ip) + "}"
        for chip, ip in sorted(devices)
    )
    return (
        '{"pod_name":'
        + go_json(pod_name)
        + ',"server_id":'
        + go_json(server_id)
        + ',"devices":['
        + listed
        + "]}"
    )
