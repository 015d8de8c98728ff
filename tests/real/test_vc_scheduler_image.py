"""Volcano's scheduler image carrying the in-process adapter (``python -m image.vc_scheduler``,
docs/image.md), built here or taken from its cache, installed as the chart's Volcano path
installs it and run as Huawei's own Deployment runs it.

What it holds: Volcano v1.12.0's ``vc-scheduler`` and both plugins, byte for byte the ones the
test bed built and the other tests load, and every library they need. Then the chart's merge
command (the adapter's entry, ``volcano.adapterImage``) sets the image on Huawei's
``volcano-scheduler`` Deployment on the real API server, and the Deployment's pod template, as
merged, runs from the image's root filesystem as a kubelet and runtime would
(``testbed/rootfs.py``): Huawei's init container as root, then the scheduler container as its
``runAsUser`` 9000 with Huawei's ``/bin/ash -c "umask 027; /vc-scheduler ..."``, the merged
configuration and the service's CA from their ConfigMaps, the ServiceAccount's token at the
in-cluster path. It places Huawei's samples through the adapter with legal chips; the remove
command puts Huawei's image back.

Skipped, saying why, where the image cannot be built (no mmdebstrap, not root).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from image import build, layout, vc_scheduler
from simulation.processes import free_port
from testbed.cluster import NAMESPACE, deployed
from testbed.control_plane import ControlPlane, scratch, wait_until
from testbed.rootfs import PodTemplate, unpacked
from testbed.volcano import NAMESPACE as VOLCANO
from testbed.volcano import (
    VolcanoBuild,
    charts_adapter_entry,
    healthz,
    open_queue,
    running_volcano,
)
from tests.real.test_volcano import (
    DEPLOYMENT,
    JOBS,
    NODES,
    VOLCANO_CONFIG_ACCOUNT,
    VOLCANO_CONFIG_FLAGS,
    assert_legal_and_once,
    bound,
    calls,
    create_samples,
    install,
    merge,
    plane,
    volcano_conf,
    volcano_job,
)

__all__ = ["plane"]  # the fixture, shared with test_volcano
OURS = f"registry.example/{vc_scheduler.NAME}:v1.12.0-test"
HUAWEIS = "volcanosh/vc-scheduler:v1.12.0"  # what Huawei's build.sh tags
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{VOLCANO}/deployments/{DEPLOYMENT}"


@pytest.fixture(scope="module")
def image() -> layout.Manifest:
    reason = build.missing(python=False)
    if reason is not None:
        pytest.skip(f"the vc-scheduler image cannot be built here: {reason}")
    built = vc_scheduler.build_image()
    manifests = layout.manifests(built.layout, built.reference)
    assert set(manifests) == {"amd64"}, "amd64 only (the module docstring says why)"
    return manifests["amd64"]


@pytest.fixture(scope="module")
def rootfs(image: layout.Manifest) -> Iterator[Path]:
    with unpacked(image, "vcroot") as root:
        yield root


def needed_libraries(path: Path) -> list[str]:
    shown = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True)
    return [
        line.split("[")[1].rstrip("]") for line in shown.stdout.splitlines() if "NEEDED" in line
    ]


def test_the_image_holds_the_test_beds_scheduler_and_both_plugins_and_what_they_link(
    image: layout.Manifest, rootfs: Path
) -> None:
    config = image.config["config"]
    assert config["User"] == "9000" and config["Entrypoint"] == ["/vc-scheduler"]
    assert config["WorkingDir"] == "/"
    built = VolcanoBuild("v1.12.0").check(plugin=True, adapter=True)
    for ours, theirs in (
        (rootfs / "vc-scheduler", built.scheduler),
        (rootfs / "plugins" / "ascend-npu-adapter.so", built.adapter),
        (rootfs / "plugins" / "volcano-npu_v26.1.0.so", built.plugin),
    ):
        assert ours.read_bytes() == theirs.read_bytes(), f"{ours.name}: not the tested build"
        assert ours.stat().st_uid == 0 and not ours.stat().st_mode & 0o022, "root's, read-only"
        for library in needed_libraries(ours):
            found = [rootfs / d / "x86_64-linux-gnu" / library for d in ("lib", "usr/lib")]
            assert any(path.exists() for path in found), (ours.name, library)
    for command in ("ash", "sh", "mkdir", "chmod", "chown"):  # Huawei's Deployment runs them
        assert os.readlink(rootfs / "bin" / command) == "busybox"
    assert "hwMindX:x:9000:9000:" in (rootfs / "etc/passwd").read_text()
    for folder in ("volcano", "mind-cluster", "ascend-npu-k8s"):
        assert (rootfs / "usr/share/doc" / folder / "copyright").is_file()


def remove(plane: ControlPlane, workdir: Path) -> subprocess.CompletedProcess[str]:
    """The remove Job's command (no image flag: the Deployment's note says what to put back)."""
    command = [
        sys.executable,
        "-m",
        "scheduler_core.volcano_config",
        "remove",
        f"--plugin-file={workdir / 'extender.yaml'}",
        f"--kubeconfig={plane.service_account(NAMESPACE, VOLCANO_CONFIG_ACCOUNT)}",
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def images(plane: ControlPlane) -> list[str]:
    spec = plane.rest().get(DEPLOYMENTS)["spec"]["template"]["spec"]
    return [c["image"] for c in [*spec.get("initContainers", []), *spec["containers"]]]


def test_huaweis_deployment_runs_the_image_the_chart_sets_and_places_through_the_adapter(
    plane: ControlPlane, image: layout.Manifest, rootfs: Path
) -> None:
    workdir = scratch("vcimage")
    install(plane, "v1.12.0")
    assert images(plane) == [HUAWEIS, HUAWEIS]
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
        entry = charts_adapter_entry(cluster.service_url)
        flag = f"--scheduler-image={OURS}"
        done = merge(plane, cluster.service_url, cluster.tls, workdir, entry, extra=(flag,))
        assert done.returncode == 0, done.stderr
        assert images(plane) == [OURS, OURS], "the scheduler's image and its init container's"
        assert "name: ascend-npu-adapter" in volcano_conf(plane)
        volcano.account()  # Huawei's ServiceAccount and ClusterRole for its scheduler
        volcano.start_controller_manager()
        template = plane.rest().get(DEPLOYMENTS)["spec"]["template"]["spec"]
        pod = PodTemplate(plane, VOLCANO, template, rootfs, image.config["config"], workdir)
        # The host's network is every test's: the health and metrics ports moved off the
        # defaults (appended to Huawei's ``-c`` string, after its own flags).
        health = free_port()
        extra = (
            f"--healthz-address=127.0.0.1:{health}",
            f"--listen-address=127.0.0.1:{free_port()}",
        )
        scheduler = pod.start(DEPLOYMENT, extra)
        try:
            scheduler.wait_healthy(lambda: healthz(health))
            open_queue(plane)
            admin = plane.rest()
            samples = create_samples(plane)
            admin.create(JOBS, volcano_job("two", 1, 2))
            jobs = [*samples, ("two", 1)]
            placed = [p for name, count in jobs for p in bound(plane, name, count)]
            assert_legal_and_once(placed)
            assert calls(cluster.metrics_url, "volcano/allocateCarried") >= len(placed)
            assert calls(cluster.metrics_url, "volcano/predicate") == 0
            # Huawei's log folder, made by its init container as root for user 9000, written.
            logs = workdir / "volumes" / "scheduler-config-log" / "mindx-dl" / "volcano-scheduler"
            assert logs.stat().st_uid == 9000 and any(logs.iterdir())
        finally:
            scheduler.stop()
            _end_group(scheduler.pid)
    removed = remove(plane, workdir)
    assert removed.returncode == 0, removed.stderr
    assert images(plane) == [HUAWEIS, HUAWEIS], "Huawei's image back"


def _end_group(pid: int) -> None:
    """Whatever of the container's processes outlived its first (a session of their own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    wait_until(lambda: not _group_alive(pid), 30, "the container's processes gone")


def _group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True
