"""The NPU map: what one snapshot costs at 5,000 nodes, and the screenshot in docs/.

Run: ``.venv/bin/python -m benchmarks.npu_map [--nodes 5000]``: the scheduler's state filled
with that many 8-chip nodes (910 and 910B, 40 per ToR, half their chips held by 1- to 8-chip
pods), then the map's read of the view (under the state's lock, what the verbs wait for), the
snapshot, its JSON and its ETag, timed over several builds; and the JSON's size.

``--screenshot docs/img/npu-map.png``: the scheduler service (its watches and HTTP, on the
in-memory API server) over a small representative cluster (two ToRs of 910 servers, a
SuperPoD of 910B servers, held chips, a faulty one, a gang waiting), its page opened in
Debian's chromium (``make browser``) and saved.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Mapping
from pathlib import Path

from playwright.sync_api import sync_playwright

from agent.deviceinfo_publisher import configmap
from contract.annotations import ACCELERATOR_TYPE_LABEL
from contract.chip_names import RESOURCE_NAME
from contract.deviceinfo import DeviceInfo
from contract.tor_topology import parse_topology
from infra.kube.client import KubernetesGateway
from scheduler_core.engine.model import NodeState
from scheduler_core.service.server import SchedulerService
from scheduler_core.service.state.cluster_view import NodeView
from scheduler_core.service.verbs.extender import Extender
from scheduler_core.service.views.npu_map import MapInputs, NpuMap, read_view, snapshot
from simulation.cluster import tor_configmap, wait_for
from simulation.kube_scheduler import ExtenderConfig, HttpExtender
from simulation.loopback import LoopbackApiServer, node_object
from simulation.memory import MemoryCluster, pod_object

PER_TOR = 40
CHROMIUM = "/usr/bin/chromium"
B8 = "module-910b-8"


def _address(i: int) -> str:
    return f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"


def _state(nodes: int) -> tuple[Extender, dict[str, dict[int, str]]]:
    """The extender's state over ``nodes`` nodes, PER_TOR under each ToR, and who holds their
    chips."""
    extender = Extender(KubernetesGateway.for_url("http://127.0.0.1:1"))
    servers = [
        {
            "tor_id": t,
            "tor_ip": f"1.0.{t // 256}.{t % 256}",
            "server": [
                {"server_ip": _address(i), "npu_count": 8, "slice_id": i % PER_TOR}
                for i in range(t * PER_TOR, min(nodes, (t + 1) * PER_TOR))
            ],
        }
        for t in range((nodes + PER_TOR - 1) // PER_TOR)
    ]
    topology = {"version": "1.0", "tor_count": PER_TOR, "server_list": servers}
    extender.state.set_topology(parse_topology(json.dumps(topology)))
    rng = random.Random(36)
    holders: dict[str, dict[int, str]] = {}
    views = {}
    for i in range(nodes):
        name = f"node-{i:05d}"
        held = 0
        while held < 4:  # half the chips, by pods of 1, 2 or 4
            size = min(rng.choice((1, 2, 4)), 4 - held)
            pod = f"ns-{rng.randrange(50)}/job-{i}-{held}"
            holders.setdefault(name, {}).update(dict.fromkeys(range(held, held + size), pod))
            held += size
        product = "module910bx8" if i % 2 else "module910x8"
        unhealthy = frozenset({7}) if i % 50 == 0 else frozenset()
        free = tuple(c for c in range(4, 8) if c not in unhealthy)
        state = NodeState(name, product, free, 8 - len(unhealthy), unhealthy=unhealthy)
        views[name] = NodeView(name, state, address=_address(i), super_pod=i // 960)
    extender.state.update(views=views)
    return extender, holders


def measure(nodes: int, builds: int = 10) -> None:
    """Each build as the service makes it: the holders copied (``ClusterInformers.holders``),
    the view read, the snapshot encoded (the nodes unchanged since the last: from the cache)."""
    extender, holders = _state(nodes)
    latest: list[MapInputs] = []
    npu_map = NpuMap(lambda: latest[-1], max_age=0)
    reads, built, size = [], [], 0
    for _ in range(builds + 1):
        start = time.perf_counter()
        latest.append(read_view(extender.state, {n: dict(c) for n, c in holders.items()}))
        read = time.perf_counter()
        body, _ = npu_map.state()
        built.append(time.perf_counter() - read)
        reads.append(read - start)
        size = len(body)
    tors = sum(len(pod["tors"]) for pod in snapshot(latest[-1])["superpods"])
    print(f"NPU map at {nodes} nodes ({nodes * 8} chips, {tors} ToRs), median of {builds}:")
    rows = (
        ("holders copied, view read (its lock held)", statistics.median(reads)),
        ("snapshot + JSON + ETag, the first", built[0]),
        ("snapshot + JSON + ETag, nodes unchanged", statistics.median(built[1:])),
    )
    for what, seconds in rows:
        print(f"  {what:42} {seconds * 1e3:6.1f} ms")
    print(f"  JSON: {size / 1e6:.2f} MB ({size // nodes} bytes a node)")


def _put_node(
    store: MemoryCluster,
    i: int,
    held: Mapping[int, str],
    unhealthy: frozenset[int] = frozenset(),
    *,
    b8: bool = False,
    super_pod: int | None = None,
) -> None:
    """node-<i> with its DeviceInfo (the chips held by the pods named, bound and running)."""
    node = node_object(i)
    name = node["metadata"]["name"]
    if b8:
        node["metadata"]["labels"][ACCELERATOR_TYPE_LABEL] = B8
    healthy = str(8 - len(unhealthy))
    node["status"]["allocatable"] = {RESOURCE_NAME: healthy}
    store.put("Node", node)
    free = frozenset(range(8)) - set(held) - unhealthy
    info = DeviceInfo(
        free, unhealthy, frozenset(), update_time=int(time.time()), super_pod_id=super_pod
    )
    store.put("ConfigMap", configmap(name, info))
    by_pod: dict[str, list[int]] = {}
    for chip, pod in held.items():
        by_pod.setdefault(pod, []).append(chip)
    for pod, chips in by_pod.items():
        real = ",".join(f"Ascend910-{c}" for c in chips)
        annotations = {"huawei.com/AscendReal": real, "huawei.com/Ascend910": real}
        namespace, pod_name = pod.split("/")
        store.put(
            "Pod",
            pod_object(
                namespace, pod_name, name, len(chips), phase="Running", annotations=annotations
            ),
        )


def screenshot(path: Path) -> None:
    store = MemoryCluster()
    store.put("ConfigMap", tor_configmap(9, 3))
    team = "llm"
    _put_node(store, 0, dict.fromkeys(range(8), f"{team}/pretrain-0"))
    _put_node(store, 1, dict.fromkeys(range(8), f"{team}/pretrain-1"))
    _put_node(store, 2, {0: "vision/resnet-a", 1: "vision/resnet-a", 4: "vision/eval-3"})
    _put_node(store, 3, {0: "nlp/bert-ft", 1: "nlp/bert-ft", 2: "nlp/bert-ft", 3: "nlp/bert-ft"})
    _put_node(store, 4, {6: "nlp/tokenize"}, unhealthy=frozenset({2}))
    _put_node(store, 5, {})
    _put_node(store, 6, dict.fromkeys(range(8), f"{team}/sft-0"), b8=True, super_pod=0)
    _put_node(store, 7, dict.fromkeys(range(4), "search/embed"), b8=True, super_pod=0)
    _put_node(store, 8, {}, b8=True, super_pod=0)
    api = LoopbackApiServer(store)
    api.start()
    gateway = KubernetesGateway.for_url(api.url)
    service = SchedulerService(gateway, Extender(gateway), refresh_period=0.5, npu_map=True)
    url = service.start()
    try:
        # A gang of 4 pods of 8 chips: two exist, so it waits for the rest.
        gang = {"ascend.npu/gang": "rl-rollout"}
        for rank in range(2):
            pod = pod_object(team, f"rollout-{rank}", None, 8, labels=gang)
            pod["metadata"]["annotations"]["ascend.npu/gang-size"] = "4"
            store.put("Pod", pod)
        nodes = store.list_nodes()
        extender = HttpExtender(ExtenderConfig(url))
        state = service.extender.state
        assert wait_for(lambda: state.node_count() == 9), "nodes not seen"
        assert wait_for(lambda: len(state.pods.members.get(f"{team}/rl-rollout", [])) == 2)
        extender.filter(store.get_pod(team, "rollout-0"), nodes)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
            page = browser.new_page(viewport={"width": 1100, "height": 600})
            page.goto(url + "/map")
            page.wait_for_selector("#gang-list li", state="attached")
            page.screenshot(path=str(path), full_page=True)
            browser.close()
    finally:
        service.stop()
        api.stop()
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--screenshot", type=Path, help="write the page's picture here")
    args = parser.parse_args()
    if args.screenshot is not None:
        screenshot(args.screenshot)
        return
    measure(args.nodes)


if __name__ == "__main__":
    main()
