"""The real Volcano (``testbed/volcano.py``: vc-controller-manager and vc-scheduler built from the
upstream sources) places NPU pods through our extender, configured as the chart's Volcano path
configures it: Huawei's shipped Volcano configuration (MindCluster v26.1.0
``component/ascend-for-volcano/build/volcano-v1.12.0.yaml``) in Volcano's ConfigMap, the merge
command adding our entry under the Job's own ServiceAccount, Volcano's scheduler trusting the
service's CA through ``SSL_CERT_DIR`` as the merged Deployment sets it, and Huawei's sample
Volcano Jobs applied as YAML for Volcano's own job controller to expand.

Volcano v1.12.0's extender plugin reads no ``allocateFuncVerb``: configured anyway (as the docs
said before), it binds NPU pods without chips. The merge refuses it, and the first test shows why
on the real v1.12.0.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from contract.annotations import CHIPS_ANNOTATION
from contract.chip_names import RESOURCE_NAME
from scheduler_core.volcano_config import Entry, merged
from testbed.cluster import NAMESPACE, ExtenderTls, deployed
from testbed.control_plane import ControlPlane, Process, running, scratch, wait_until
from testbed.rest import Obj, RestError
from testbed.volcano import NAMESPACE as VOLCANO
from testbed.volcano import VolcanoBuild, charts_adapter_entry, open_queue, running_volcano
from tests.huawei_jobs import documents
from tests.real.test_ha import (
    STARTUP,
    Schedulers,
    Stream,
    deployed_as_pods,
    drain_evict,
    one_leader,
    taken_over,
)

VOLCANO_CONFIG_ACCOUNT = "ascend-npu-volcano-config"
CONFIGMAP, KEY, DEPLOYMENT = (
    "volcano-scheduler-configmap",
    "volcano-scheduler.conf",
    "volcano-scheduler",
)
# One server for the 1 x 8 job, one a pod for the 2 x 8 and the 2 x 4 gangs (a gang takes a pod
# a server: docs/compatibility.md).
NODES = 5
# The service reading Volcano's configuration (Huawei's init-params), as the chart runs it.
VOLCANO_CONFIG_FLAGS = (f"--volcano-config={VOLCANO}/{CONFIGMAP}:{KEY}",)
JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"


def huawei_volcano(version: str) -> list[Obj]:
    """Volcano's ConfigMap and scheduler Deployment as Huawei ships them, the Deployment's image
    (its init container's too) at ``version`` (a user on another Volcano keeps Huawei's
    configuration). The user switching from Huawei's plugin takes its entry out
    (docs/compatibility.md) and, without ClusterD, sets ``useClusterInfoManager`` false."""
    shipped = VolcanoBuild("v1.12.0").huawei_configuration()
    found: dict[str, Obj] = {}
    for document in yaml.safe_load_all(shipped.read_text()):
        if document and document["metadata"].get("name") in (CONFIGMAP, DEPLOYMENT):
            found[document["kind"]] = document
    configmap, deployment = found["ConfigMap"], copy.deepcopy(found["Deployment"])
    conf = yaml.safe_load(configmap["data"][KEY])
    for tier in conf["tiers"]:
        tier["plugins"] = [p for p in tier["plugins"] if not p["name"].startswith("volcano-npu")]
    for configuration in conf.get("configurations", []):
        if configuration["name"] == "init-params":
            configuration["arguments"]["useClusterInfoManager"] = "false"
    configmap = {**configmap, "data": {KEY: yaml.safe_dump(conf, sort_keys=False)}}
    spec = deployment["spec"]["template"]["spec"]
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        image = str(container["image"])
        if "vc-scheduler" in image:
            container["image"] = f"{image.rpartition(':')[0]}:{version}"
    deployment["spec"]["replicas"] = 0  # its pods are the processes testbed.volcano starts
    return [configmap, deployment]


def shipped_entry(plane: ControlPlane, url: str) -> Entry:
    """The overlay's plugin entry (its ConfigMap) with the URL pointed at ``url``, where the
    service is reached here."""
    admin = plane.rest()
    shipped = admin.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/ascend-npu-volcano-extender")
    return Entry.parse(shipped["data"]["extender.yaml"]).at(url)


def merge(
    plane: ControlPlane,
    url: str,
    tls: ExtenderTls,
    workdir: Path,
    entry: Entry | None = None,
    *,
    extra: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """The merge Job's command under the Job's ServiceAccount, with the certs Job's files
    and ``extra`` flags; the overlay's entry unless ``entry``."""
    plugin_file = workdir / "extender.yaml"
    plugin_file.write_text(yaml.safe_dump((entry or shipped_entry(plane, url)).as_plugin()))
    command = [
        sys.executable,
        "-m",
        "scheduler_core.volcano_config",
        "merge",
        f"--plugin-file={plugin_file}",
        f"--token-file={tls.token}",
        f"--ca-file={tls.ca}",
        f"--kubeconfig={plane.service_account(NAMESPACE, VOLCANO_CONFIG_ACCOUNT)}",
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def ca_folder(tls: ExtenderTls) -> Path:
    """A folder holding only the service's CA (what ``SSL_CERT_DIR`` names)."""
    folder = tls.ca.parent.parent / "volcano-ca"
    folder.mkdir(exist_ok=True)
    (folder / "ca.crt").write_bytes(tls.ca.read_bytes())
    return folder


def volcano_conf(plane: ControlPlane) -> str:
    configmap = plane.rest().get(f"/api/v1/namespaces/{VOLCANO}/configmaps/{CONFIGMAP}")
    return str(configmap["data"][KEY])


def trusted_ca(plane: ControlPlane, workdir: Path) -> dict[str, str]:
    """What the merged Deployment gives Volcano's scheduler: the CA ConfigMap's certificate in a
    folder that ``SSL_CERT_DIR`` names (Go reads every file there: crypto/x509/root_unix.go)."""
    admin = plane.rest()
    deployment = admin.get(f"/apis/apps/v1/namespaces/{VOLCANO}/deployments/{DEPLOYMENT}")
    spec = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in spec["volumes"] if v["name"] == "ascend-npu-scheduler-ca"]
    configmap = admin.get(f"/api/v1/namespaces/{VOLCANO}/configmaps/{volume['configMap']['name']}")
    folder = workdir / "ca"
    folder.mkdir(exist_ok=True)
    (folder / "ca.crt").write_text(configmap["data"]["ca.crt"])
    (container,) = [c for c in spec["containers"] if c["name"] == DEPLOYMENT]
    (variable,) = [e for e in container["env"] if e["name"] == "SSL_CERT_DIR"]
    assert "/etc/ascend-npu-ca" in variable["value"].split(":")
    return {"SSL_CERT_DIR": str(folder)}


def chips(pod: Obj) -> list[int]:
    written = (pod["metadata"].get("annotations") or {}).get(CHIPS_ANNOTATION, "")
    return [int(chip.rpartition("-")[2]) for chip in written.split(",") if chip]


def legal_on_910x8(pod: Obj) -> bool:
    """Huawei's 910 x8 rule: 1, 2 or 4 chips inside one HCCS ring of four, or all eight."""
    taken = chips(pod)
    asked = int(pod["spec"]["containers"][0]["resources"]["requests"][RESOURCE_NAME])
    if len(taken) != asked or len(set(taken)) != asked:
        return False
    return asked == 8 or (asked in (1, 2, 4) and len({chip // 4 for chip in taken}) == 1)


def volcano_job(
    name: str, pods: int, chips_each: int, plugins: dict[str, list[str]] | None = None
) -> Obj:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"ring-controller.atlas": "ascend-910"}},
        "spec": {
            "minAvailable": pods,
            "plugins": plugins or {},
            "schedulerName": "volcano",
            "queue": "default",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": pods,
                    "template": {
                        "metadata": {"labels": {"ring-controller.atlas": "ascend-910"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "training:latest",
                                    "resources": {
                                        "requests": {RESOURCE_NAME: str(chips_each)},
                                        "limits": {RESOURCE_NAME: str(chips_each)},
                                    },
                                }
                            ],
                        },
                    },
                }
            ],
        },
    }


def assert_legal_and_once(placed: list[Obj]) -> None:
    """Each pod on legal 910 x8 chips, no chip of a node given twice."""
    for pod in placed:
        assert legal_on_910x8(pod), (pod["metadata"]["name"], chips(pod))
    per_node: dict[str, list[int]] = {}
    for pod in placed:
        per_node.setdefault(pod["spec"]["nodeName"], []).extend(chips(pod))
    for node, taken in per_node.items():
        assert len(taken) == len(set(taken)), f"a chip of {node} given twice: {taken}"


def assert_pending_unbound(plane: ControlPlane, job: str) -> None:
    """A gang too big for the cluster: no pod of it bound, the Volcano Job Pending."""
    assert not any(p["spec"].get("nodeName") for p in job_pods(plane, job))
    found = plane.rest().get(f"{JOBS}/{job}")
    assert found.get("status", {}).get("state", {}).get("phase") == "Pending", found.get("status")


def job_pods(plane: ControlPlane, job: str) -> list[Obj]:
    listed = plane.rest().get(PODS, labelSelector=f"volcano.sh/job-name={job}")
    return list(listed["items"])


def bound(plane: ControlPlane, job: str, count: int) -> list[Obj]:
    found: list[Obj] = []

    def all_bound() -> bool:
        nonlocal found
        found = job_pods(plane, job)
        return len(found) == count and all(p["spec"].get("nodeName") for p in found)

    wait_until(all_bound, 120, f"the {count} pods of {job} bound")
    return found


@pytest.fixture
def plane() -> Iterator[ControlPlane]:
    """A control plane of the test's own: each test registers the same nodes."""
    with running("vc") as control_plane:
        yield control_plane


def install(plane: ControlPlane, version: str) -> None:
    admin = plane.rest()
    admin.ensure_namespace(VOLCANO)
    for document in huawei_volcano(version):
        admin.apply(document)


def test_volcano_1_12_binds_npu_pods_without_chips_so_the_merge_refuses_it(
    plane: ControlPlane,
) -> None:
    workdir = scratch("vc112")
    install(plane, "v1.12.0")
    before = volcano_conf(plane)
    with (
        running_volcano(plane, "v1.12.0", workdir / "volcano") as volcano,
        deployed(plane, workdir, NODES, overlay="volcano") as cluster,
    ):
        refused = merge(plane, cluster.service_url, cluster.tls, workdir)
        assert refused.returncode == 2, refused.stderr
        assert "runs Volcano v1.12.0 (volcanosh/vc-scheduler:v1.12.0)" in refused.stderr
        assert "without their chips" in refused.stderr and "Traceback" not in refused.stderr
        assert volcano_conf(plane) == before, "a refused merge changes nothing"
        with pytest.raises(RestError):
            plane.rest().get(f"/api/v1/namespaces/{VOLCANO}/configmaps/ascend-npu-scheduler-ca")

        # Why: our entry put into v1.12.0 by hand, as the docs said before, binds the pod
        # without chips (the verbs are asked; allocateFunc never is).
        entry = shipped_entry(plane, cluster.service_url)
        by_hand = merged(before, entry.with_token(cluster.tls.token.read_text().strip()))
        volcano.start_controller_manager()
        volcano.start_scheduler(
            by_hand, environment={"SSL_CERT_DIR": str(ca_folder(cluster.tls))}, account=True
        )
        open_queue(plane)
        plane.rest().create(JOBS, volcano_job("by-hand", 1, 2))
        (pod,) = bound(plane, "by-hand", 1)
        assert chips(pod) == [], "v1.12.0 bound the pod without asking allocateFunc"
        plane.rest().delete(f"{JOBS}/by-hand")


SAMPLES = ("910-8chips-a800-pytorch", "910-2x8-pangu-fault-grace")


def sample(file: str, name: str) -> list[Obj]:
    """A sample's documents as its YAML has them, the Job (and its ``rings-config-<job>``
    ConfigMap) renamed ``name`` so that samples of one name can run side by side."""
    found = []
    for document in documents(f"{file}.mindcluster-deploy.yaml"):
        document["metadata"].pop("namespace", None)
        if document["kind"] == "Job":
            document["metadata"]["name"] = name
        elif document["metadata"]["name"].startswith("rings-config-"):
            document["metadata"]["name"] = f"rings-config-{name}"
        found.append(document)
    return found


def create_samples(plane: ControlPlane) -> list[tuple[str, int]]:
    """``SAMPLES`` applied as their YAML has them (``sample-<index>``): each Job's name and
    ``minAvailable``."""
    admin = plane.rest()
    jobs = []
    for index, file in enumerate(SAMPLES):
        for document in sample(file, f"sample-{index}"):
            admin.create(
                admin.path(document["apiVersion"], document["kind"], "", "default"), document
            )
            if document["kind"] == "Job":
                jobs.append((f"sample-{index}", int(document["spec"]["minAvailable"])))
    return jobs


@pytest.mark.parametrize("version", ["v1.15.0"])
def test_the_real_volcano_places_huawei_jobs_through_the_merged_extender(
    plane: ControlPlane, version: str
) -> None:
    workdir = scratch("vc")
    install(plane, version)
    with (
        running_volcano(plane, version, workdir / "volcano") as volcano,
        deployed(
            plane,
            workdir,
            NODES,
            overlay="volcano",
            service_flags=VOLCANO_CONFIG_FLAGS,
        ) as cluster,
    ):
        done = merge(plane, cluster.service_url, cluster.tls, workdir)
        assert done.returncode == 0, done.stderr
        conf = volcano_conf(plane)
        assert "extender.allocateFuncVerb: allocateFunc" in conf
        volcano.start_controller_manager()
        volcano.start_scheduler(conf, environment=trusted_ca(plane, workdir), account=True)
        open_queue(plane)
        admin = plane.rest()
        names = create_samples(plane)
        # A gang of two 4-chip pods (Huawei's plugin would put both on one server; ours puts
        # one a server), ranked by Volcano's hcclrank job plugin (hccl/rankIndex written at
        # creation, and carried by vc-scheduler's Binding with the pod's other annotations);
        # a gang of more whole servers than the cluster has cannot fit.
        admin.create(JOBS, volcano_job("halves", 2, 4, {"hcclrank": []}))
        admin.create(JOBS, volcano_job("too-big", NODES + 1, 8))
        placed = [p for name, count in [*names, ("halves", 2)] for p in bound(plane, name, count)]
        assert_legal_and_once(placed)
        ranks = sorted(
            p["metadata"]["annotations"]["hccl/rankIndex"] for p in job_pods(plane, "halves")
        )
        assert ranks == ["0", "1"], ranks
        # All or nothing: our jobEnqueueable rejects it (too few free chips), so Volcano keeps
        # the job Pending and its controller makes no pod; none is bound in any case.
        assert_pending_unbound(plane, "too-big")
        for name, _ in [*names, ("halves", 2), ("too-big", 0)]:
            admin.delete(f"{JOBS}/{name}")


def calls(metrics_url: str, verb: str) -> float:
    """The service's count of ``verb`` calls (``ascend_scheduler_requests_total``)."""
    with urllib.request.urlopen(f"{metrics_url}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found = re.search(
        rf'^ascend_scheduler_requests_total{{verb="{re.escape(verb)}"}} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else 0.0


def test_volcano_1_12_places_npu_jobs_with_chips_through_the_in_process_adapter(
    plane: ControlPlane,
) -> None:
    """Volcano v1.12.0 (what MindCluster v26.1.0 ships) loading ``ascend-npu-adapter.so``
    from ``--plugins-dir`` as it loads Huawei's plugin: each task asked once for all the
    nodes (``predicateAll``), the chips chosen by ``allocateCarried`` and carried by
    Volcano's Binding."""
    workdir = scratch("vcadapter")
    install(plane, "v1.12.0")
    VolcanoBuild("v1.12.0").check(adapter=True)
    with (
        running_volcano(plane, "v1.12.0", workdir / "volcano") as volcano,
        deployed(
            plane,
            workdir,
            NODES,
            overlay="volcano",
            service_flags=VOLCANO_CONFIG_FLAGS,
        ) as cluster,
    ):
        # The chart's Volcano path with volcano.adapter: its merge Job writes the adapter's
        # entry (no version refused: the adapter posts the allocations itself).
        entry = charts_adapter_entry(cluster.service_url)
        done = merge(plane, cluster.service_url, cluster.tls, workdir, entry)
        assert done.returncode == 0, done.stderr
        conf = volcano_conf(plane)
        assert "name: ascend-npu-adapter" in conf and "name: extender" not in conf
        volcano.start_controller_manager()
        volcano.start_scheduler(
            conf, adapter=True, environment=trusted_ca(plane, workdir), account=True
        )
        open_queue(plane)
        admin = plane.rest()
        # Huawei's samples as YAML (its 1 x 8 and its 2 x 8 gang: a server, and one a pod),
        # one server for the 1-, 2- and 4-chip pods (a ring of four for the 4, the other
        # ring for the 2 and the 1); the too-big gang of more whole servers than the cluster
        # has stays Pending.
        samples = create_samples(plane)
        wanted = [("one", 1, 1), ("two", 1, 2), ("four", 1, 4)]
        for name, pods, each in wanted:
            admin.create(JOBS, volcano_job(name, pods, each))
        admin.create(JOBS, volcano_job("too-big", NODES + 1, 8))
        jobs = [*samples, *((name, count) for name, count, _ in wanted)]
        placed = [p for name, count in jobs for p in bound(plane, name, count)]
        assert_legal_and_once(placed)
        (gang,) = [name for name, count in samples if count == 2]
        gang_nodes = {p["spec"]["nodeName"] for p in job_pods(plane, gang)}
        assert len(gang_nodes) == 2, "the gang takes a pod a server"
        assert_pending_unbound(plane, "too-big")
        # The adapter's verbs, never the stock plugin's per-node predicate; the chips came
        # with Volcano's Binding (allocateCarried writes nothing on the pod), which it sent
        # as its own ServiceAccount, through the annotation policy.
        assert calls(cluster.metrics_url, "volcano/predicateAll") >= len(placed)
        assert calls(cluster.metrics_url, "volcano/allocateCarried") >= len(placed)
        assert calls(cluster.metrics_url, "volcano/allocateFunc") == 0
        assert calls(cluster.metrics_url, "volcano/predicate") == 0
        for name, _ in [*jobs, ("too-big", 0)]:
            admin.delete(f"{JOBS}/{name}")


# Volcano's scheduler elects a leader on a Lease in its namespace (cmd/scheduler/app/
# server.go); shorter than its defaults (15 s, 10 s, 2 s) so that a takeover fits a test.
ELECTED = (
    "--leader-elect=true",
    f"--leader-elect-resource-namespace={VOLCANO}",
    "--leader-elect-lease-duration=6s",
    "--leader-elect-renew-deadline=4s",
    "--leader-elect-retry-period=1s",
)


def volcano_leader(plane: ControlPlane) -> str:
    """The identity holding Volcano's scheduler Lease (``volcano``, its default
    ``--leader-elect-resource-name``), '' while none."""
    try:
        lease = plane.rest().get(
            f"/apis/coordination.k8s.io/v1/namespaces/{VOLCANO}/leases/volcano"
        )
    except RestError as missing:
        if missing.status != 404:
            raise
        return ""
    return str(lease["spec"].get("holderIdentity") or "")


def volcano_calling(version: str, workdir: Path, standby: list[Process]) -> Schedulers:
    """Volcano ``version`` as the NPU pods' scheduler of ``deployed_as_pods``: the merge run
    against the Service's URL, then Volcano's controller manager and two schedulers on the
    merged configuration, electing a leader: the one yielded leads, the other (appended to
    ``standby``) waits."""

    @contextmanager
    def start(plane: ControlPlane, url: str, tls: ExtenderTls) -> Iterator[Process]:
        with running_volcano(plane, version, workdir / "volcano") as volcano:
            done = merge(plane, url, tls, workdir)
            assert done.returncode == 0, done.stderr
            volcano.start_controller_manager()
            conf, trust = volcano_conf(plane), trusted_ca(plane, workdir)
            leader = volcano.start_scheduler(conf, environment=trust, extra=ELECTED, account=True)
            wait_until(lambda: volcano_leader(plane) != "", 60, "Volcano's scheduler leads")
            standby.append(
                volcano.start_scheduler(
                    conf,
                    environment=trust,
                    extra=ELECTED,
                    name="vc-scheduler-standby",
                    account=True,
                )
            )
            yield leader

    return start


def test_no_npu_pod_is_bound_without_chips_while_leaders_fail_over_under_volcano() -> None:
    """Our leader evicted (the other replica takes over), then Volcano's leader killed (its
    standby takes over), while NPU pods stream in: each runs on the chips it was given, no
    chip twice."""
    standby: list[Process] = []
    with running("vcha") as control_plane:
        install(control_plane, "v1.15.0")
        workdir = control_plane.workdir
        calling = volcano_calling("v1.15.0", workdir, standby)
        with deployed_as_pods(control_plane, workdir, "volcano", calling) as ha:
            open_queue(control_plane)
            # Whole servers: Volcano binds after allocateFunc in its own order, so two pods of
            # one count on one node may swap chips (docs/scheduler.md), and one deleted as soon
            # as it runs can leave the other's Allocate no pod to match; neither is what this
            # test is about (leaders failing over), and whole-server pods have no such pair.
            stream = Stream(ha, "volcano-failover", every=1.5, chips=8, scheduler="volcano")
            with stream:
                first = one_leader(ha)
                drain_evict(ha, first, STARTUP)
                assert taken_over(ha, first) != first
                before = volcano_leader(control_plane)
                ha.scheduler.kill()
                wait_until(
                    lambda: volcano_leader(control_plane) not in ("", before),
                    60,
                    "Volcano's standby scheduler leads",
                )
                assert standby[0].alive()
                made = len(stream.made)
                wait_until(lambda: len(stream.ran) > made, 60, "pods placed under the new leaders")
        stream.check()
