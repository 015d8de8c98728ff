"""How long the extender takes to place a multi-node job on the network.

Run: ``.venv/bin/python -m benchmarks.network_locality [--repeats N]``.
Target (issue 6): ≤ 50 ms per decision for a 64-node job on 4,096 nodes under 128 ToRs, and
for a SuperPoD job on 16 SuperPoDs of 48 nodes. A decision is the extender's whole
reservation as kube-scheduler triggers it (filter of the gang's first pod): the chip filter
over every node, the scores, the network choice and the chips of every rank. Prints figures;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from contract.objects import Obj
from contract.pods import PodView, pod_view
from contract.tor_topology import Topology, parse_topology
from scheduler_core.engine import locality
from scheduler_core.engine.model import NodeState
from scheduler_core.engine.tor_share import EXCLUSIVE, SHARED
from scheduler_core.service.state.cluster_view import NodeView, Snapshot
from scheduler_core.service.state.extender_state import DEFAULT_NETWORK
from scheduler_core.service.state.live_view import gang_of
from scheduler_core.service.verbs.extender import Extender
from simulation.memory import MemoryCluster, pod_object

TORS, PER_TOR = 128, 32
SUPER_PODS, PER_SUPER_POD = 16, 48


def node(name: str, busy: bool, product: str = "module910x8", chips: int = 8) -> NodeState:
    return NodeState(name, product, () if busy else tuple(range(chips)), chips)


def tor_cluster(rng: random.Random, busy_share: float) -> tuple[Snapshot, Topology]:
    """128 ToRs of 32 nodes; a node is busy (all chips held) with ``busy_share`` chance,
    and whole ToRs stay free with a tenth of that chance, as a scheduler keeps them."""
    nodes, addresses, servers = [], {}, []
    for t in range(TORS):
        share = busy_share / 10 if t % 4 == 0 else busy_share
        tor_servers = []
        for s in range(PER_TOR):
            name, ip = f"node-{t:03d}-{s:02d}", f"10.{t // 256}.{t % 256}.{s}"
            nodes.append(node(name, rng.random() < share))
            addresses[name] = ip
            tor_servers.append({"server_ip": ip, "npu_count": 8, "slice_id": s})
        servers.append({"tor_id": t, "tor_ip": f"1.0.{t // 256}.{t % 256}", "server": tor_servers})
    topology = parse_topology(json.dumps({"tor_count": PER_TOR, "server_list": servers}))
    return Snapshot(tuple(nodes), {}, addresses), topology


def super_pod_cluster(rng: random.Random, busy_share: float) -> Snapshot:
    nodes, super_pods = [], {}
    for p in range(SUPER_PODS):
        for i in range(PER_SUPER_POD):
            name = f"sp{p:02d}-{i:02d}"
            # an Atlas 900 A3 SuperPoD server: 16 chips
            nodes.append(node(name, rng.random() < busy_share, "superpod910a3x16", 16))
            super_pods[name] = p
    return Snapshot(tuple(nodes), {}, {}, super_pods)


def gang(
    name: str, size: int, labels: dict[str, str], annotations: dict[str, str], chips: int = 8
) -> list[Obj]:
    pods = []
    for r in range(size):
        pod = pod_object("ns", f"{name}-{r}", None, chips)
        pod["metadata"]["labels"] = {"ascend.npu/gang": name, **labels}
        pod["metadata"]["annotations"] = {"ascend.npu/gang-size": str(size), **annotations}
        pods.append(pod)
    return pods


def other_jobs(snapshot: Snapshot) -> list[Obj]:
    """Running pods of cross-ToR jobs on every fifth ToR: shared, or exclusive to them
    (what switch affinity 2.0 rebuilds its ToR states from)."""
    pods = []
    for t in range(0, TORS, 5):
        name = f"node-{t:03d}-00"
        pod = pod_object("ns", f"other-{t}", name, 8, phase="Running")
        pod["metadata"]["labels"] = {"ascend.npu/gang": f"other-{t}"}
        pod["metadata"]["annotations"]["isSharedTor"] = str(SHARED if t % 3 else EXCLUSIVE)
        pods.append(pod)
    return pods


def loaded(
    snapshot: Snapshot, pods: list[Obj], topology: Topology | None, settings: locality.Settings
) -> Extender:
    """An extender that has seen the cluster: its nodes, its pods, its gangs, its ToRs."""
    extender = Extender(MemoryCluster(), network=settings)
    views = {
        s.name: NodeView(
            s.name,
            s,
            failed=frozenset(),
            address=snapshot.addresses.get(s.name, ""),
            super_pod=snapshot.super_pods.get(s.name),
        )
        for s in snapshot.nodes
    }
    seen = [pod_view(p) for p in pods]
    gangs: dict[str, list[PodView]] = {}
    for pod in seen:
        if (key := gang_of(pod)) is not None:
            gangs.setdefault(key, []).append(pod)
    extender.state.update(views=views, pods={p.key: p for p in seen}, gangs=gangs)
    extender.state.set_topology(topology)
    extender.state.warm()  # as the service does after its first read
    return extender


def decide(
    snapshot: Snapshot,
    pods: list[Obj],
    topology: Topology | None,
    settings: locality.Settings,
    repeats: int,
) -> tuple[float, float, int]:
    """(median ms, max ms, nodes chosen) of the reservation; a fresh view before each."""
    timings, chosen = [], 0
    names = [n.name for n in snapshot.nodes]
    for _ in range(repeats):
        extender = loaded(snapshot, pods, topology, settings)
        start = time.perf_counter()
        answer = extender.filter({"Pod": pods[0], "NodeNames": names})
        timings.append(time.perf_counter() - start)
        chosen = len(answer.passing)
        if not chosen:
            raise SystemExit(f"not placed: {set(answer.FailedNodes.values())}")
    return statistics.median(timings) * 1e3, max(timings) * 1e3, chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    snapshot, topology = tor_cluster(rng, busy_share=0.3)
    names = [n.name for n in snapshot.nodes]
    print(f"{len(names)} nodes under {TORS} ToRs of {PER_TOR}, ~30 % of nodes busy")
    cases = [
        ("ToR 1.0 large-model, 64 nodes", "1.0", "large-model-schema", 64),
        ("ToR 1.0 normal, 64 nodes", "1.0", "normal-schema", 64),
        ("ToR 2.0 large-model, 64 nodes", "2.0", "large-model-schema", 64),
        ("ToR 1.0 large-model, 512 nodes", "1.0", "large-model-schema", 512),
    ]
    for title, version, schema, size in cases:
        settings = locality.Settings(version, 2)
        pods = gang("train", size, {"tor-affinity": schema}, {}) + other_jobs(snapshot)
        median, worst, chosen = decide(snapshot, pods, topology, settings, args.repeats)
        print(f"  {title}: median {median:.1f} ms, max {worst:.1f} ms ({chosen} nodes)")

    sp_snapshot = super_pod_cluster(rng, busy_share=0.3)
    sp_names = [n.name for n in sp_snapshot.nodes]
    print(f"{len(sp_names)} nodes in {SUPER_PODS} SuperPoDs of {PER_SUPER_POD}, ~30 % busy")
    for size, block in ((32, 8), (64, 16)):
        pods = gang("sp", size, {}, {"sp-block": str(block * 16)}, chips=16)
        median, worst, chosen = decide(sp_snapshot, pods, None, DEFAULT_NETWORK, args.repeats)
        print(
            f"  SuperPoD job of {size} nodes in {block}-node blocks: "
            f"median {median:.1f} ms, max {worst:.1f} ms ({chosen} nodes)"
        )


if __name__ == "__main__":
    main()
