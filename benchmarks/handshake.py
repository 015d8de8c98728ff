"""The Allocate handshake against an API server over HTTP.

Run: ``.venv/bin/python -m benchmarks.handshake [--pods 300]``. One node: the agent with
the annotation allocator and the official kubernetes client, talking HTTP to the loopback
API server; pods are bound one after another and admitted through Allocate. Targets
(issue 4): Allocate p99 ≤ 20 ms; annotations visible ≤ 100 ms after Allocate starts.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import grpc

from agent.allocation.handshake import ChipHandshake
from agent.device_plugin import DevicePlugin
from agent.pod_cache import PodCache
from chip_drivers.fake import FakeDriver
from deviceplugin_api.v1beta1 import api_pb2 as dp
from deviceplugin_api.v1beta1 import api_pb2_grpc as dp_grpc
from infra.kube.client import KubernetesGateway
from simulation.kubelet import KubeletSimulator
from simulation.loopback import LoopbackApiServer
from simulation.memory import MemoryCluster, pod_object

NODE = "bench-node"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hs", dir="/tmp"))
    store = MemoryCluster()
    server = LoopbackApiServer(store)
    gateway = KubernetesGateway.for_url(server.start())
    reader = KubernetesGateway.for_url(server.url)  # a second client, as another reader
    (root / "state.yaml").write_text("chips:\n" + "".join(f"  - {{id: {i}}}\n" for i in range(8)))
    kubelet = KubeletSimulator(root / "plugins")
    kubelet.start()
    cache = PodCache(gateway, NODE)
    cache.start()
    agent = DevicePlugin(
        FakeDriver(root / "state.yaml"),
        root / "plugins",
        True,
        ChipHandshake(gateway, cache, lambda: "192.168.0.1"),
    )
    agent.start()
    allocate, visible = [], []
    try:
        agent.wait_registered(10)
        channel = grpc.insecure_channel(f"unix://{root / 'plugins' / 'Ascend910.sock'}")
        stub = dp_grpc.DevicePluginStub(channel)
        for i in range(args.pods):
            chip = f"Ascend910-{i % 8}"
            name = f"pod-{i}"
            store.put(
                "Pod",
                pod_object(
                    "ns",
                    name,
                    NODE,
                    1,
                    annotations={"huawei.com/Ascend910": chip, "predicate-time": str(i + 1)},
                ),
            )
            while not any(p.name == name for p in cache.pods()):
                time.sleep(0.001)  # the kubelet admits a pod after the watch has shown it
            request = dp.AllocateRequest(
                container_requests=[dp.ContainerAllocateRequest(devices_ids=[chip])]
            )
            start = time.perf_counter()
            stub.Allocate(request)
            allocate.append((time.perf_counter() - start) * 1e3)
            while (
                "huawei.com/AscendReal" not in reader.get_pod("ns", name)["metadata"]["annotations"]
            ):
                time.sleep(0.001)
            visible.append((time.perf_counter() - start) * 1e3)
            done = store.get_pod("ns", name)
            done["status"]["phase"] = "Succeeded"  # frees the chip for the pod after next
            store.put("Pod", done)
        channel.close()
    finally:
        agent.stop()
        cache.stop()
        kubelet.close()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"Allocate with the handshake over HTTP ({args.pods} pods): "
        f"p50 {percentile(allocate, 50):.2f} ms, p99 {percentile(allocate, 99):.2f} ms"
    )
    print(
        f"Allocate start -> AscendReal readable by another client: "
        f"p50 {percentile(visible, 50):.2f} ms, p99 {percentile(visible, 99):.2f} ms"
    )


if __name__ == "__main__":
    main()
