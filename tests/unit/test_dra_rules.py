"""The DRA driver's pure rules: the slice it publishes, what a claim's allocation gives it,
its CDI specs and its record of prepared claims."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chip_drivers.chips import Chip, NodeChips
from chip_topology.products import MODULE_910X8
from dra_driver.cdi import CdiWriter, HostPaths
from dra_driver.checkpoint import Checkpoint, Prepared
from dra_driver.claims import ClaimRef, ClaimRefused, Grant, granted
from dra_driver.slices import desired_slice, dropped_fields, ring_free

DRIVER = "npu.ascend.example.com"
REF = ClaimRef("train", "job-0-npus", "uid-1")


def node(unhealthy: frozenset[int] = frozenset(), super_pod: int | None = None) -> NodeChips:
    chips = tuple(Chip(i, i, healthy=i not in unhealthy) for i in range(8))
    return NodeChips("Ascend910", "module910x8", chips, super_pod_id=super_pod, server_index=3)


def attributes(published: Any, device: str) -> dict[str, Any]:
    (found,) = [d for d in published["spec"]["devices"] if d["name"] == device]
    return {k: next(iter(v.values())) for k, v in found["attributes"].items()}


def test_a_slice_lists_every_chip_in_ring_order_with_its_ring_and_health() -> None:
    chips = node(frozenset({5}), super_pod=12)
    published = desired_slice(DRIVER, "node-a", "uid-a", chips, tor_ip="10.0.1.254")
    spec = published["spec"]
    assert spec["nodeName"] == "node-a" and spec["pool"]["name"] == "node-a"
    assert [d["name"] for d in spec["devices"]] == [f"npu-{i}" for i in range(8)]
    assert attributes(published, "npu-5") == {
        "model": "Ascend910",
        "topology": "module910x8",
        "acceleratorType": "module",
        "physicalID": 5,
        "logicID": 5,
        "hccsRing": 1,
        "healthy": False,
        "superPodID": 12,
        "serverIndex": 3,
        "torIP": "10.0.1.254",
        "group": 1,
        "npu.huawei.com/deviceType": "Ascend910",
        "npu.huawei.com/physicId": 5,
    }
    assert attributes(published, "npu-2")["hccsRing"] == 0
    owner = published["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Node", "node-a", "uid-a")


def test_an_a3_chip_is_published_with_its_die_and_a_950_npu_with_its_model() -> None:
    a3 = NodeChips("Ascend910", "module910a3x16", tuple(Chip(i, i) for i in range(16)), die_size=2)
    published = desired_slice(DRIVER, "a3-node", "uid", a3)
    assert len(published["spec"]["devices"]) == 16
    assert [attributes(published, f"npu-{i}")["die"] for i in (0, 1, 2, 7, 14, 15)] == [
        0,
        0,
        1,
        3,
        7,
        7,
    ]
    assert attributes(published, "npu-9")["physicalID"] == 9
    # Chips of other servers are not in dies: no attribute a claim could match on.
    assert "die" not in attributes(desired_slice(DRIVER, "n", "u", node()), "npu-1")
    npu = NodeChips("npu", None, tuple(Chip(i, i) for i in range(8)))
    found = attributes(desired_slice(DRIVER, "a5", "u", npu), "npu-7")
    assert (found["model"], found["physicalID"], "die" in found) == ("npu", 7, False)


def test_ring_free_counts_the_healthy_chips_of_each_ring_no_claim_holds() -> None:
    assert ring_free(node(frozenset({5})), frozenset({0, 1})) == {0: 2, 1: 3}
    published = desired_slice(DRIVER, "n", "u", node(), free={0: 2, 1: 4})
    assert attributes(published, "npu-3")["ringFree"] == 2
    assert attributes(published, "npu-4")["ringFree"] == 4


def test_fields_the_api_server_dropped_are_named() -> None:
    sent = {"devices": [{"name": "npu-0", "taints": [{"key": "k"}], "attributes": {"a": 1}}]}
    stored = {"devices": [{"name": "npu-0", "attributes": {"a": 1}}]}
    assert dropped_fields(sent, stored) == ["spec.devices[0].taints"]
    assert dropped_fields(sent, sent) == []


def allocated(
    *devices: str, request: str = "npus", driver: str = DRIVER, pool: str = "node-a"
) -> Any:
    results = [{"request": request, "driver": driver, "pool": pool, "device": d} for d in devices]
    return {
        "metadata": {"uid": "uid-1"},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def grant(claim: Any) -> tuple[Grant, ...]:
    return granted(
        claim, REF, driver=DRIVER, node="node-a", chips=set(range(8)), product=MODULE_910X8
    )


def test_an_allocation_on_one_ring_gives_its_chips_with_the_base_request_name() -> None:
    grants = grant(allocated("npu-4", "npu-5", request="npus/fit2"))
    assert [(g.request, g.chip) for g in grants] == [("npus", 4), ("npus", 5)]


def test_another_drivers_results_are_left_to_it() -> None:
    claim = allocated("npu-0")
    claim["status"]["allocation"]["devices"]["results"].append(
        {"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"}
    )
    assert [g.chip for g in grant(claim)] == [0]


@pytest.mark.parametrize(
    ("claim", "why"),
    [
        ({**allocated("npu-0"), "metadata": {"uid": "uid-2"}}, "got replaced"),
        ({"metadata": {"uid": "uid-1"}, "status": {}}, "is not allocated"),
        (allocated("npu-0", pool="node-b"), "not node-a's"),
        (allocated("npu-9"), "is not a chip of node-a"),
        (allocated("gpu-0"), "is not a chip of node-a"),
        (allocated("npu-3", "npu-4"), r"spans HCCS rings \[0, 1\]"),
        (allocated("npu-0", "npu-1", "npu-2"), "has 3 chips"),
        (allocated("npu-0", "npu-0"), "allocated twice"),
    ],
)
def test_a_claim_that_breaks_a_rule_is_refused_naming_it(claim: Any, why: str) -> None:
    with pytest.raises(ClaimRefused, match=why):
        grant(claim)


def test_the_whole_node_spans_both_rings() -> None:
    assert len(grant(allocated(*(f"npu-{i}" for i in range(8))))) == 8


GRANTS = (Grant("npus", "node-a", "npu-4", 4), Grant("npus", "node-a", "npu-5", 5))


def test_a_device_node_spec_gives_each_chip_and_the_managers_the_host_has(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "hisi_hdc").touch()
    cdi = CdiWriter(tmp_path / "cdi", DRIVER, ascend_runtime=False, host=HostPaths.scan(tmp_path))
    ids = cdi.write("uid-1", GRANTS)
    assert ids == [
        "k8s.npu.ascend.example.com/npu=uid-1-npu-4",
        "k8s.npu.ascend.example.com/npu=uid-1-npu-5",
    ]
    spec = json.loads((tmp_path / "cdi" / "k8s.npu.ascend.example.com-npu_uid-1.json").read_text())
    assert spec["cdiVersion"] == "0.5.0" and spec["kind"] == "k8s.npu.ascend.example.com/npu"
    assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == [
        "/dev/davinci_manager",
        "/dev/hisi_hdc",
    ]
    assert spec["devices"][1]["containerEdits"]["deviceNodes"][0]["path"] == "/dev/davinci5"
    assert cdi.claims_with_specs() == {"uid-1"}
    cdi.remove("uid-1")
    assert cdi.claims_with_specs() == set()


def test_an_ascend_runtime_spec_gives_the_environment_only(tmp_path: Path) -> None:
    cdi = CdiWriter(tmp_path, DRIVER, ascend_runtime=True)
    spec = cdi.spec("uid-1", GRANTS)
    assert spec["containerEdits"] == {"env": ["ASCEND_RUNTIME_OPTIONS="]}
    assert [d["containerEdits"] for d in spec["devices"]] == [
        {"env": ["ASCEND_VISIBLE_DEVICES=4,5"]}
    ] * 2


def test_the_record_survives_a_restart_and_an_unreadable_one_is_kept_aside(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.json"
    record = {"uid-1": Prepared(REF, GRANTS)}
    Checkpoint(path).save(record)
    assert Checkpoint(path).load() == record
    path.write_text("{not json")
    assert Checkpoint(path).load() == {}
    assert [p.name.startswith("checkpoint.json.unreadable-") for p in tmp_path.iterdir()] == [True]
