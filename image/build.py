"""``python -m image.build``: the project's container image for amd64 and arm64, built without a
container engine and without running a line of the other architecture's code.

The recipe, one layer each (docs/image.md says why this and no Dockerfile):

1. Debian bookworm's ``python3`` for the target architecture and what it depends on, extracted by
   mmdebstrap's ``extract`` variant: no maintainer script runs, so arm64 needs no emulation. What
   a container does not use is pruned (documentation but the copyright files, apt's and
   mmdebstrap's traces, device nodes); a dpkg status is written from the packages' own control
   fields, so that image scanners see what is installed; ``/etc/passwd`` names the non-root user
   10001; the standard library is compiled to ``.pyc`` here, since the manifests mount the root
   filesystem read-only and no process could write them.
2. The runtime dependencies: the wheels of ``image/requirements.lock`` (every file hashed),
   installed by pip for the target platform (``--platform``, ``--only-binary=:all:``).
3. The project's own packages, as the wheel its ``pyproject.toml`` builds.

Each stage's folder becomes its layer (a gzip'd tar, ``image/layout.py``) when it is made, and is
cached with it under ``~/.cache/ascend-npu-k8s/image`` (outside the clone, so that a fresh clone on
the same machine reuses it) by a hash of what it is made from: this file, the lock, the project's
sources. The image is then only its configuration, manifests and a multi-platform index written
into an OCI image layout beside the layers: no RUN step, no container engine, no image store.

``--lock`` regenerates the lock with uv for both platforms (they must resolve alike).

Exit status 2 when a tool is missing or the user is not root, 1 when a step fails (its own output
printed).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.parser import HeaderParser
from functools import partial
from pathlib import Path
from typing import Any

from image import layout

ROOT = Path(__file__).resolve().parent.parent
RECIPE = Path(__file__).resolve()
LOCK = ROOT / "image" / "requirements.lock"
NAME = "ascend-npu-k8s"
SUITE = "bookworm"
# python-is-python3: the manifests run ``python -m ...``. libstdc++6: grpcio's extension is C++,
# and a manylinux wheel links libstdc++.so.6 from the system without carrying it (PEP 599's
# library list; pypa/auditwheel src/auditwheel/policy/manylinux-policy.json).
DEBIAN_PACKAGES = ("python3", "python-is-python3", "libstdc++6")
PYTHON = "3.11"  # bookworm's python3
ABI = "cp311"
GLIBC = (2, 36)  # bookworm's libc6: the newest manylinux tag a wheel may carry
SITE = "usr/local/lib/python3.11/dist-packages"  # on Debian's python3 sys.path, empty before
USER = 10001
ENTRYPOINT = ("python", "-m")
CMD = ("scheduler_core", "serve")
ENV = (
    ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("LANG", "C.UTF-8"),
    ("PYTHONUNBUFFERED", "1"),
    # A crash in C (a signal that kills the process) leaves every thread's Python traceback in
    # the log: once, on a loaded machine, the scheduler died by SIGABRT on SIGTERM, silently.
    ("PYTHONFAULTHANDLER", "1"),
    ("GRPC_VERBOSITY", "ERROR"),
)
PORTS = (8888,)
TOOLS = ("mmdebstrap", "dpkg-deb")

# Relative paths pruned from the Debian root filesystem (fnmatch: ``*`` spans folders too),
# unless kept: a container runtime supplies /dev, /etc/hostname and /etc/resolv.conf.
PRUNED = (
    "dev/*",
    "etc/apt",
    "etc/fstab",
    "etc/hostname",
    "etc/resolv.conf",
    "var/lib/apt",
    "var/cache/*",
    "var/log/*",
    "usr/share/doc/*/*",
    "usr/share/info",
    "usr/share/lintian",
    "usr/share/locale",
    "usr/share/man",
)
KEPT = ("usr/share/doc/*/copyright",)
PASSWD = (
    "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    f"ascend:x:{USER}:{USER}:{NAME}:/nonexistent:/usr/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
)
GROUP = f"root:x:0:\nascend:x:{USER}:\nnogroup:x:65534:\n"
# The extract variant leaves dpkg's status empty; each package's control fields fill it.
STATUS_HOOK = (
    'for deb in "$1"/var/cache/apt/archives/*.deb; do dpkg-deb --field "$deb"; '
    "printf 'Status: install ok installed\\n\\n'; done > \"$1\"/var/lib/dpkg/status"
)


class MissingTool(Exception):
    """The build cannot start here (exit status 2)."""


class BuildError(Exception):
    """A step failed (exit status 1); the message carries the step's own output."""


@dataclass(frozen=True)
class Platform:
    arch: str  # Debian's and OCI's name
    machine: str  # the kernel's, in wheel tags
    variant: str | None  # OCI's: arm64 images say v8 (the Docker Official Images do)


PLATFORMS = (Platform("amd64", "x86_64", None), Platform("arm64", "aarch64", "v8"))


@dataclass(frozen=True)
class Image:
    layout: Path  # an OCI image layout directory
    reference: str  # the tag of its multi-architecture index
    summary: str


def platform_tags(machine: str, glibc: tuple[int, int] = GLIBC) -> tuple[str, ...]:
    """The manylinux tags a glibc of this version runs, newest first, as pip would compute them
    on such a machine (pypa/packaging src/packaging/_manylinux.py ``platform_tags``); pip's
    ``--platform`` takes them literally."""
    oldest = 5 if machine in {"x86_64", "i686"} else 17
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags: list[str] = []
    for minor in range(glibc[1], oldest - 1, -1):
        tags.append(f"manylinux_{glibc[0]}_{minor}_{machine}")
        if minor in legacy:
            tags.append(f"{legacy[minor]}_{machine}")
    return tuple(tags)


def pruned(relative: str) -> bool:
    """Whether the Debian root filesystem's entry at this path goes."""
    if any(fnmatch.fnmatchcase(relative, pattern) for pattern in KEPT):
        return False
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in PRUNED)


@dataclass(frozen=True)
class Project:
    version: str
    files: tuple[str, ...]  # what its wheel is built from, relative to the checkout


def project(root: Path = ROOT) -> Project:
    """The project's version and the files its wheel is built from: pyproject.toml, the readme
    and license files its metadata carries, and the packages' folders
    (``[tool.setuptools.packages.find] include``), bytecode left out."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    metadata = pyproject["project"]
    readme = metadata.get("readme", [])
    files = {"pyproject.toml", *([readme] if isinstance(readme, str) else readme.get("file", []))}
    files |= {
        p.relative_to(root).as_posix()
        for pattern in metadata.get("license-files", [])
        for p in root.glob(pattern)
    }
    patterns = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    for folder in root.iterdir():
        if folder.is_dir() and any(fnmatch.fnmatchcase(folder.name, p) for p in patterns):
            files |= {
                p.relative_to(root).as_posix()
                for p in folder.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            }
    return Project(str(metadata["version"]), tuple(sorted(files)))


def fingerprint(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def sources_digest(root: Path, files: Iterable[str]) -> str:
    return fingerprint(*(x for f in files for x in (f, (root / f).read_bytes())))


def labels(version: str) -> dict[str, str]:
    return {
        "org.opencontainers.image.title": NAME,
        "org.opencontainers.image.description": (
            "Ascend NPU device-plugin agent, DRA driver and HCCS-affine scheduler extender"
        ),
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.version": version,
    }


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / NAME / "image"


def _run(step: str, argv: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(
        argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip().splitlines()[-40:]
        raise BuildError(
            f"{step}: {Path(argv[0]).name} exited {done.returncode}:\n" + "\n".join(output)
        )
    return done.stdout


def _pip(step: str, *args: str) -> None:
    _run(step, [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args])


def _compile(root: Path, folder: Path) -> None:
    """``.pyc`` beside the sources, as the image's interpreter would write them (same minor
    version: same bytecode), with the paths they would have there."""
    compileall = [sys.executable, "-m", "compileall", "-q", "-j", "0"]
    _run("compile", [*compileall, "-s", str(root), "-p", "/", str(folder)])


def debian_rootfs(platform: Platform, dest: Path) -> None:
    debian_extract(platform, DEBIAN_PACKAGES, dest)
    (dest / "etc" / "passwd").write_text(PASSWD)
    (dest / "etc" / "group").write_text(GROUP)
    _compile(dest, dest / "usr" / "lib" / f"python{PYTHON}")


def debian_extract(platform: Platform, packages: Sequence[str], dest: Path) -> None:
    """``packages`` of bookworm for ``platform`` and what they depend on, extracted without a
    maintainer script run, what a container does not use pruned, symlinks made relative."""
    # No mirror given: mmdebstrap takes deb.debian.org with bookworm-updates and -security.
    _run(
        "mmdebstrap",
        [
            "mmdebstrap",
            "--variant=extract",
            f"--architectures={platform.arch}",
            f"--include={','.join(packages)}",
            f"--extract-hook={STATUS_HOOK}",
            SUITE,
            str(dest),
        ],
    )
    for folder, subfolders, files in os.walk(dest):
        for name in [*subfolders, *files]:
            path = Path(folder) / name
            if pruned(path.relative_to(dest).as_posix()):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                    subfolders.remove(name)
                else:
                    path.unlink()
    relative_symlinks(dest)


def relative_symlinks(root: Path) -> None:
    """Absolute symlinks made relative, to the same file in the image: here an absolute one
    points into this machine (``usr/lib/python3.11/sitecustomize.py`` ->
    ``/etc/python3.11/sitecustomize.py``: compiled from this machine's file, stale in the
    image)."""
    for folder, subfolders, files in os.walk(root):
        for name in [*subfolders, *files]:
            link = Path(folder) / name
            if link.is_symlink() and (target := os.readlink(link)).startswith("/"):
                link.unlink()
                link.symlink_to(os.path.relpath(root / target.lstrip("/"), link.parent))


def dependencies(platform: Platform, dest: Path) -> None:
    site = dest / SITE
    _pip(
        "pip install (dependencies)",
        "install",
        "--target",
        str(site),
        "--no-deps",
        "--no-compile",
        "--require-hashes",
        "--only-binary=:all:",
        "--implementation=cp",
        f"--python-version={PYTHON}",
        f"--abi={ABI}",
        *(f"--platform={tag}" for tag in platform_tags(platform.machine)),
        "-r",
        str(LOCK),
    )
    # Console scripts, whose first line names this machine's interpreter: the image runs -m.
    shutil.rmtree(site / "bin", ignore_errors=True)
    _compile(dest, site)


def project_site(root: Path, files: Iterable[str], dest: Path) -> None:
    """The project's wheel, built from a copy of its sources (so that no build folder appears
    in the checkout) and installed where the dependencies are."""
    with tempfile.TemporaryDirectory(prefix="ascend-image-wheel-") as scratch:
        source = Path(scratch) / "source"
        for name in files:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, source / name)
        wheels = Path(scratch) / "wheels"
        _pip("pip wheel (project)", "wheel", "--no-deps", "--wheel-dir", str(wheels), str(source))
        (wheel,) = wheels.glob("*.whl")
        _pip(
            "pip install (project)",
            "install",
            "--target",
            str(dest / SITE),
            "--no-deps",
            "--no-compile",
            str(wheel),
        )
    _compile(dest, dest / SITE)


@dataclass(frozen=True)
class Stage:
    """A cached build stage: the folder it made and that folder as an image layer."""

    tree: Path
    layer: layout.Layer
    created_by: str


def stage(
    cache: Path,
    kind: str,
    key: str,
    created_by: str,
    make: Callable[[Path], None],
    *,
    say: Callable[[str], None],
) -> Stage:
    """``cache/<kind>-<key>``: ``tree/`` made by ``make`` and ``layer.tar.gz`` from it, when
    missing; the kind's older folders are removed once the new one is complete."""
    final = cache / f"{kind}-{key[:16]}"
    if not (final / "layer.json").is_file():
        say(f"{kind}: building")
        started = time.monotonic()
        cache.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=cache))
        try:
            (work / "tree").mkdir(mode=0o755)
            make(work / "tree")
            made = layout.write_layer(work / "tree", work / "layer.tar.gz")
            (work / "layer.json").write_text(json.dumps(made.describe()))
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        _settle(cache, kind, work, final, "layer.json")
        say(f"{kind}: built in {time.monotonic() - started:.0f} s")
    else:
        say(f"{kind}: cached")
    described = json.loads((final / "layer.json").read_text())
    made = layout.Layer(final / "layer.tar.gz", **described)
    return Stage(final / "tree", made, created_by)


def _settle(cache: Path, kind: str, work: Path, final: Path, marker: str) -> None:
    """``work`` made ``final``, the kind's other folders removed. Two builds of one stage can
    run at once (the tests' workers each build the image they test): the second to finish
    keeps the first's, which the first may be reading, and drops its own."""
    for old in cache.glob(f"{kind}-*"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    try:
        work.rename(final)
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
        if not (final / marker).is_file():
            raise


def image_config(platform: Platform, version: str, stages: Sequence[Stage]) -> dict[str, Any]:
    """The image configuration but its rootfs (opencontainers/image-spec config.md)."""
    config = {
        "User": str(USER),
        "Env": [f"{key}={value}" for key, value in ENV],
        "Entrypoint": list(ENTRYPOINT),
        "Cmd": list(CMD),
        "WorkingDir": "/",
        "ExposedPorts": {f"{port}/tcp": {} for port in PORTS},
        "Labels": labels(version),
    }
    return _configuration(platform, config, stages)


def scheduler_config(
    platform: Platform,
    *,
    user: int,
    entrypoint: Sequence[str],
    title: str,
    description: str,
    version: str,
    stages: Sequence[Stage],
) -> dict[str, Any]:
    """The configuration of a scheduler's image (Volcano's, kube-scheduler-ascend's): its
    entrypoint run as ``user`` from ``/``, the standard PATH."""
    config = {
        "User": str(user),
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
        "Entrypoint": list(entrypoint),
        "WorkingDir": "/",
        "Labels": {
            "org.opencontainers.image.title": title,
            "org.opencontainers.image.description": description,
            "org.opencontainers.image.licenses": "Apache-2.0",
            "org.opencontainers.image.version": version,
        },
    }
    return _configuration(platform, config, stages)


def _configuration(
    platform: Platform, config: dict[str, Any], stages: Sequence[Stage]
) -> dict[str, Any]:
    """An image configuration around its ``config`` object: the platform, the stages' history."""
    created = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return {
        "created": created,
        "architecture": platform.arch,
        **({"variant": platform.variant} if platform.variant else {}),
        "os": "linux",
        "config": config,
        "history": [{"created": created, "created_by": s.created_by} for s in stages],
    }


def licences(dest: Path, found: Iterable[tuple[str, Path]]) -> None:
    """Each ``(folder, LICENSE)`` as ``/usr/share/doc/<folder>/copyright``, Debian's place."""
    for folder, licence in found:
        doc = dest / "usr" / "share" / "doc" / folder
        doc.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(licence, doc / "copyright")


def oci_platform(platform: Platform) -> dict[str, str]:
    found = {"architecture": platform.arch, "os": "linux"}
    return {**found, "variant": platform.variant} if platform.variant else found


def dpkg_packages(rootfs: Path) -> dict[str, str]:
    """Package → version from the dpkg status the build wrote."""
    found: dict[str, str] = {}
    for paragraph in (rootfs / "var/lib/dpkg/status").read_text().split("\n\n"):
        fields = dict(
            line.split(": ", 1)
            for line in paragraph.splitlines()
            if ": " in line and line[0] != " "
        )
        if "Package" in fields:
            found[fields["Package"]] = fields["Version"]
    return found


def python_packages(site: Path) -> dict[str, str]:
    """Distribution → version from the installed ``*.dist-info/METADATA``."""
    found: dict[str, str] = {}
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        headers = HeaderParser().parsestr(metadata.read_text())
        found[headers["Name"]] = headers["Version"]
    return found


def folder_size(path: Path) -> int:
    return sum(
        (Path(folder) / name).lstat().st_size
        for folder, _, files in os.walk(path)
        for name in files
    )


def largest_folders(roots: Iterable[Path], count: int = 10) -> list[tuple[int, str]]:
    """The image's largest folders: each installed Python distribution's, each under
    /usr/<x>/ but /usr/local, and each other top folder (the roots are layers of one image)."""
    sizes: dict[str, int] = {}
    for root in roots:
        candidates = [*root.glob(f"{SITE}/*"), *root.glob("usr/*/*"), *root.glob("*")]
        for path in candidates:
            relative = path.relative_to(root).as_posix()
            if path.is_symlink() or not path.is_dir() or relative == "usr":
                continue
            if relative.startswith("usr/local") and not relative.startswith(SITE):
                continue
            sizes["/" + relative] = sizes.get("/" + relative, 0) + folder_size(path)
    return sorted(((size, name) for name, size in sizes.items()), reverse=True)[:count]


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def summary(version: str, stages: Mapping[str, Sequence[Stage]]) -> str:
    """What is in the image: sizes per architecture, Python and its packages, Debian's packages
    and the largest folders (of the first architecture's layers)."""
    first = next(iter(stages.values()))
    debian = dpkg_packages(first[0].tree)
    python = {k: v for s in first[1:] for k, v in python_packages(s.tree / SITE).items()}
    lines = [f"{NAME} {version} for {', '.join(stages)}:"]
    for arch, layers in stages.items():
        sizes = " + ".join(_mb(s.layer.size) for s in layers)
        compressed = sum(s.layer.size for s in layers)
        unpacked = sum(folder_size(s.tree) for s in layers)
        lines.append(f"  {arch}: {_mb(compressed)} compressed ({sizes}), {_mb(unpacked)} unpacked")
    python_version = debian[f"python{PYTHON}"]
    lines.append(
        f"Python {python_version.split('-')[0]} (Debian python{PYTHON} {python_version}); "
        f"user {USER}; entrypoint {' '.join(ENTRYPOINT)}; default command {' '.join(CMD)}"
    )
    lines.append(f"Python packages ({len(python)}):")
    lines.append("  " + ", ".join(f"{n} {v}" for n, v in sorted(python.items(), key=_lower)))
    lines.append(f"Debian {SUITE} packages ({len(debian)}):")
    lines.append("  " + ", ".join(f"{n} {v}" for n, v in sorted(debian.items())))
    lines.append(f"Largest folders ({next(iter(stages))}):")
    lines += [f"  {_mb(size):>9}  {name}" for size, name in largest_folders(s.tree for s in first)]
    return "\n".join(lines)


def _lower(item: tuple[str, str]) -> str:
    return item[0].lower()


def missing(*, python: bool = True) -> str | None:
    """Why the build cannot run here, or None (``python``: it compiles ``.pyc`` too)."""
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return (
            f"missing {', '.join(absent)}: on Debian or Ubuntu, as root: "
            "apt-get install -y mmdebstrap"
        )
    if os.geteuid() != 0:
        return "run as root: mmdebstrap extracts the packages with their owners"
    if python and f"{sys.version_info[0]}.{sys.version_info[1]}" != PYTHON:
        return f"run with Python {PYTHON}: it compiles the image's .pyc for {SUITE}'s python3"
    return None


def build(cache: Path | None = None, say: Callable[[str], None] | None = None) -> Image:
    """The image, from the cache when its inputs are unchanged."""
    cache = cache or cache_root()
    tell = say or _say
    reason = missing()
    if reason is not None:
        raise MissingTool(reason)
    sources = project()
    version = sources.version
    recipe = fingerprint(RECIPE.read_bytes())
    pins = fingerprint(LOCK.read_bytes())
    source = sources_digest(ROOT, sources.files)
    made = partial(stage, cache, say=tell)
    wheel = made(
        "project",
        fingerprint(recipe, source),
        f"pip install {NAME} {version} (its wheel)",
        partial(project_site, ROOT, sources.files),
    )
    stages = {
        p.arch: (
            made(
                f"rootfs-{p.arch}",
                fingerprint(recipe, p.arch),
                f"mmdebstrap --variant=extract {SUITE} {' '.join(DEBIAN_PACKAGES)}",
                partial(debian_rootfs, p),
            ),
            made(
                f"deps-{p.arch}",
                fingerprint(recipe, pins, p.arch),
                "pip install --require-hashes -r image/requirements.lock",
                partial(dependencies, p),
            ),
            wheel,
        )
        for p in PLATFORMS
    }
    platforms = [
        (
            oci_platform(p),
            image_config(p, version, stages[p.arch]),
            [s.layer for s in stages[p.arch]],
        )
        for p in PLATFORMS
    ]
    layers = [s for each in stages.values() for s in each]
    return written(
        cache,
        "image",
        reference=version,
        stages=layers,
        platforms=platforms,
        summary=partial(summary, version, stages),
        say=tell,
    )


def written(
    cache: Path,
    kind: str,
    *,
    reference: str,
    stages: Sequence[Stage],
    platforms: list[tuple[dict[str, str], dict[str, Any], list[layout.Layer]]],
    summary: Callable[[], str],
    say: Callable[[str], None],
) -> Image:
    """The OCI layout of ``platforms`` tagged ``reference``, with its summary, in
    ``cache/<kind>-<key>`` (the key: the layers' digests): taken from there when it is, else
    written and the kind's older layouts removed."""
    key = fingerprint(*(s.layer.digest for s in stages))
    images = cache / f"{kind}-{key[:16]}"
    if (images / "summary.txt").is_file():
        say("image: cached")
    else:
        work = Path(tempfile.mkdtemp(prefix=f".{kind}-", dir=cache))
        layout.write(work / "oci", reference, platforms)
        (work / "summary.txt").write_text(summary() + "\n")
        _settle(cache, kind, work, images, "summary.txt")
        say(f"image: written ({images})")
    return Image(images / "oci", reference, (images / "summary.txt").read_text().rstrip("\n"))


def _say(message: str) -> None:
    print(f"image: {message}", flush=True)


def lock() -> None:
    """Regenerate ``image/requirements.lock`` with uv for both platforms; they must agree."""
    uv = shutil.which("uv")
    if uv is None:
        raise MissingTool("uv not found: pip install uv")
    with tempfile.TemporaryDirectory() as scratch:
        texts = set()
        for p in PLATFORMS:
            out = Path(scratch) / f"{p.arch}.lock"
            _run(
                "uv pip compile",
                [
                    uv,
                    "pip",
                    "compile",
                    "pyproject.toml",
                    "--generate-hashes",
                    "--quiet",
                    f"--python-version={PYTHON}",
                    f"--python-platform={p.machine}-manylinux_{GLIBC[0]}_{GLIBC[1]}",
                    "--custom-compile-command=python -m image.build --lock",
                    "-o",
                    str(out),
                ],
                cwd=ROOT,
            )
            texts.add(out.read_text())
    if len(texts) != 1:
        raise BuildError("amd64 and arm64 resolve to different pins: one lock cannot serve both")
    LOCK.write_text(texts.pop())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m image.build",
        description="Build the image for amd64 and arm64 (docs/image.md).",
    )
    parser.add_argument("--lock", action="store_true", help="regenerate image/requirements.lock")
    parser.add_argument("--cache", type=Path, default=None, help=f"default: {cache_root()}")
    args = parser.parse_args(argv)
    if not args.lock:
        push = "Push both architectures: skopeo copy --all"
        return finish(partial(build, args.cache), NAME, push)
    try:
        lock()
    except (MissingTool, BuildError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2 if isinstance(error, MissingTool) else 1
    _say(f"wrote {LOCK.relative_to(ROOT)}")
    return 0


def command(
    argv: list[str] | None,
    module: str,
    description: str,
    make: Callable[[Path | None], Image],
    name: str,
) -> int:
    """``python -m image.<module>``: ``--cache``, then ``finish``; ``make`` builds the image
    ``name`` with that cache."""
    parser = argparse.ArgumentParser(prog=f"python -m image.{module}", description=description)
    parser.add_argument("--cache", type=Path, default=None, help=f"default: {cache_root()}")
    args = parser.parse_args(argv)
    return finish(partial(make, args.cache), name, "Push: skopeo copy")


def finish(make: Callable[[], Image], name: str, push: str) -> int:
    """A build command's end: ``make`` run, what it made printed with how to ``push`` it as
    ``name``; exit status 2 when a tool is missing, 1 when a step fails."""
    try:
        built = make()
    except MissingTool as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(built.summary)
    print(f"OCI layout: {built.layout}, tagged {built.reference}")
    print(
        f"{push} oci:{built.layout}:{built.reference} docker://REGISTRY/{name}:{built.reference}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
