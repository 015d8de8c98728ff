"""The agent as a device plugin: Allocate latency, fault and restart reaction, memory.

Run: ``.venv/bin/python -m benchmarks.agent_plugin``. The agent runs as its own process
(``python -m agent --driver fake --kube off``) against the in-process kubelet simulator over
real unix sockets. Targets (issue 3): Allocate p99 ≤ 5 ms, fault-to-kubelet ≤ 1 s,
re-registration ≤ 1 s, RSS ≤ 80 MB. Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import psutil

from deviceplugin_api.v1beta1 import api_pb2 as dp
from deviceplugin_api.v1beta1 import api_pb2_grpc as dp_grpc
from simulation.kubelet import KubeletSimulator

RESOURCE = "huawei.com/Ascend910"


def state(unhealthy: int | None = None) -> str:
    chips = "".join(
        f"  - {{id: {i}, health: {'Unhealthy' if i == unhealthy else 'Healthy'}}}\n"
        for i in range(8)
    )
    return f"product: module910x8\nchips:\n{chips}"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def write(path: Path, text: str) -> None:
    partial = path.with_suffix(".tmp")
    partial.write_text(text)
    partial.replace(path)


def allocate_latency(plugins: Path, calls: int, memory_calls: int, pid: int) -> None:
    rss_start = psutil.Process(pid).memory_info().rss / 2**20
    channel = grpc.insecure_channel(f"unix://{plugins / 'Ascend910.sock'}")
    stub = dp_grpc.DevicePluginStub(channel)
    timings = []
    for i in range(max(calls, memory_calls)):
        request = dp.AllocateRequest(
            container_requests=[dp.ContainerAllocateRequest(devices_ids=[f"Ascend910-{i % 8}"])]
        )
        start = time.perf_counter()
        stub.Allocate(request)
        if i < calls:
            timings.append((time.perf_counter() - start) * 1e3)
    channel.close()
    rss_after = psutil.Process(pid).memory_info().rss / 2**20
    print(
        f"Allocate over {calls} calls: p50 {percentile(timings, 50):.2f} ms, "
        f"p99 {percentile(timings, 99):.2f} ms"
    )
    print(
        f"agent RSS: {rss_start:.1f} MiB after start, {rss_after:.1f} MiB after "
        f"{max(calls, memory_calls)} Allocate calls"
    )


def served_rss(root: Path) -> None:
    """RSS after start of an agent that also serves /metrics, /healthz and /readyz, as the
    DaemonSet runs it (its own kubelet, so the main run is not disturbed)."""
    plugins, state_file = root / "served-plugins", root / "served-state.yaml"
    state_file.write_text(state())
    kubelet = KubeletSimulator(plugins)
    kubelet.start()
    command = [sys.executable, "-m", "agent", "--plugin-dir", str(plugins), "--driver", "fake"]
    command += ["--fake-state", str(state_file), "--ascend-runtime", "true"]
    command += ["--log-level", "WARNING", "--metrics-listen", "127.0.0.1:0"]
    process = subprocess.Popen(command)
    try:
        if not kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 8, timeout=30):
            raise SystemExit("the agent serving metrics did not register")
        rss = psutil.Process(process.pid).memory_info().rss / 2**20
        print(f"agent RSS with its metrics endpoint (as deployed): {rss:.1f} MiB after start")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        kubelet.close()


def fault_reaction(kubelet: KubeletSimulator, state_file: Path, repeats: int) -> None:
    faults = []
    for i in range(repeats):
        device = f"Ascend910-{i % 8}"

        def unhealthy(device: str = device) -> bool:
            return kubelet.devices(RESOURCE).get(device) == "Unhealthy"

        start = time.perf_counter()
        write(state_file, state(unhealthy=i % 8))
        kubelet.wait_for(unhealthy)
        faults.append((time.perf_counter() - start) * 1e3)
        write(state_file, state())
        kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 8)
    print(
        f"fault written -> Unhealthy at the kubelet ({repeats}x): "
        f"p50 {statistics.median(faults):.1f} ms, max {max(faults):.1f} ms"
    )


def restart_reaction(kubelet: KubeletSimulator, repeats: int) -> None:
    """From the new kubelet.sock being served to the agent registered again (the agent's
    part), and the whole restart including the simulator's own shutdown."""
    agent_part, whole = [], []
    for _ in range(repeats):
        before = len(kubelet.registrations)

        def registered(count: int = before) -> bool:
            return len(kubelet.registrations) > count

        began = time.perf_counter()
        kubelet.stop()
        served = time.perf_counter()
        kubelet.start()  # wipes every socket, serves a new kubelet.sock
        kubelet.wait_for(registered, timeout=10)
        done = time.perf_counter()
        agent_part.append((done - served) * 1e3)
        whole.append((done - began) * 1e3)
    print(
        f"new kubelet.sock -> registered again ({repeats}x): "
        f"p50 {statistics.median(agent_part):.1f} ms, max {max(agent_part):.1f} ms "
        f"(whole simulated restart p50 {statistics.median(whole):.0f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--memory-calls", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench", dir="/tmp"))
    plugins, state_file = root / "plugins", root / "state.yaml"
    state_file.write_text(state())
    kubelet = KubeletSimulator(plugins)
    kubelet.start()
    command = [sys.executable, "-m", "agent", "--plugin-dir", str(plugins), "--driver", "fake"]
    command += [
        "--fake-state",
        str(state_file),
        "--ascend-runtime",
        "true",
        "--log-level",
        "WARNING",
    ]
    process = subprocess.Popen(command)
    try:
        if not kubelet.wait_for(lambda: kubelet.allocatable(RESOURCE) == 8, timeout=30):
            raise SystemExit("the agent did not register")
        allocate_latency(plugins, args.calls, args.memory_calls, process.pid)
        fault_reaction(kubelet, state_file, args.repeats)
        restart_reaction(kubelet, args.repeats)
        served_rss(root)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
        kubelet.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
