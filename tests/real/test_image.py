"""The image (``python -m image.build``, docs/image.md), built here or taken from its cache, for
amd64 and arm64: each platform's configuration, its binaries' architecture and the libraries
they need, what it holds; the amd64 image's three entrypoints started from its root filesystem
and answering their probes; arm64's interpreter under qemu-user.

No container engine runs here, so the image runs as a runtime would run it: its layers unpacked
into a root filesystem, entered with ``unshare`` (a mount namespace of its own) and ``chroot``
(``testbed/rootfs.py``),
the root mounted read-only as the manifests set it (``readOnlyRootFilesystem``), ``/dev`` and
``/proc`` mounted, a shared folder as ``/tmp``; the image configuration's environment,
entrypoint and user applied; the host's network (loopback) for the probes.

Skipped, saying why, where the image cannot be built (no mmdebstrap, not root: ``build.missing``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from agent.faults.table import default_config
from contract.dra import SLICE_KIND
from image import build, layout
from infra.kube.port import Selection
from simulation.cluster import state_file
from simulation.dra_cluster import dra_node_object
from simulation.kubelet import KubeletSimulator
from simulation.loopback import LoopbackApiServer, kubeconfig
from simulation.memory import MemoryCluster
from simulation.processes import free_port
from testbed.control_plane import wait_until
from testbed.rootfs import Mount, entered, mounts_variable

ROOT = Path(__file__).parents[2]
ARCHES = ("amd64", "arm64")
ELF_MACHINE = {"amd64": 62, "arm64": 183}  # e_machine: EM_X86_64, EM_AARCH64 (elf.h)
TRIPLET = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}
SITE = build.SITE
PROJECT_PACKAGES = {
    "agent",
    "chip_drivers",
    "chip_topology",
    "contract",
    "deviceplugin_api",
    "dra_driver",
    "infra",
    "scheduler_core",
}


def version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def lock_pins() -> dict[str, str]:
    text = (ROOT / "image" / "requirements.lock").read_text()
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", text, re.M))


def normal(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def image() -> build.Image:
    reason = build.missing()
    if reason is not None:
        pytest.skip(f"the image cannot be built here: {reason}")
    return build.build()


@pytest.fixture(scope="module")
def manifests(image: build.Image) -> dict[str, layout.Manifest]:
    return layout.manifests(image.layout, image.reference)


@pytest.fixture(scope="module")
def rootfs(
    manifests: dict[str, layout.Manifest], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Path]]:
    unpacked = {}
    for arch in ARCHES:
        unpacked[arch] = tmp_path_factory.mktemp(f"rootfs-{arch}")
        layout.unpack(manifests[arch], unpacked[arch])
        unpacked[arch].chmod(0o755)  # the image's /, which its user 10001 walks through
        (unpacked[arch] / "proc").mkdir()  # a runtime makes the mount points it needs
    yield unpacked
    for tree in unpacked.values():  # 250 MB each: not kept with pytest's last runs
        shutil.rmtree(tree, ignore_errors=True)


def test_the_lock_pins_every_runtime_dependency_within_pyproject_and_hashes_each() -> None:
    pins = {normal(name): pin for name, pin in lock_pins().items()}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for line in project["dependencies"]:
        requirement = Requirement(line)
        pin = pins.get(normal(requirement.name))
        assert pin is not None, f"{requirement.name} is not in image/requirements.lock"
        assert requirement.specifier.contains(pin), f"{requirement.name}=={pin} is not {line}"
    text = (ROOT / "image" / "requirements.lock").read_text()
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])
    assert len(blocks) == len(pins)
    assert all("--hash=sha256:" in block for block in blocks), "pip --require-hashes needs all"


def test_one_index_holds_both_platforms_and_skopeo_copies_it(
    image: build.Image, manifests: dict[str, layout.Manifest], tmp_path: Path
) -> None:
    assert sorted(manifests) == sorted(ARCHES)
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        pytest.skip("skopeo is not installed (apt-get install -y skopeo)")
    # containers/image, as podman and buildah push it: every blob's digest verified on copy.
    done = subprocess.run(
        [skopeo, "copy", "--quiet", "--all", f"oci:{image.layout}:{image.reference}",
         f"oci:{tmp_path / 'copy'}:{image.reference}"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shutil.rmtree(tmp_path / "copy")  # 100 MB of blobs: not kept with pytest's last runs


@pytest.mark.parametrize("arch", ARCHES)
def test_each_platform_runs_python_m_as_user_10001_with_the_oci_labels(
    manifests: dict[str, layout.Manifest], arch: str
) -> None:
    config = manifests[arch].config
    assert (config["architecture"], config["os"]) == (arch, "linux")
    assert config.get("variant") == ("v8" if arch == "arm64" else None)
    run = config["config"]
    assert run["User"] == "10001"
    assert run["Entrypoint"] == ["python", "-m"]
    assert run["Cmd"] == ["scheduler_core", "serve"]
    assert run["ExposedPorts"] == {"8888/tcp": {}}
    assert {"PYTHONUNBUFFERED=1", "PYTHONFAULTHANDLER=1", "GRPC_VERBOSITY=ERROR"} <= set(run["Env"])
    assert run["Labels"] == {
        "org.opencontainers.image.title": "ascend-npu-k8s",
        "org.opencontainers.image.description": (
            "Ascend NPU device-plugin agent, DRA driver and HCCS-affine scheduler extender"
        ),
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.version": version(),
    }
    made_by = [step["created_by"] for step in config["history"]]
    assert len(made_by) == len(manifests[arch].layers) == 3
    assert "mmdebstrap" in made_by[0] and "requirements.lock" in made_by[1]


def elf_machine(path: Path) -> int:
    header = path.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", f"{path} is not ELF"
    assert header[4:6] == b"\x02\x01", f"{path}: not 64-bit little-endian"
    return int.from_bytes(header[18:20], "little")


@pytest.mark.parametrize("arch", ARCHES)
def test_the_interpreter_and_the_extensions_are_the_platforms_own(
    rootfs: dict[str, Path], arch: str
) -> None:
    root = rootfs[arch]
    (cygrpc,) = (root / SITE / "grpc" / "_cython").glob("cygrpc.*.so")
    (msgspec,) = (root / SITE / "msgspec").glob("_core.*.so")
    for binary in (root / "usr/bin/python3.11", cygrpc, msgspec):
        assert elf_machine(binary) == ELF_MACHINE[arch], binary
    assert TRIPLET[arch].split("-")[0] in cygrpc.name


def needed(path: Path) -> tuple[list[str], list[str]]:
    """The libraries an ELF file names (DT_NEEDED) and where it says to look (RUNPATH)."""
    readelf = shutil.which("readelf")
    assert readelf is not None, "binutils' readelf"
    text = subprocess.run(
        [readelf, "--dynamic", "--wide", str(path)], capture_output=True, text=True, check=True
    ).stdout
    paths = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r\w*path: \[(.*?)\]", text)
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.*?)\]", text), paths


@pytest.mark.parametrize("arch", ARCHES)
def test_every_library_the_interpreter_and_extensions_need_is_in_the_image(
    rootfs: dict[str, Path], arch: str
) -> None:
    """As the dynamic loader looks (ld.so(8): RUNPATH with $ORIGIN, then the default
    folders): a wheel's C++ extension needs libstdc++, which no wheel carries."""
    root = rootfs[arch]
    defaults = [f"lib/{TRIPLET[arch]}", f"usr/lib/{TRIPLET[arch]}", "lib", "usr/lib"]
    binaries = [
        root / "usr/bin/python3.11",
        *(root / "usr/lib/python3.11/lib-dynload").glob("*.so"),
        *(p for p in (root / SITE).rglob("*.so*") if p.is_file()),
    ]
    missing = []
    for binary in binaries:
        names, runpaths = needed(binary)
        origin = "/" + binary.parent.relative_to(root).as_posix()
        folders = [
            folder.replace("$ORIGIN", origin).lstrip("/")
            for entry in runpaths
            for folder in entry.split(":")
        ]
        for name in names:
            if not any(os.path.lexists(root / f / name) for f in [*folders, *defaults]):
                missing.append(f"{binary.relative_to(root)} needs {name}")
    assert len(binaries) > 50
    assert not missing


def test_the_image_holds_the_locked_packages_the_project_and_no_package_manager(
    rootfs: dict[str, Path],
) -> None:
    root = rootfs["amd64"]
    installed = build.python_packages(root / SITE)
    expected = {normal(n): v for n, v in lock_pins().items()} | {"ascend-npu-k8s": version()}
    assert {normal(n): v for n, v in installed.items()} == expected
    (record,) = (root / SITE).glob("ascend_npu_k8s-*.dist-info/RECORD")
    tops = {line.split("/", 1)[0] for line in record.read_text().splitlines()}
    assert tops == PROJECT_PACKAGES | {record.parent.name}, "the project's packages, no more"
    assert not (root / "usr/bin/apt").exists() and not (root / SITE / "pip").exists()
    assert f"ascend:x:{build.USER}:{build.USER}:" in (root / "etc/passwd").read_text()
    status = build.dpkg_packages(root)
    assert {"python3.11", "libstdc++6", "python-is-python3"} <= set(status)


@dataclass(frozen=True)
class Container:
    """An image's root filesystem entered as a runtime would (the module docstring)."""

    root: Path
    shared: Path  # the container's /tmp
    config: dict[str, Any]  # the image configuration's ``config``

    def start(self, name: str, argv: list[str], user: str | None = None) -> subprocess.Popen[bytes]:
        """``argv`` as the container's command, as ``user`` (a uid; None: the image's), its
        output in ``<shared>/<name>.log``."""
        uid = user or self.config["User"]
        passwd = (self.root / "etc/passwd").read_text().splitlines()
        fields = next(f for f in (line.split(":") for line in passwd) if f[2] == uid)
        environment = dict(e.split("=", 1) for e in self.config["Env"]) | {"HOME": fields[5]}
        with open(self.shared / f"{name}.log", "wb") as log:
            return subprocess.Popen(
                entered(self.root, f"{fields[2]}:{fields[3]}", argv),
                env=environment | mounts_variable([Mount(self.shared, "/tmp")]),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def log(self, name: str) -> str:
        return (self.shared / f"{name}.log").read_text(errors="replace")


def shared_folder() -> Path:
    """A short path (the kubelet's sockets live there), writable by any user as a /tmp is."""
    shared = Path(tempfile.mkdtemp(prefix="img", dir="/tmp"))
    shared.chmod(0o1777)
    return shared


@pytest.fixture
def container(
    rootfs: dict[str, Path], manifests: dict[str, layout.Manifest]
) -> Iterator[Container]:
    shared = shared_folder()
    yield Container(rootfs["amd64"], shared, manifests["amd64"].config["config"])
    shutil.rmtree(shared, ignore_errors=True)


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code
    except OSError:
        return 0  # not listening yet


def answers(process: subprocess.Popen[bytes], url: str, container: Container, name: str) -> None:
    def up() -> bool:
        assert process.poll() is None, f"{name} exited:\n{container.log(name)}"
        return status(url) == 200

    wait_until(up, 60, f"{url} from the image ({name})")


def stopped(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=30)


def ended(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def uid_of(process: subprocess.Popen[bytes]) -> str:
    """The real uid of what the runner became (``exec`` all along: the same pid)."""
    lines = Path(f"/proc/{process.pid}/status").read_text().splitlines()
    return next(line.split()[1] for line in lines if line.startswith("Uid:"))


def test_the_scheduler_runs_from_the_images_entrypoint_as_10001_and_answers_healthz(
    container: Container,
) -> None:
    # Nothing answers at the API server's address: the service lives (/healthz) unready.
    (container.shared / "kubeconfig").write_text(kubeconfig("http://127.0.0.1:9"))
    listen, metrics = free_port(), free_port()
    run = container.config
    process = container.start(
        "scheduler",
        [*run["Entrypoint"], *run["Cmd"], f"--listen=127.0.0.1:{listen}",
         f"--metrics-listen=127.0.0.1:{metrics}", "--kube=kubeconfig",
         "--kubeconfig=/tmp/kubeconfig", "--insecure", "--allow-missing-policies"],
    )  # fmt: skip
    try:
        answers(process, f"http://127.0.0.1:{metrics}/healthz", container, "scheduler")
        assert uid_of(process) == "10001"
        assert stopped(process) == 0, container.log("scheduler")
    finally:
        ended(process)


def test_the_agent_registers_its_chips_with_the_kubelet_and_answers_healthz(
    container: Container,
) -> None:
    (container.shared / "state.yaml").write_text(state_file())
    kubelet = KubeletSimulator(container.shared / "plugins")
    kubelet.start()
    metrics = free_port()
    # The DaemonSet's command, as root (its securityContext: runAsUser 0).
    process = container.start(
        "agent",
        ["python", "-m", "agent", "serve", "--plugin-dir=/tmp/plugins",
         "--fake-state=/tmp/state.yaml", f"--metrics-listen=127.0.0.1:{metrics}"],
        user="0",
    )  # fmt: skip
    try:
        answers(process, f"http://127.0.0.1:{metrics}/healthz", container, "agent")
        wait_until(lambda: kubelet.allocatable("huawei.com/Ascend910") == 8, 30, "8 chips")
        assert stopped(process) == 0, container.log("agent")
    finally:
        ended(process)
        kubelet.close()


def test_the_dra_driver_publishes_its_slice_and_answers_healthz(container: Container) -> None:
    store = MemoryCluster(bookmark_seconds=0.2)
    store.put("Node", dra_node_object("node-00", 0))
    api = LoopbackApiServer(store)
    api.start()
    (container.shared / "state.yaml").write_text(state_file())
    (container.shared / "kubeconfig").write_text(kubeconfig(api.url))
    metrics = free_port()
    process = container.start(
        "dra_driver",
        ["python", "-m", "dra_driver", "serve", "--node-name=node-00", "--driver=fake",
         "--fake-state=/tmp/state.yaml", "--plugins-dir=/tmp/plugins",
         "--registry-dir=/tmp/registry", "--cdi-root=/tmp/cdi", "--kube=kubeconfig",
         "--kubeconfig=/tmp/kubeconfig", f"--metrics-listen=127.0.0.1:{metrics}",
         "--allow-missing-policies"],
        user="0",
    )  # fmt: skip
    try:
        answers(process, f"http://127.0.0.1:{metrics}/healthz", container, "dra_driver")
        wait_until(lambda: bool(store.list_page(Selection(SLICE_KIND), 0).items), 30, "the slice")
        assert stopped(process) == 0, container.log("dra_driver")
    finally:
        ended(process)
        api.stop()


def test_the_modules_load_from_bytecode_compiled_at_build_time(container: Container) -> None:
    """The root is read-only: a missing or stale ``.pyc`` would be compiled at every start."""
    process = container.start(
        "imports",
        ["python", "-v", "-c", "import agent.__main__, dra_driver.__main__, "
         "scheduler_core.__main__, kubernetes.client"],
    )  # fmt: skip
    assert process.wait(timeout=60) == 0, container.log("imports")
    log = container.log("imports")
    for source in (
        "/usr/lib/python3.11/json/__init__.py",  # Debian's standard library
        f"/{SITE}/grpc/__init__.py",  # a dependency's wheel
        f"/{SITE}/scheduler_core/__main__.py",  # the project's wheel
    ):
        folder, name = source.rsplit("/", 1)
        compiled = f"{folder}/__pycache__/{name.removesuffix('.py')}.cpython-311.pyc"
        assert f"# {compiled} matches {source}" in log
    assert not re.findall(r"^# (?:bytecode is stale|could not create).*", log, re.M)


def test_the_agent_reads_huaweis_fault_tables_from_the_image(container: Container) -> None:
    """The vendored faultCode.json and faultCustomization.json (agent/faults/data) are the
    wheel's package data: without them the agent could not classify a fault code."""
    process = container.start(
        "fault-tables",
        ["python", "-c", "from agent.faults.table import default_config as d; "
         "c = d(); print(len(c.table.chip), len(c.customization.frequency))"],
    )  # fmt: skip
    assert process.wait(timeout=60) == 0, container.log("fault-tables")
    default = default_config()
    shipped = f"{len(default.table.chip)} {len(default.customization.frequency)}"
    assert container.log("fault-tables").split() == shipped.split()


def test_arm64s_python_runs_the_scheduler_under_qemu_user(
    rootfs: dict[str, Path], manifests: dict[str, layout.Manifest]
) -> None:
    qemu = shutil.which("qemu-aarch64-static")
    if qemu is None:
        pytest.skip("qemu-user-static is not installed (apt-get install -y qemu-user-static)")
    root = rootfs["arm64"]
    shutil.copy(qemu, root / "qemu-aarch64-static")  # static: it runs inside the chroot
    arm64 = Container(root, shared_folder(), manifests["arm64"].config["config"])
    try:
        process = arm64.start(
            "version",
            ["/qemu-aarch64-static", "/usr/bin/python3", "-m", "scheduler_core", "--version"],
        )
        assert process.wait(timeout=120) == 0, arm64.log("version")
        assert arm64.log("version") == f"python -m scheduler_core {version()}\n"
    finally:
        shutil.rmtree(arm64.shared, ignore_errors=True)
