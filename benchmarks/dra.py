"""The DRA driver's figures: prepare latency, slice publication after a chip fault, memory.

Run: ``.venv/bin/python -m benchmarks.dra [--claims 300] [--faults 20]``. The driver runs as
a node runs it (``python -m dra_driver serve``, its own process, the fake chip driver, the
official client against the loopback API server); the kubelet's DRA side
(``simulation/kubelet_dra.py``) prepares each claim the scheduler stand-in allocated and
unprepares it when its pod ends. Printed: prepare p50/p99 as the kubelet times its
``NodePrepareResources`` call (claim read back, CDI spec and checkpoint written and flushed),
unprepare p50/p99, the time from a chip's fault in the driver's state file to the API
server holding the slice that says so (p50/p99), and the driver's RSS after start and after
the claims.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from contract.dra import SLICE_KIND
from contract.objects import Obj
from infra.kube.port import Selection
from simulation.cluster import set_health, state_file, wait_for
from simulation.dra_cluster import (
    CLASS_KIND,
    TEMPLATE_KIND,
    DraScheduler,
    deployed,
    dra_node_object,
    driver_command,
    pod_with_claim,
)
from simulation.kubelet_dra import KubeletDra
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster

NODE = "node-00"


def quantiles(values: list[float]) -> str:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return f"p50 {cuts[49] * 1000:.1f} ms, p99 {cuts[98] * 1000:.1f} ms"


def healthy(store: MemoryCluster, chip: int) -> bool | None:
    items = store.list_page(Selection(SLICE_KIND, fields=f"spec.nodeName={NODE}"), 0).items
    if not items:
        return None
    devices: list[Obj] = items[0]["spec"]["devices"]
    (found,) = [d for d in devices if d["name"] == f"npu-{chip}"]
    return bool(found["attributes"]["healthy"]["bool"])


def claims(store: MemoryCluster, kubelet: KubeletDra, count: int) -> tuple[list[float], ...]:
    """Pods of one 2-chip claim each, allocated, prepared, ended and unprepared in turn:
    the kubelet's prepare and unprepare times."""
    scheduler = DraScheduler(store)
    prepares, unprepares = [], []
    for i in range(count):
        name = f"p{i}"
        store.put("Pod", pod_with_claim("default", name, "npu-2-ring"))
        scheduler.cycle()
        pod = store.get_pod("default", name)
        began = time.perf_counter()
        kubelet.prepare(pod)
        prepares.append(time.perf_counter() - began)
        began = time.perf_counter()
        kubelet.unprepare(pod)
        unprepares.append(time.perf_counter() - began)
        store.delete("Pod", "default", name)
        scheduler.release(pod)
    return prepares, unprepares


def published(store: MemoryCluster, chip: int, health: bool) -> Callable[[], bool]:
    return lambda: healthy(store, chip) is health


def faults(store: MemoryCluster, state: Path, count: int, chip: int = 3) -> list[float]:
    """A chip failing and recovering in turn: the time until the API server holds a slice
    that says so."""
    publications = []
    for i in range(count):
        failing = i % 2 == 0
        began = time.perf_counter()
        set_health(state, frozenset({chip}) if failing else frozenset())
        if not wait_for(published(store, chip, not failing), timeout=30):
            raise SystemExit("the slice did not follow the chip's health within 30 s")
        publications.append(time.perf_counter() - began)
    return publications


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--claims", type=int, default=300)
    parser.add_argument("--faults", type=int, default=20)
    args = parser.parse_args()
    store = MemoryCluster()
    api = LoopbackApiServer(store)
    api.start()
    for kind, objects in (
        (CLASS_KIND, deployed("DeviceClass")),
        (TEMPLATE_KIND, deployed("ResourceClaimTemplate")),
    ):
        for obj in objects:
            store.create_object(kind, obj)
    store.put("Node", dra_node_object(NODE, 0))
    with tempfile.TemporaryDirectory(prefix="dra", dir="/tmp") as workdir:
        home = Path(workdir)
        (home / "state.yaml").write_text(state_file(frozenset()))
        (home / "kubeconfig").write_text(kubeconfig(api.url))
        kubelet = KubeletDra(NODE, home / "registry", store, home / "cdi")
        kubelet.start()
        driver = subprocess.Popen(driver_command(NODE, home, kubeconfig_file=home / "kubeconfig"))
        try:
            ready = wait_for(
                lambda: kubelet.plugins != {} and healthy(store, 0) is not None, timeout=60
            )
            if not ready:
                raise SystemExit("the DRA driver did not register and publish within 60 s")
            rss_start = psutil.Process(driver.pid).memory_info().rss / 2**20
            prepares, unprepares = claims(store, kubelet, args.claims)
            publications = faults(store, home / "state.yaml", args.faults)
            rss_end = psutil.Process(driver.pid).memory_info().rss / 2**20
        finally:
            driver.terminate()
            driver.wait(timeout=10)
            kubelet.stop()
            api.stop()
    print(f"DRA driver, one 8-chip node, {args.claims} claims of 2 chips, {args.faults} faults")
    print(f"  prepare (kubelet's NodePrepareResources call): {quantiles(prepares)}")
    print(f"  unprepare: {quantiles(unprepares)}")
    print(f"  chip fault to the slice saying so: {quantiles(publications)}")
    print(f"  driver RSS: {rss_start:.1f} MiB after start, {rss_end:.1f} MiB after the claims")


if __name__ == "__main__":
    main()
