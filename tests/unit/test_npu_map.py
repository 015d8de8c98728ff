"""The NPU map's snapshot: a pure function of the scheduler's view."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import msgspec
import pytest

from contract.tor_topology import parse_topology
from infra import config
from scheduler_core.__main__ import build_parser
from scheduler_core.engine import locality
from scheduler_core.engine.model import NodeState
from scheduler_core.service.state.holds import WaitingGang
from scheduler_core.service.views.npu_map import MapInputs, NodeCache, encode, snapshot

ROOT = Path(__file__).parents[2]
TOPOLOGY = parse_topology(
    '{"version": "1.0", "tor_count": 2, "server_list": ['
    '{"tor_id": 0, "tor_ip": "1.0.0.0", "server": ['
    '{"server_ip": "10.0.0.1", "npu_count": 8, "slice_id": 0}]},'
    '{"tor_id": 1, "tor_ip": "1.0.0.1", "server": ['
    '{"server_ip": "10.0.0.2", "npu_count": 8, "slice_id": 0}]}]}'
)


def inputs() -> MapInputs:
    ring = NodeState("a", "module910x8", (1, 2, 3, 4, 5, 6), 7, unhealthy=frozenset({7}))
    mesh = NodeState("b", "module910bx8", tuple(range(8)), 8)
    duo = NodeState("c", "ascend310p", (0, 1, 2), 4)
    network = locality.Network(
        TOPOLOGY, {"a": "10.0.0.1", "b": "10.0.0.2", "c": "10.9.9.9"}, {"a": 3, "b": 3}
    )
    wait = WaitingGang(100.0, "ns", "module910x8", 8, 2, True, "gang ns/g does not fit yet")
    return MapInputs(
        nodes={n.name: n for n in (mesh, ring, duo)},
        usable={"a": (1, 2, 3, 4, 5), "b": tuple(range(8)), "c": (0, 1, 2)},
        holders={"a": {0: "ns/train"}, "c": {3: "ns/infer"}},
        left_out={"d": "DeviceInfo is 300 s old"},
        network=network,
        waiting={"ns/g": wait},
        now=130.5,
    )


def test_chips_are_drawn_in_their_products_topology_and_state() -> None:
    state = snapshot(inputs())
    pods = {p["id"]: p for p in state["superpods"]}
    assert list(pods) == [3, None], "SuperPoDs by id, the nodes in none last"
    tors = {t["id"]: [n["name"] for n in t["nodes"]] for t in pods[3]["tors"]}
    assert tors == {0: ["a"], 1: ["b"]}
    (ring,) = pods[3]["tors"][0]["nodes"]
    assert ring["layout"] == "rings"
    assert ring["groups"] == [
        [[0, "held", "ns/train"], [1, "free", ""], [2, "free", ""], [3, "free", ""]],
        # 6 is free in the node's list but the session holds it (assumed): held, nobody named.
        [[4, "free", ""], [5, "free", ""], [6, "held", ""], [7, "faulty", ""]],
    ]
    (mesh,) = pods[3]["tors"][1]["nodes"]
    assert mesh["layout"] == "mesh" and [len(g) for g in mesh["groups"]] == [8]
    (cards,) = pods[None]["tors"][0]["nodes"]
    assert pods[None]["tors"][0]["id"] is None, "an address outside the topology: no ToR"
    assert cards["layout"] == "cards"
    assert cards["groups"] == [
        [[0, "free", ""], [1, "free", ""]],
        [[2, "free", ""], [3, "held", "ns/infer"]],
    ], "an inference node: its cards up to the highest chip known, not all 64"


def test_waiting_gangs_and_left_out_nodes_say_why() -> None:
    state = snapshot(inputs())
    assert state["gangs"] == [
        {
            "name": "ns/g",
            "product": "module910x8",
            "npu": 8,
            "missing": 2,
            "waiting_seconds": 30,
            "reason": "gang ns/g does not fit yet",
        }
    ]
    assert state["left_out"] == [{"name": "d", "reason": "DeviceInfo is 300 s old"}]


def test_an_unchanged_view_gives_the_same_snapshot() -> None:
    assert snapshot(inputs()) == snapshot(inputs())


def test_the_encoded_snapshot_reuses_unchanged_nodes_and_equals_the_snapshot() -> None:
    cache: NodeCache = {}
    first = encode(inputs(), cache)
    assert msgspec.json.decode(first) == snapshot(inputs())
    kept = {name: raw for name, (_, raw) in cache.items()}
    changed = dataclasses.replace(inputs(), holders={"a": {0: "ns/other"}, "c": {3: "ns/infer"}})
    again = encode(changed, cache)
    assert msgspec.json.decode(again) == snapshot(changed)
    assert cache["b"][1] is kept["b"] and cache["c"][1] is kept["c"], "unchanged: not encoded"
    assert cache["a"][1] is not kept["a"]
    smaller = dataclasses.replace(changed, nodes={"b": changed.nodes["b"]})
    encode(smaller, cache)
    assert list(cache) == ["b"], "a node gone leaves the cache"


def serve_args(argv: list[str], environ: dict[str, str]) -> argparse.Namespace:
    parser = build_parser()
    tokens = config.arguments(parser.commands["serve"], argv, "ASCEND_SCHEDULER_", environ)
    return parser.parse_args(["serve", *tokens])


def test_the_map_is_off_unless_a_flag_or_the_settings_turn_it_on(tmp_path: Path) -> None:
    assert serve_args([], {}).npu_map is False
    shipped = serve_args(["--config", str(ROOT / "config" / "scheduler.yaml")], {})
    assert shipped.npu_map is False, "the shipped settings keep it off"
    assert serve_args(["--npu-map"], {}).npu_map is True
    settings = tmp_path / "scheduler.yaml"
    settings.write_text("npu-map: true\n")
    assert serve_args(["--config", str(settings)], {}).npu_map is True
    assert serve_args([], {"ASCEND_SCHEDULER_NPU_MAP": "true"}).npu_map is True
    with pytest.raises(config.ConfigError, match="npu-map"):
        serve_args([], {"ASCEND_SCHEDULER_NPU_MAP": "sometimes"})
