"""A container prepared by our DRA driver gets what the CDI spec of Huawei's DRA driver gives
it (Ascend/mind-cluster ``component/ascend-common/cdi``: ``spec.go``, ``devnode.go``,
``mount/profile.go``, ``mount/provider.go``), from a fake host tree: the driver's libraries and
tools mounted read-only, ``LD_LIBRARY_PATH`` of the library directories the host has, the HCCL
root info and the driver's topology directory, ``/dev/dvpp_cmdlist`` (not on a 950), every node
of ``/dev/uburma`` and ``/dev/ummu``, and on a 950 the UB user-space files; nothing the host
lacks. As the chart's pod does it: the init step (``python -m dra_driver.host_paths``, the
real command) checks the host tree once and writes the set; the real driver, started
in-process (its kubelet plugin over unix sockets), reads the set (``serve --host-paths``) and
never the host tree; the kubelet DRA simulator prepares an allocated claim and applies the
spec as a runtime does."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chip_drivers.fake import FakeDriver
from contract.dra import DEFAULT_DRIVER
from contract.objects import Obj
from dra_driver.__main__ import build_parser, host_paths_of
from dra_driver.cdi import HostPaths
from dra_driver.driver import DraConfig, DraDriver, start_dra_driver
from simulation.cluster import state_file, wait_for
from simulation.dra_cluster import dra_node_object
from simulation.kubelet_dra import Container, KubeletDra
from simulation.memory import MemoryCluster

NODE = "node-00"
NS = "default"
LIB = "/usr/local/Ascend/driver/lib64"
STATE_950 = "chip_type: npu\nchips:\n" + "".join(f"  - {{id: {i}}}\n" for i in range(8))
LABELS_950 = {"accelerator": "huawei-npu", "accelerator-type": "350-Atlas-4p-8"}
INIT_STEP = 60.0  # seconds for the init step (a Python start on a loaded machine)


def host_tree(root: Path, *, without: tuple[str, ...] = ()) -> None:
    """What an Ascend host has: the driver, its tools, the HCCL files, the UB files and
    device nodes (regular files stand for device nodes and libraries)."""
    dirs = [f"{LIB}/common", f"{LIB}/driver", "/usr/local/Ascend/driver/include"]
    dirs += ["/usr/local/Ascend/driver/topo", "/usr/local/dcmi", "/var/queue_schedule"]
    dirs += ["/usr/lib64/urma", "/dev/uburma", "/dev/ummu"]
    files = ["/usr/local/bin/npu-smi", "/etc/hccl_rootinfo.json", "/usr/bin/urma_admin"]
    files += ["/usr/lib64/libummu.so", "/usr/lib64/liburma.so.1", "/usr/lib64/libnl-3.so"]
    files += ["/dev/uburma/uburma0", "/dev/ummu/ummu0", "/dev/ummu/ummu1", "/dev/dvpp_cmdlist"]
    files += ["/dev/davinci_manager", "/dev/hisi_hdc", "/dev/devmm_svm"]
    files += [f"/dev/davinci{i}" for i in range(8)]
    for path in dirs:
        if path not in without:
            (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for path in files:
        if path not in without:
            (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / path.lstrip("/")).touch()
    # A link leaving its directory is not mounted (Huawei's expandGlobPath).
    (root / "usr/lib64/liburma-escape.so").symlink_to("/etc/hccl_rootinfo.json")


class Node:
    def __init__(self, root: Path, store: MemoryCluster, kubelet: KubeletDra) -> None:
        self.root, self.store, self.kubelet = root, store, kubelet

    def run(self, name: str, chips: list[int]) -> Container:
        """A pod whose claim kube-scheduler gave ``chips`` of this node, prepared and its
        container given its CDI edits."""
        results = [
            {"request": "npu", "driver": DEFAULT_DRIVER, "pool": NODE, "device": f"npu-{c}"}
            for c in chips
        ]
        pod: Obj = {
            "metadata": {"namespace": NS, "name": name, "uid": f"uid-{name}"},
            "spec": {
                "nodeName": NODE,
                "resourceClaims": [{"name": "npus", "resourceClaimName": name}],
                "containers": [{"name": "main", "resources": {"claims": [{"name": "npus"}]}}],
            },
        }
        self.store.put(
            "resourceclaims.resource.k8s.io/v1",
            {
                "metadata": {"namespace": NS, "name": name, "uid": f"claim-{name}"},
                "spec": {"devices": {"requests": [{"name": "npu", "exactly": {"count": 1}}]}},
                "status": {
                    "allocation": {"devices": {"results": results}},
                    "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-{name}"}],
                },
            },
        )
        (container,) = self.kubelet.prepare(pod).values()
        return container


def host_paths_read(written: Path) -> HostPaths:
    """The set as ``serve --host-paths`` reads it (its flag's parsing, not a copy of it)."""
    args = build_parser().parse_args(["serve", "--node-name", NODE, f"--host-paths={written}"])
    return host_paths_of(args)


@pytest.fixture
def node(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Node]:
    """Our driver on a node whose host tree is ``tmp_path/host`` (the parameter: 910 or 950,
    and the host paths it lacks)."""
    kind, without = request.param
    root = tmp_path / "host"
    host_tree(root, without=without)
    store = MemoryCluster()
    node_obj = dra_node_object(NODE, 0)
    if kind == "950":
        node_obj["metadata"]["labels"] = {**node_obj["metadata"]["labels"], **LABELS_950}
    store.put("Node", node_obj)
    (tmp_path / "state.yaml").write_text(STATE_950 if kind == "950" else state_file(frozenset()))
    kubelet = KubeletDra(NODE, tmp_path / "registry", store, tmp_path / "cdi")
    kubelet.start()
    written = tmp_path / "run" / "paths.json"
    init = subprocess.run(
        [sys.executable, "-m", "dra_driver.host_paths", f"--host-root={root}", f"--out={written}"],
        capture_output=True,
        text=True,
        timeout=INIT_STEP,
        check=False,
    )
    assert init.returncode == 0, init.stderr
    shutil.move(root, tmp_path / "gone")  # the driver sees nothing of the host tree
    config = DraConfig(
        NODE,
        plugins_dir=tmp_path / "plugins",
        registry_dir=tmp_path / "registry",
        cdi_root=tmp_path / "cdi",
        host=host_paths_read(written),
    )
    driver: DraDriver = start_dra_driver(config, FakeDriver(tmp_path / "state.yaml"), store)
    try:
        assert wait_for(lambda: kubelet.plugin(DEFAULT_DRIVER) is not None, timeout=30)
        yield Node(root, store, kubelet)
    finally:
        driver.stop()
        kubelet.stop()


def mounted(container: Container) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    return {
        m["containerPath"]: (m["hostPath"], m["type"], tuple(m["options"]))
        for m in container.mounts
    }


READ_ONLY = ("rbind", "rprivate", "ro")


@pytest.mark.parametrize("node", [("910", ())], indirect=True)
def test_a_910_container_gets_what_huaweis_cdi_spec_gives(node: Node) -> None:
    container = node.run("train", [4, 5])
    assert container.env["LD_LIBRARY_PATH"] == f"{LIB}/common:{LIB}/driver"
    expected = [f"{LIB}", "/usr/local/Ascend/driver/include", "/usr/local/dcmi"]
    expected += ["/usr/local/bin/npu-smi", "/var/queue_schedule", "/etc/hccl_rootinfo.json"]
    expected += ["/usr/local/Ascend/driver/topo"]
    assert mounted(container) == {p: (p, "bind", READ_ONLY) for p in expected}
    assert set(container.device_nodes) == {
        "/dev/davinci4",
        "/dev/davinci5",
        "/dev/davinci_manager",
        "/dev/hisi_hdc",
        "/dev/devmm_svm",
        "/dev/dvpp_cmdlist",
        "/dev/uburma/uburma0",
        "/dev/ummu/ummu0",
        "/dev/ummu/ummu1",
    }


@pytest.mark.parametrize("node", [("950", ())], indirect=True)
def test_a_950_container_gets_the_ub_files_and_no_dvpp_cmdlist(node: Node) -> None:
    container = node.run("infer", [0, 1, 2, 3])
    paths = set(mounted(container))
    ub = {"/usr/lib64/libummu.so", "/usr/lib64/liburma.so.1", "/usr/lib64/libnl-3.so"}
    ub |= {"/usr/lib64/urma", "/usr/bin/urma_admin"}
    assert ub <= paths
    assert "/usr/lib64/liburma-escape.so" not in paths, "a link out of its directory"
    assert {"/etc/hccl_rootinfo.json", "/usr/local/Ascend/driver/topo", LIB} <= paths
    assert "/var/queue_schedule" not in paths, "not on a 950 (Huawei's 950 profile)"
    assert "/dev/dvpp_cmdlist" not in container.device_nodes
    assert {"/dev/uburma/uburma0", "/dev/ummu/ummu0", "/dev/davinci3"} <= set(
        container.device_nodes
    )


BARE = (
    f"{LIB}/common",
    "/etc/hccl_rootinfo.json",
    "/usr/local/Ascend/driver/topo",
    "/usr/local/dcmi",
    "/dev/dvpp_cmdlist",
    "/dev/uburma",
    "/dev/uburma/uburma0",
    "/dev/ummu",
    "/dev/ummu/ummu0",
    "/dev/ummu/ummu1",
)


@pytest.mark.parametrize("node", [("910", BARE)], indirect=True)
def test_what_the_host_lacks_is_left_out(node: Node) -> None:
    container = node.run("bare", [0])
    assert container.env["LD_LIBRARY_PATH"] == f"{LIB}/driver"
    paths = set(mounted(container))
    assert not paths & {"/etc/hccl_rootinfo.json", "/usr/local/Ascend/driver/topo"}
    assert "/usr/local/dcmi" not in paths and LIB in paths
    assert not [d for d in container.device_nodes if "uburma" in d or "ummu" in d]
    assert "/dev/dvpp_cmdlist" not in container.device_nodes
