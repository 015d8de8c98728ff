"""kube-scheduler-ascend's image (``python -m image.kube_scheduler``, docs/image.md), built here
or taken from its cache, for amd64 and arm64: each platform's scheduler is byte for byte the
test bed's ``kube-scheduler-ascend`` for it (this machine's is the one
``tests/real/test_kube_scheduler.py``, ``test_preemption.py`` and ``test_scheduler_scale.py``
run with the plugin), static; this machine's runs from the image's root filesystem as the
chart's user 10001 with the command the chart's Deployment gives it (``testbed/rootfs.py``:
entered as a runtime would, the root read-only), arm64's under qemu-user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from image import kube_scheduler, layout
from testbed.build import host_arch, plugin_scheduler
from testbed.manifests import helm_template
from testbed.rootfs import entered, mounts_variable, unpacked

IMAGE = "registry.example/ascend-npu-k8s-kube-scheduler:v1"


@pytest.fixture(scope="module")
def images() -> dict[str, layout.Manifest]:
    built = kube_scheduler.build_image()
    assert built.reference == kube_scheduler.image_tag()
    manifests = layout.manifests(built.layout, built.reference)
    assert set(manifests) == {"amd64", "arm64"}
    return manifests


@pytest.fixture(scope="module")
def image(images: dict[str, layout.Manifest]) -> layout.Manifest:
    return images[host_arch()]


@pytest.fixture(scope="module")
def rootfs(image: layout.Manifest) -> Iterator[Path]:
    with unpacked(image, "ksroot") as root:
        yield root


MACHINES = {"amd64": "Advanced Micro Devices X86-64", "arm64": "AArch64"}


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_each_platform_holds_the_test_beds_scheduler_static(
    images: dict[str, layout.Manifest], arch: str
) -> None:
    """Each platform's scheduler is the one ``testbed.build`` built for it (this machine's
    the one the other tests run), static, for its machine."""
    with unpacked(images[arch], f"ks{arch}") as root:
        binary = root / kube_scheduler.BINARY
        assert binary.read_bytes() == plugin_scheduler(arch).read_bytes()
        assert os.access(binary, os.X_OK)
        header = subprocess.run(
            ["readelf", "-h", "-l", str(binary)], capture_output=True, text=True, check=True
        )
        assert f"Machine:                           {MACHINES[arch]}" in header.stdout
        assert "INTERP" not in header.stdout, "static: no loader needed"
        assert images[arch].config["config"]["User"] == "10001"
        assert "kube-scheduler:x:10001:10001:" in (root / "etc/passwd").read_text()
        for folder in ("kubernetes", "ascend-npu-k8s"):
            assert (root / "usr/share/doc" / folder / "copyright").is_file()


def test_arm64s_scheduler_runs_under_qemu_user(images: dict[str, layout.Manifest]) -> None:
    qemu = shutil.which("qemu-aarch64-static")
    if qemu is None:
        pytest.skip("qemu-user-static is not installed (apt-get install -y qemu-user-static)")
    with unpacked(images["arm64"], "ksarm64") as root:
        says_its_version([qemu, str(root / kube_scheduler.BINARY), "--version"])


def test_the_charts_command_runs_from_the_image_as_its_user(
    image: layout.Manifest, rootfs: Path
) -> None:
    """The chart's Deployment with the plugin: its image, user and command (``kube-scheduler``
    found on the image's PATH), here asked for its version."""
    values = ("kubeScheduler.plugin=true", f"kubeScheduler.pluginImage={IMAGE}")
    rendered = [d for d in yaml.safe_load_all(helm_template(*values)) if d]
    (deployment,) = [
        d
        for d in rendered
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "ascend-npu-kube-scheduler"
    ]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["image"] == IMAGE
    user = spec["securityContext"]["runAsUser"]
    command = [container["command"][0], "--version"]
    (path,) = [e for e in image.config["config"]["Env"] if e.startswith("PATH=")]
    settings = {"PATH": path.removeprefix("PATH="), **mounts_variable([])}
    entering = entered(rootfs, f"{user}:{user}", command)
    says_its_version(["env", "-i", *(f"{k}={v}" for k, v in settings.items()), *entering])


def says_its_version(command: list[str]) -> None:
    """``command`` (kube-scheduler-ascend asked ``--version``) names the Kubernetes it is."""
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"Kubernetes {kube_scheduler.kubernetes().version}"
