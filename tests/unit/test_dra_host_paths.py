"""The host paths the DRA driver's CDI specs may name (``dra_driver.cdi.HostPaths``): checked
once by the init step (``python -m dra_driver.host_paths``), read by ``serve --host-paths``.
The set read names nothing of the host but those paths: a file naming another is refused,
so what the long-running driver mounts into containers stays what the init step may find."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_driver import host_paths
from dra_driver.__main__ import main as serve_main
from dra_driver.cdi import HOST_PATHS_VERSION, HostPaths

FOUND = [
    "/dev/davinci_manager",
    "/dev/uburma/uburma0",
    "/etc/hccl_rootinfo.json",
    "/usr/lib64/libummu.so",
    "/usr/local/Ascend/driver/lib64",
    "/usr/local/Ascend/driver/lib64/common",
]


def tree(root: Path) -> None:
    for path in FOUND[1:]:
        if path.endswith("lib64") or path.endswith("common"):
            (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
        else:
            (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / path.lstrip("/")).touch()
    (root / "dev/davinci_manager").touch()
    (root / "dev/uburma/nested").mkdir()  # a directory in a UB device directory: no node
    (root / "etc/shadow").touch()  # never checked, never named


def test_the_init_step_writes_what_the_host_has_and_serve_reads_it(tmp_path: Path) -> None:
    tree(tmp_path / "host")
    out = tmp_path / "run" / "paths.json"
    assert host_paths.main([f"--host-root={tmp_path / 'host'}", f"--out={out}"]) == 0
    assert json.loads(out.read_text()) == {"version": HOST_PATHS_VERSION, "hostPaths": FOUND}
    assert HostPaths.load(out) == HostPaths.scan(tmp_path / "host")
    assert HostPaths.load(out).matching("/dev/uburma/*") == ["/dev/uburma/uburma0"]


def test_the_init_step_refuses_a_host_root_that_is_not_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert host_paths.main([f"--host-root={tmp_path / 'no'}", f"--out={tmp_path / 'o'}"]) == 2
    assert capsys.readouterr().err.startswith("error: --host-root: ")
    assert not (tmp_path / "o").exists()


def test_links_are_followed_as_on_the_host_not_in_the_checking_container(
    tmp_path: Path,
) -> None:
    host = tmp_path / "host"
    for directory in ("usr/local/Ascend/driver/tools", "usr/local/bin", "usr/lib64", "etc"):
        (host / directory).mkdir(parents=True)
    (host / "usr/local/Ascend/driver/tools/npu-smi").touch()
    (host / "usr/lib64/libnl-3.so.200").touch()
    (host / "etc/hccl_rootinfo.json").touch()
    # Absolute targets are the host's: found under the host's / (not this machine's).
    (host / "usr/local/bin/npu-smi").symlink_to("/usr/local/Ascend/driver/tools/npu-smi")
    (host / "usr/lib64/libnl-3.so").symlink_to("/usr/lib64/libnl-3.so.200")
    # Out of its directory (relative or absolute, even climbing above /): not a glob's match.
    (host / "usr/lib64/liburma.so").symlink_to("../../../../../etc/hccl_rootinfo.json")
    (host / "usr/lib64/libummu.so").symlink_to("/etc/hccl_rootinfo.json")
    (host / "usr/lib64/libnl-gone.so").symlink_to("/usr/lib64/nowhere")  # dangling
    (host / "usr/local/dcmi").symlink_to("/usr/local/dcmi")  # a loop
    (host / "dev").symlink_to(tmp_path / "nowhere")  # this machine's path, not the host's
    found = HostPaths.scan(host).found
    assert found == {
        "/etc/hccl_rootinfo.json",
        "/usr/lib64/libnl-3.so",
        "/usr/lib64/libnl-3.so.200",
        "/usr/local/bin/npu-smi",
    }


@pytest.mark.parametrize(
    "path",
    [
        "/etc/shadow",
        "/var/lib/kubelet/pki/kubelet-client-current.pem",
        "/usr/lib64/../../etc/shadow",
        "/usr/lib64/libummu/../../../etc/shadow",
        "/dev/uburma/../sda",
        "/dev/uburma/x/y",
        "/dev/sda",
        "usr/local/dcmi",
        "/usr/lib64/libc.so.6",  # in a UB glob's directory, not matching it
    ],
)
def test_a_set_naming_another_host_path_is_refused(path: str) -> None:
    text = json.dumps({"version": HOST_PATHS_VERSION, "hostPaths": [path]})
    with pytest.raises(ValueError, match="is not a host path a CDI spec names"):
        HostPaths.parse(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('{"hostPaths": []}', "expected an object of version"),
        ('{"version": 1, "hostPaths": "/usr/local/dcmi"}', "expected hostPaths"),
    ],
)
def test_a_set_not_as_written_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HostPaths.parse(text)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--host-paths=/nonexistent/paths.json"],
            "error: --host-paths: /nonexistent/paths.json: ",
        ),
        (["--host-paths=/p", "--host-root=/"], "error: --host-paths and --host-root: give one"),
        (["--host-root=/nonexistent"], "error: --host-root: /nonexistent: "),
    ],
)
def test_serve_refuses_a_set_it_cannot_read_before_anything_else(
    flags: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert serve_main(["serve", "--node-name=n", *flags]) == 2
    assert capsys.readouterr().err.startswith(said)
