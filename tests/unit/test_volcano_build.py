"""The test bed's Volcano build: Huawei's source edits on small texts (and on the real upstream
files where the snapshots are at hand), where each source snapshot comes from, and the pins."""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from testbed import build, huawei_patches, volcano_build
from testbed.snapshots import Snapshot, SourceMissing, git_clone, obtain, upstream_dir
from testbed.volcano_build import Volcano, module_gomod, volcanoes

ALLOCATE = """\
		switch {
		case len(nodes) == 1: // If only one node after predicate, just use it.
			bestNode = nodes[0]
		case len(nodes) > 1: // If more than one node after predicate, using "the best" one
			nodeScores := util.PrioritizeNodes(task, nodes)
			bestNode = util.SelectBestNode(nodeScores)
		}
"""


def test_allocate_scores_a_single_node_too() -> None:
    # sed's N;N joins the case, its body and the next case into one "default:" (the indent
    # before "case" stays, then the twelve spaces of build.sh's replacement).
    assert huawei_patches.score_single_node(ALLOCATE) == (
        "\t\tswitch {\n"
        "\t\t            default:\n"
        "\t\t\tnodeScores := util.PrioritizeNodes(task, nodes)\n"
        "\t\t\tbestNode = util.SelectBestNode(nodeScores)\n"
        "\t\t}\n"
    )


def test_allocate_edit_leaves_a_case_without_two_lines_after_it() -> None:
    # GNU sed's N at the last line prints what it holds unchanged.
    tail = "x\ncase len(nodes) == 1:\nlast"
    assert huawei_patches.score_single_node(tail) == tail


def test_ignore_action_only_where_the_file_has_no_ignore() -> None:
    text = "func f() {\n\tswitch action {\n\tcase a:\n\t}\n}\n"
    assert 'switch action { case "Ignore" : return nil\n' in huawei_patches.ignore_action(text)
    assert huawei_patches.ignore_action(text + "// Ignore\n") == text + "// Ignore\n"
    # Volcano v1.12.0 switches on action.Action: upstream's sed finds nothing there.
    v112 = "\tswitch action.Action {\n"
    assert huawei_patches.ignore_action(v112) == v112


def test_klog_v2_imports() -> None:
    source = b'import (\n\t"k8s.io/klog"\n\t"k8s.io/klog/v2"\n\t"k8s.io/klogx"\n)\n'
    assert huawei_patches.klog_v2(source) == (
        b'import (\n\t"k8s.io/klog/v2"\n\t"k8s.io/klog/v2"\n\t"k8s.io/klogx"\n)\n'
    )


def test_klog_edit_walks_the_files_find_would(tmp_path: Path) -> None:
    for relative in ("a.go", "x/doc/b.go", "docs/c.md", ".git/d", ".github/e.yml", "doc/f.md"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("")
    (tmp_path / "link.go").symlink_to(tmp_path / "a.go")
    found = {p.relative_to(tmp_path).as_posix() for p in huawei_patches.klog_files(tmp_path)}
    assert found == {"a.go", "x/doc/b.go", "docs/c.md"}


def test_pipeline_task_edit() -> None:
    line = "\tif ji.WaitingTaskNum()+ji.ReadyTaskNum() < job.MinAvailable {\n"
    assert huawei_patches.pipeline_tasks(line) == (
        "\tif ji.WaitingTaskNum()+ji.ReadyTaskNum()+ji.PendingBestEffortTaskNum()"
        " < job.MinAvailable {\n"
    )


def test_release_yaml_names_the_plugin_built() -> None:
    shipped = (
        "      - name: volcano-npu_v6.0.RC1_linux-x86_64\n"
        "          image: volcanosh/vc-scheduler:v1.12.0\n"
        '          command: [ "/bin/ash" ]\n'
    )
    assert huawei_patches.release_yaml(shipped, "v1.12.0", "volcano-npu_v26.1.0", "v26.1.0") == (
        "      - name: volcano-npu_v26.1.0\n"
        "          image: volcanosh/vc-scheduler:v1.12.0-v26.1.0\n"
        '          command: [ "/bin/sh" ]\n'
    )


def test_older_volcano_edits_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"v1\.9\.0"):
        huawei_patches.patch_all_source(tmp_path, "v1.9.0")


def _member(tarball: Path, suffix: str) -> str:
    with tarfile.open(tarball) as archive:
        (name,) = [n for n in archive.getnames() if n.endswith(suffix)]
        stream = archive.extractfile(name)
        assert stream is not None
        return stream.read().decode()


def test_the_edits_apply_to_the_pinned_upstream_files() -> None:
    """build.sh's sed finds nothing silently; the test bed's copy of each edit must find its
    lines in the pinned Volcano and plugin."""
    upstream = upstream_dir()
    (v112,) = [v for v in volcanoes() if v.plugin is not None]
    assert v112.plugin is not None
    volcano = upstream / v112.source.tarball
    plugin = upstream / v112.plugin.snapshot.tarball
    if not (volcano.exists() and plugin.exists()):
        pytest.skip(f"the snapshots are not in {upstream}")
    allocate = _member(volcano, "/" + huawei_patches.ALLOCATE_GO.as_posix())
    assert "case len(nodes) == 1:" not in huawei_patches.score_single_node(allocate)
    npu = _member(plugin, "component/ascend-for-volcano/npu.go")
    assert "PendingBestEffortTaskNum" in huawei_patches.pipeline_tasks(npu)


def _snapshot(tmp_path: Path, name: str = "thing-v1") -> tuple[Snapshot, Path]:
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = b"module thing\n"
        member = tarfile.TarInfo(f"{name}/go.mod")
        member.size = len(data)
        archive.addfile(member, io.BytesIO(data))
    (upstream / f"{name}.tar.gz").write_bytes(buffer.getvalue())
    digest = hashlib.sha256(buffer.getvalue()).hexdigest()
    return Snapshot(name, "https://example.invalid/thing", "v1", "c0ffee", digest), upstream


def _no_clone(snapshot: Snapshot, dest: Path) -> str | None:
    raise AssertionError("cloned though a local source is there")


def test_a_folder_comes_before_the_tarball(tmp_path: Path) -> None:
    snapshot, upstream = _snapshot(tmp_path)
    (upstream / snapshot.name).mkdir()
    (upstream / snapshot.name / "go.mod").write_text("module folder\n")
    said = obtain(snapshot, tmp_path / "src" / "thing", upstream, _no_clone)
    assert "folder" in said
    assert (tmp_path / "src/thing/go.mod").read_text() == "module folder\n"


def test_the_tarball_is_checked_and_unpacked_without_its_top_folder(tmp_path: Path) -> None:
    snapshot, upstream = _snapshot(tmp_path)
    dest = tmp_path / "src" / "thing"
    dest.mkdir(parents=True)
    (dest / "stale").write_text("")
    assert "sha256 as pinned" in obtain(snapshot, dest, upstream, _no_clone)
    assert sorted(p.name for p in dest.iterdir()) == ["go.mod"]
    wrong = Snapshot(snapshot.name, snapshot.repository, "v1", "c0ffee", "0" * 64)
    with pytest.raises(SourceMissing, match=r"has sha256 .* pins 0000"):
        obtain(wrong, dest, upstream, _no_clone)


def test_a_clone_when_nothing_is_local(tmp_path: Path) -> None:
    snapshot, _ = _snapshot(tmp_path)
    cloned: list[Path] = []

    def clone(wanted: Snapshot, dest: Path) -> str | None:
        cloned.append(dest)
        return None

    said = obtain(snapshot, tmp_path / "src" / "thing", tmp_path / "empty", clone)
    assert cloned == [tmp_path / "src" / "thing"]
    assert said == "git clone of https://example.invalid/thing v1 (commit c0ffee)"


def test_no_source_says_what_was_looked_for(tmp_path: Path) -> None:
    snapshot, _ = _snapshot(tmp_path)
    with pytest.raises(SourceMissing) as missing:
        obtain(snapshot, tmp_path / "src" / "thing", tmp_path / "empty", lambda s, d: "offline")
    message = str(missing.value)
    for part in (
        f"{tmp_path}/empty/thing-v1/",
        f"{tmp_path}/empty/thing-v1.tar.gz",
        "TESTBED_UPSTREAM",
        "git clone --branch v1 https://example.invalid/thing",
        "offline",
    ):
        assert part in message


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_clone_takes_the_tag_and_checks_its_commit(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "component" / "plugin").mkdir(parents=True)
    (repo / "component" / "plugin" / "a.go").write_text("package main\n")
    (repo / "other").mkdir()
    (repo / "other" / "b.go").write_text("package other\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    for step in (["init", "-q"], ["add", "."], ["commit", "-qm", "one"], ["tag", "v1"]):
        subprocess.run([*git, *step], check=True)
    commit = subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    pinned = Snapshot("x", f"file://{repo}", "v1", commit, "0" * 64, "component/plugin")
    assert git_clone(pinned, tmp_path / "out") is None
    assert (tmp_path / "out/component/plugin/a.go").exists()
    assert not (tmp_path / "out/other").exists()  # only the pinned folder is checked out
    moved = Snapshot("x", f"file://{repo}", "v1", "1" * 40, "0" * 64)
    why = git_clone(moved, tmp_path / "moved")
    assert why is not None and f"is commit {commit}" in why
    assert not (tmp_path / "moved").exists()


def test_a_missing_source_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(volcano: Volcano) -> None:
        raise SourceMissing("no source of it")

    monkeypatch.setattr(volcano_build, "build", missing)
    monkeypatch.setattr(sys, "argv", ["build", "volcano"])
    with pytest.raises(SystemExit) as exited:
        build.main()
    assert exited.value.code == 2


def test_the_plugin_is_named_as_its_file() -> None:
    """Volcano registers a plugin under its file's stem; the plugin answers to PluginName."""
    for volcano in volcanoes():
        if volcano.plugin is None:
            continue
        (plugin,) = [b for b in volcano.builds() if b.output.endswith(".so")]
        assert plugin.output == f"{volcano.plugin.name}.so"
        assert f".PluginName={volcano.plugin.name}" in plugin.ldflags
        # A Go plugin loads only into a binary built with the same flags.
        (scheduler,) = [b for b in volcano.builds() if b.output == "vc-scheduler"]
        assert scheduler.cgo and plugin.cgo
        assert scheduler.flags[0] == plugin.flags[0] == "-mod=mod"


def test_module_builds_require_the_pinned_version_and_the_snapshot_apis() -> None:
    for volcano in volcanoes():
        if volcano.module is None:
            continue
        assert volcano_build.required(volcano) == volcano.version
        gomod = (volcano.home / "go.mod").read_text()
        assert (
            "volcano.sh/apis => ../../../.testbed/src/"
            f"{volcano.source.name}/staging/src/volcano.sh/apis" in gomod
        )
        assert f"{volcano.module} {volcano.version}" in (volcano.home / "go.sum").read_text()


def test_module_gomod_keeps_volcanos_replaces(tmp_path: Path) -> None:
    (volcano,) = [v for v in volcanoes() if v.module is not None]
    upstream = (
        "module volcano.sh/volcano\n\ngo 1.25.0\n\nrequire k8s.io/api v0.35.3\n\n"
        "replace (\n\tk8s.io/api => k8s.io/api v0.35.3\n"
        "\t// in-tree\n\tvolcano.sh/apis => ./staging/src/volcano.sh/apis\n)\n"
    )
    written = module_gomod(volcano, upstream)
    assert written.startswith(f"module testbed/{volcano.name}\n\ngo 1.25.0\n")
    assert f"require volcano.sh/volcano {volcano.version}\n" in written
    assert "\tk8s.io/api => k8s.io/api v0.35.3\n" in written
    assert "in-tree" not in written


def test_every_snapshot_pin_is_whole() -> None:
    for volcano in volcanoes():
        plugin = volcano.plugin.snapshot if volcano.plugin else None
        for snapshot in (volcano.source, volcano.apis, plugin):
            if snapshot is None:
                continue
            assert len(snapshot.commit) == 40 and len(snapshot.sha256) == 64
            assert snapshot.repository.startswith("https://github.com/")


def test_the_adapter_is_built_with_huaweis_plugins_flags_and_named_as_its_file() -> None:
    """The adapter loads into the vc-scheduler Huawei's plugin loads into: the same flags,
    cgo on, its PluginName its file's stem; not built where Volcano loads no plugin."""
    for volcano in volcanoes():
        adapter = volcano.adapter_build()
        if volcano.plugin is None:
            assert adapter is None and volcano.adapter_up_to_date()
            continue
        assert adapter is not None
        (huawei,) = [b for b in volcano.builds() if b.output == f"{volcano.plugin.name}.so"]
        assert adapter.output == f"{volcano_build.ADAPTER_NAME}.so"
        assert adapter.cgo and adapter.flags == huawei.flags
        assert adapter.package.endswith("/pkg/scheduler/plugins/ascend-npu-adapter")
        assert adapter.ldflags.endswith(f"{adapter.package}.PluginName=ascend-npu-adapter")
        assert adapter.ldflags.startswith("-s -linkmode=external")
        assert volcano.plugin.name not in adapter.ldflags


def test_a_change_of_the_adapter_changes_its_stamp_alone(tmp_path: Path) -> None:
    source = tmp_path / "volcano_adapter"
    source.mkdir()
    (source / "adapter.go").write_text("package main\n")
    before = volcano_build.adapter_digest(source)
    (source / "adapter.go").write_text("package main // changed\n")
    assert volcano_build.adapter_digest(source) != before
    (source / "other.go").write_text("package main\n")
    assert len({before, volcano_build.adapter_digest(source)}) == 2
    assert volcano_build.adapter_digest() == volcano_build.adapter_digest(
        volcano_build.ADAPTER_SOURCE
    )


def test_a_clone_made_elsewhere_finds_the_snapshots_beside_its_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TESTBED_UPSTREAM", raising=False)
    origin, clone = tmp_path / "work" / "main", tmp_path / "ci" / "clone"
    (tmp_path / "work" / "shared" / "upstream").mkdir(parents=True)
    origin.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(origin)], check=True)
    subprocess.run(
        [*git, "-C", str(origin), "commit", "-q", "--allow-empty", "-m", "x"], check=True
    )
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
    assert upstream_dir(clone) == (tmp_path / "work" / "shared" / "upstream").resolve()
    # Beside the clone itself wins; with neither, the clone's own is named (for the error).
    (tmp_path / "ci" / "shared" / "upstream").mkdir(parents=True)
    assert upstream_dir(clone) == tmp_path / "ci" / "shared" / "upstream"
