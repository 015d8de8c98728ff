"""Upstream source snapshots the test bed builds from (Volcano and Huawei's Volcano plugin).

Volcano v1.12.0 and ``volcano.sh/apis`` v1.12.0 cannot be had from the Go module proxy here, and
Huawei's ``ascend-for-volcano`` is no Go module at all, so they are built from source: each
snapshot pinned in ``testbed/versions.toml`` (``[volcano.snapshots."<name>"]``) is taken from the
first of

1. ``<upstream>/<name>/``: a folder holding what the tarball's one top folder holds (copied, not
   checked: a folder is the developer's own);
2. ``<upstream>/<name>.tar.gz``: its sha256 must equal the pin (a different file is an error);
3. ``git clone --branch <tag>`` of its public repository (only ``subdir`` when one is pinned),
   where the internet can be reached; its commit must equal the pin.

``<upstream>`` is ``$TESTBED_UPSTREAM``, else ``../shared/upstream`` of the project root (or of the
local checkout it was cloned from, when only that one has it: ``upstream_dir``). When
none of the three is there, :class:`SourceMissing` says what was looked for.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


class SourceMissing(Exception):
    """No source of a snapshot could be had (``python -m testbed.build`` exits 2 on it)."""


@dataclass(frozen=True)
class Snapshot:
    name: str  # the tarball's name without ``.tar.gz``, and the folder's
    repository: str
    tag: str
    commit: str
    sha256: str  # of ``<name>.tar.gz``
    subdir: str | None = None  # the only part of the repository the tarball holds

    @property
    def tarball(self) -> str:
        return f"{self.name}.tar.gz"

    @classmethod
    def from_toml(cls, name: str, entry: dict[str, Any]) -> Snapshot:
        return cls(
            name,
            str(entry["repository"]),
            str(entry["tag"]),
            str(entry["commit"]),
            str(entry["sha256"]),
            None if entry.get("subdir") is None else str(entry["subdir"]),
        )


def upstream_dir(root: Path = ROOT) -> Path:
    """``$TESTBED_UPSTREAM``, else ``../shared/upstream`` beside the project root, else beside
    the checkout this one was cloned from when that is a local folder (a clean clone made
    elsewhere, as CI makes one, still finds the snapshots beside the original)."""
    configured = os.environ.get("TESTBED_UPSTREAM")
    if configured:
        return Path(configured)
    beside = root.parent / "shared" / "upstream"
    origin = _local_origin(root)
    if beside.is_dir() or origin is None:
        return beside
    return origin.parent / "shared" / "upstream"


def _local_origin(root: Path) -> Path | None:
    """The folder ``root`` was cloned from, when its ``origin`` is a local path."""
    try:
        url = subprocess.run(
            ["git", "-C", str(root), "config", "--get", "remote.origin.url"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        return None
    path = Path(url.removeprefix("file://"))
    return path.resolve() if url and path.is_absolute() and path.is_dir() else None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _writable(tree: Path) -> None:
    """Sources copied from a read-only folder are patched and later removed: owner-writable."""
    for path in [tree, *tree.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _unpack(tarball: Path, dest: Path) -> None:
    """The tarball's one top folder becomes ``dest``."""
    with tempfile.TemporaryDirectory(dir=dest.parent) as scratch:
        with tarfile.open(tarball, "r:gz") as archive:
            archive.extractall(scratch, filter="data")
        tops = list(Path(scratch).iterdir())
        if len(tops) != 1 or not tops[0].is_dir():
            raise SourceMissing(f"{tarball} does not hold one top folder")
        tops[0].rename(dest)
    _writable(dest)


Cloner = Callable[[Snapshot, Path], str | None]


def git_clone(snapshot: Snapshot, dest: Path) -> str | None:
    """Clone the snapshot's tag into ``dest``; None when done, else why not."""
    git = shutil.which("git")
    if git is None:
        return "git is not installed"
    argv = [git, "-c", "advice.detachedHead=false", "clone", "--quiet", "--depth", "1"]
    if snapshot.subdir is not None:  # MindCluster is large; the plugin is one folder of it
        argv += ["--filter=blob:none", "--sparse"]
    argv += ["--branch", snapshot.tag, snapshot.repository, str(dest)]
    steps = [argv]
    if snapshot.subdir is not None:
        steps.append([git, "-C", str(dest), "sparse-checkout", "set", snapshot.subdir])
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900, check=False)
        except subprocess.TimeoutExpired:
            shutil.rmtree(dest, ignore_errors=True)
            return f"`{' '.join(step)}` timed out"
        if done.returncode != 0:
            shutil.rmtree(dest, ignore_errors=True)
            return f"`{' '.join(step)}` failed: {done.stderr.strip()}"
    head = subprocess.run(
        [git, "-C", str(dest), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if head != snapshot.commit:
        shutil.rmtree(dest, ignore_errors=True)
        return f"tag {snapshot.tag} is commit {head} there, versions.toml pins {snapshot.commit}"
    return None


def obtain(
    snapshot: Snapshot,
    dest: Path,
    upstream: Path | None = None,
    clone: Cloner = git_clone,
) -> str:
    """Put the snapshot's tree at ``dest`` (replacing what was there); returns where it came
    from, in words for the build's log."""
    upstream = upstream_dir() if upstream is None else upstream
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    folder = upstream / snapshot.name
    if folder.is_dir():
        shutil.copytree(folder, dest, symlinks=True)
        _writable(dest)
        return f"the folder {folder} (not checked against the pin)"
    tarball = upstream / snapshot.tarball
    if tarball.is_file():
        found = sha256_of(tarball)
        if found != snapshot.sha256:
            raise SourceMissing(
                f"{tarball} has sha256 {found}; versions.toml pins {snapshot.sha256}"
            )
        _unpack(tarball, dest)
        return f"{tarball} (sha256 as pinned)"
    why = clone(snapshot, dest)
    if why is None:
        return f"git clone of {snapshot.repository} {snapshot.tag} (commit {snapshot.commit})"
    raise SourceMissing(
        f"no source of {snapshot.name}: neither the folder {folder}/ nor {tarball} is there "
        f"(set TESTBED_UPSTREAM to the folder that holds them), and a `git clone --branch "
        f"{snapshot.tag} {snapshot.repository}` did not work: {why}"
    )
