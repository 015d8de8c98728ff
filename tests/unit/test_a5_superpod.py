"""The Atlas 850 / 950 SuperPoD plumbing around the handlers: the nodes' product, the DeviceInfo
``RackID``, a one-pod job's checks, fault restarts."""

from __future__ import annotations

import json

import pytest

from chip_topology.products import SUPERPOD_850X8, SUPERPOD_950X8
from chip_topology.routing import PRODUCTS, policy_network, product_for_job, product_of_node, serves
from contract import deviceinfo
from contract.chip_names import NPU
from contract.deviceinfo import DeviceInfo
from scheduler_core.engine import locality, racks
from scheduler_core.engine.superpod import SuperPodInvalid

POLICY = "huawei.com/schedule_policy"


def test_every_family_network_names_a_row_of_the_engine_table() -> None:
    assert {p.rules.network for p in PRODUCTS.values()} <= locality.NETWORKS.keys()
    assert policy_network("chip8-node8-sp") == SUPERPOD_850X8.rules.network != ""
    assert policy_network("chip8-node8-ra64-sp") == SUPERPOD_950X8.rules.network != ""
    assert policy_network("chip8-node8") == policy_network(None) == ""


def test_an_unlabelled_npu_server_serves_both_super_pod_policies() -> None:
    node = product_of_node(NPU, {"accelerator": "huawei-npu"})
    assert node is SUPERPOD_850X8
    assert product_of_node(NPU, {"accelerator-type": "950-SuperPod-Atlas-8"}) is SUPERPOD_950X8
    for policy, product in (
        ("chip8-node8-sp", SUPERPOD_850X8),
        ("chip8-node8-ra64-sp", SUPERPOD_950X8),
    ):
        routed = product_for_job(NPU, {}, {POLICY: policy}, {})
        assert routed is product and serves(node, routed)


def test_rack_id_is_read_and_written_outside_the_check_code() -> None:
    info = DeviceInfo(
        frozenset(range(8)),
        frozenset(),
        frozenset(),
        update_time=5,
        super_pod_id=1,
        rack_id=3,
        kind=NPU,
    )
    data = deviceinfo.encode(info)
    cache = json.loads(data[deviceinfo.DATA_KEY])
    assert cache["RackID"] == 3 and list(cache)[-1] == "RackID"  # after CheckCode, as omitempty
    back = deviceinfo.decode(data)
    assert (back.rack_id, back.rack, back.super_pod) == (3, 3, 1)
    cache["RackID"] = -1  # the device plugin's DefaultRackID: no rack
    unset = deviceinfo.decode({**data, deviceinfo.DATA_KEY: json.dumps(cache)})
    assert unset.rack is None
    assert "RackID" not in json.loads(
        deviceinfo.encode(DeviceInfo(frozenset(), frozenset(), frozenset()))[deviceinfo.DATA_KEY]
    )


def test_a_one_pod_job_gets_the_policys_checks_and_nodes_with_a_super_pod_and_rack() -> None:
    settings = locality.Settings()
    sample = {POLICY: "chip8-node8-ra64-sp", "sp-block": "8", "ra-block": "8"}
    locality.check_lone_pod(sample, 8, settings)
    with pytest.raises(SuperPodInvalid, match="single super-pod job sp-block annotation"):
        locality.check_lone_pod({**sample, "sp-block": "4"}, 8, settings)
    with pytest.raises(SuperPodInvalid, match="single super-pod job require npu"):
        locality.check_lone_pod({POLICY: "chip8-node8-sp", "sp-block": "16"}, 9, settings)
    network = locality.Network(super_pods={"a": 0, "b": 0}, racks={"a": 2})
    assert locality.off_network(sample, ["a", "b", "c"], network) == {
        "b": "node rack-id is invalid for node=b, id=-1",
        "c": "the super-pod-id of node is invalid for node=c, id=-1",
    }
    assert locality.off_network({POLICY: "chip8-node8-sp"}, ["a", "c"], network) == {
        "c": "node c is not super-pod node or superPodID is not set"
    }


def test_an_850_fault_restart_keeps_its_healthy_block_and_a_950_one_is_placed_afresh() -> None:
    ask = locality.Ask("ns/j", 4, 8, 8, {}, {POLICY: "chip8-node8-sp", "sp-block": "16"})
    network = locality.Network(super_pods={n: 1 for n in ("a", "b", "c", "d", "e", "f")})
    previous = {0: "a", 1: "b", 2: "c", 3: "d"}
    choice = locality.choose(
        ask,
        ["a", "b", "c", "e", "f"],
        network,
        locality.Settings(),
        previous=previous,
        fault_nodes=frozenset({"d"}),
    )
    assert choice.nodes[:3] == ("a", "b", "c") and choice.nodes[3] in ("e", "f")
    racks = {n: i // 2 for i, n in enumerate("abcdef")}
    ra64 = locality.Ask(
        "ns/k", 2, 8, 8, {}, {POLICY: "chip8-node8-ra64-sp", "sp-block": "16", "ra-block": "16"}
    )
    afresh = locality.choose(
        ra64,
        ["a", "c", "e", "f"],
        locality.Network(super_pods=network.super_pods, racks=racks),
        locality.Settings(),
        previous={0: "a", 1: "b"},
        fault_nodes=frozenset({"b"}),
    )
    assert afresh.nodes == ("e", "f")  # ra-block 16: the one rack with two free nodes


def test_a_one_pod_950_job_takes_the_least_idle_node_with_a_rack() -> None:
    # chip8node8ra64sp/score.go selectNodeForStandaloneJob keeps only the least idle of the
    # nodes passing the predicate before its rack strategies: a 1-NPU job goes to the node of
    # 3 free NPUs, not into the smallest rack's first whole node. Found by the differential
    # against Huawei's plugin (benchmarks/differential.py, group "950 SuperPoD").
    network = locality.Network(
        super_pods={"a0": 0, "a1": 0, "b0": 1, "b1": 1, "b2": 1},
        racks={"a0": 0, "a1": 0, "b0": 0, "b1": 0, "b2": 0},
    )
    idle = {"a0": 8, "a1": 8, "b0": 8, "b1": 3, "b2": 8}
    annotations = {POLICY: "chip8-node8-ra64-sp", "sp-block": "1"}
    ask = locality.Ask("ns/one", 1, 8, 1, {}, annotations)
    choice = locality.choose(ask, list(idle), network, locality.Settings(), idle=idle)
    assert choice.nodes == ("b1",)
    # A gang is not narrowed: the one-rack strategy takes the rack of exactly its nodes.
    gang = locality.Ask("ns/two", 2, 8, 8, {}, {POLICY: "chip8-node8-ra64-sp"})
    assert set(locality.choose(gang, list(idle), network, locality.Settings()).nodes) == {
        "a0",
        "a1",
    }


def test_a_super_pod_policy_job_of_one_pod_is_placed_by_its_handler_without_sp_block() -> None:
    # sp-block defaults to the job's NPUs (plugin/job.go setSpBlock), so an 850 or 950 job of
    # one pod without it still goes through the SuperPoD choice, not the scheduler's draw.
    assert locality.picks_lone_node({POLICY: "chip8-node8-ra64-sp"})
    assert locality.picks_lone_node({POLICY: "chip8-node8-sp"})
    assert locality.picks_lone_node({"sp-block": "16"})
    assert not locality.picks_lone_node({POLICY: "chip1-node8"})
    assert not locality.picks_lone_node({})


def test_a_950_rank_goes_back_into_the_rack_of_its_node_when_that_node_is_left_out() -> None:
    # The failed node is no longer offered (its DeviceInfo and the kubelet disagree, or it is
    # down), so the view has no rack for it; its rank still goes back into that rack, as
    # upstream reads the rack from the fault job's own record of its nodes. Found through the
    # real Volcano (testbed/differential/faults.py, force-950-pod-level): the rank waited for
    # the whole-job stage.
    network = locality.Network(
        super_pods={"a1": 0, "b0": 0}, racks={"a1": 0, "b0": 1}, last_places={"a0": (0, 0)}
    )
    ask = locality.Ask("ns/j", 1, 8, 8, {}, {POLICY: "chip8-node8-ra64-sp", "ra-block": "8"})
    refill = locality.Refill(racks.SAME_RACK, (1,), ("a0",))
    choice = locality.choose(
        ask, ["b0", "a1"], network, locality.Settings(), running={"a2": {}}, refill=refill
    )
    assert choice.nodes == ("a1",)
    unknown = locality.Network(super_pods={"a1": 0}, racks={"a1": 0})
    with pytest.raises(locality.Unplaceable, match="rack of a rank it places again is unknown"):
        locality.choose(
            ask, ["a1"], unknown, locality.Settings(), running={"a2": {}}, refill=refill
        )
