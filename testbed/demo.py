"""``python -m simulation --real``: the demo's workload on the real control plane.

The test bed's kube-apiserver, etcd, kube-controller-manager and kube-scheduler (``make
testbed`` builds them), the kube-scheduler overlay applied as an admin applies it, the nodes
simulated (agents on the fake driver, the kubelet simulator); pods of 1, 2, 4 and 8 chips and a
16-chip gang go through the real kube-scheduler and the extender. Each line shows the chips the
extender chose and what the container sees; exit status 1 unless they all agree and no chip is
given twice.
"""

from __future__ import annotations

import json

from contract.annotations import CHIPS_ANNOTATION, GANG_LABEL, GANG_SIZE_ANNOTATION
from testbed.cluster import deployed, npu_pod, wait_pods
from testbed.control_plane import running, version
from testbed.rest import Obj

WORKLOAD = (("one", 1), ("two", 2), ("four", 4), ("eight", 8), ("two-b", 2), ("one-b", 1))


def _pod(name: str, chips: int, labels: dict[str, str], annotations: dict[str, str]) -> Obj:
    pod = npu_pod(chips, {"demo": "yes", **labels}, annotations)
    pod["metadata"]["name"] = name
    pod["spec"]["restartPolicy"] = "Always"
    return pod


def _chips(annotated: str) -> list[int]:
    return sorted(int(chip.rsplit("-", 1)[1]) for chip in annotated.split(",") if chip)


def run(nodes: int) -> int:
    print(f"starting kube-apiserver, etcd, kube-controller-manager {version('kubernetes')} ...")
    with running("demo") as plane, deployed(plane, plane.workdir, nodes) as cluster:
        print(f"{nodes} nodes registered; kube-scheduler runs the shipped configuration")
        admin = plane.rest()
        ns = admin.ensure_namespace("demo")
        pods = f"/api/v1/namespaces/{ns}/pods"
        for name, chips in WORKLOAD:
            # One at a time, each once the one before runs: kube-scheduler binds asynchronously
            # and tells the extender of a placement only at its bind, so pods submitted at once
            # may each be scored on a view without the others and spread over more nodes than
            # the gang can spare (seen: 1 run in 4 left no two whole nodes free).
            admin.create(pods, _pod(name, chips, {"step": name}, {}))
            wait_pods(plane, ns, f"step={name}", 1, timeout=120)
        for rank in range(2):
            gang = {GANG_LABEL: "gang16"}
            admin.create(pods, _pod(f"gang16-{rank}", 8, gang, {GANG_SIZE_ANNOTATION: "2"}))
        started = wait_pods(plane, ns, "demo=yes", len(WORKLOAD) + 2, timeout=180)
        seen: dict[str, str] = json.loads(cluster.nodes.ask("visible"))
        mismatches, held = 0, set()
        print(f"{'pod':10} {'node':8} {'extender chose':16} container sees")
        for pod in sorted(started, key=lambda p: str(p["metadata"]["name"])):
            key = f"{ns}/{pod['metadata']['name']}"
            chosen = _chips(pod["metadata"]["annotations"][CHIPS_ANNOTATION])
            visible = sorted(int(c) for c in seen.get(key, "").split(",") if c)
            node = pod["spec"]["nodeName"]
            mismatches += chosen != visible
            twice = any((node, c) in held for c in chosen)
            mismatches += twice
            held |= {(node, c) for c in chosen}
            print(f"{pod['metadata']['name']:10} {node:8} {chosen!s:16} {visible}")
        print(f"{len(started)} pods running, {mismatches} mismatches or chips given twice")
        return 1 if mismatches else 0
