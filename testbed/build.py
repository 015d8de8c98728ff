"""``python -m testbed.build``: the real components the tests run, built from their Go modules.

Each component of ``testbed/versions.toml`` has a Go module of its own under ``testbed/go/<name>``
(``go.mod`` and ``go.sum`` committed; one module each, so that Kubernetes, etcd, Helm and
Prometheus do not force their dependencies' versions on one another). A component is built into
``.testbed/bin`` when its binaries are missing or its stamp (version and ``go.sum``) differs;
otherwise it is skipped. A version changed in ``versions.toml`` moves its module first (``go get``
and ``go mod tidy``; for Kubernetes also the ``replace`` block that points its ~30 staging
modules at their published versions, as every project that builds ``k8s.io/kubernetes`` as a
dependency does: ``k8s.io/kubernetes vX.Y.Z`` ↔ ``k8s.io/api v0.Y.Z``).

``kube-scheduler-ascend`` (the project's ``kube_scheduler_plugin/``: kube-scheduler with the
AscendNPU plugin) is built after Kubernetes, in a copy of its module (``.testbed/src``: the
same go.mod and go.sum, so the same pins as kube-scheduler); its stamp adds a digest of the
plugin's sources.

Volcano (``[volcano]``) is built last, by ``testbed/volcano_build.py``, from source snapshots
and the Go module proxy; ``volcano`` builds every pinned version, ``volcano-<version>`` one.

Exit status 2 when a Volcano source snapshot cannot be had (what was looked for is printed); a
go command that fails stops the build with its own answer printed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from testbed import volcano_build
from testbed.snapshots import SourceMissing
from testbed.volcano_build import volcanoes

ROOT = Path(__file__).resolve().parent.parent
TESTBED = ROOT / "testbed"
BIN = ROOT / ".testbed" / "bin"
STAMPS = ROOT / ".testbed" / "stamps"
SRC = ROOT / ".testbed" / "src"
PLUGIN_SOURCE = ROOT / "kube_scheduler_plugin"
PLUGIN_SCHEDULER = "kube-scheduler-ascend"


@dataclass(frozen=True)
class Component:
    name: str
    module: str
    version: str
    commands: tuple[str, ...]
    binary: str | None  # the binary's name when it is not the command's last path element
    unavailable: str | None = None  # why it cannot be built here (said at every build)

    @property
    def home(self) -> Path:
        return TESTBED / "go" / self.name

    def binaries(self) -> list[Path]:
        if self.binary is not None:
            return [BIN / self.binary]
        return [BIN / command.rsplit("/", 1)[-1] for command in self.commands]

    def packages(self) -> list[str]:
        return [self.module if c == "." else f"{self.module}/{c}" for c in self.commands]


def components(path: Path = TESTBED / "versions.toml") -> list[Component]:
    table = tomllib.loads(path.read_text())
    return [
        Component(
            name,
            str(entry["module"]),
            str(entry["version"]),
            tuple(str(c) for c in entry["commands"]),
            entry.get("binary"),
            entry.get("unavailable"),
        )
        for name, entry in table.items()
        if name != "volcano"  # not a Go module component: testbed/volcano_build.py
    ]


def required(component: Component) -> str | None:
    """The version of the component's module its go.mod requires now."""
    pattern = re.compile(rf"^\s*(?:require\s+)?{re.escape(component.module)}\s+(v\S+)", re.M)
    found = pattern.search((component.home / "go.mod").read_text())
    return found.group(1) if found else None


def _go(
    component: Component, *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> None:
    environment = {**os.environ, "GOFLAGS": "-buildvcs=false", **(env or {})}
    done = subprocess.run(
        ["go", *args],
        cwd=cwd or component.home,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(
            f"testbed: `go {' '.join(args)}` failed for {component.name} "
            f"({component.module} {component.version}); the go command's answer is above"
        )


def _staging_replaces(version: str) -> str:
    """The replace block for k8s.io/kubernetes ``version``: each staging module of its go.mod
    at the matching published v0 version."""
    listed = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
        capture_output=True,
        text=True,
        check=True,
    )
    gomod = Path(re.search(r'"GoMod":\s*"([^"]+)"', listed.stdout).group(1))  # type: ignore[union-attr]
    staging = re.findall(r"^\s*(k8s\.io/\S+)\s+=>\s+\./staging/", gomod.read_text(), re.M)
    published = "v0." + version.removeprefix("v1.")
    lines = "".join(f"\t{module} => {module} {published}\n" for module in staging)
    return f"replace (\n{lines})\n"


def move(component: Component) -> None:
    """Bring the component's module to the version versions.toml names."""
    print(f"testbed: moving {component.name} to {component.module} {component.version}", flush=True)
    gomod = component.home / "go.mod"
    if component.module == "k8s.io/kubernetes":
        text = re.sub(r"\nreplace \(\n.*?\n\)\n", "\n", gomod.read_text(), flags=re.S)
        gomod.write_text(text.rstrip() + "\n\n" + _staging_replaces(component.version))
    _go(component, "get", f"{component.module}@{component.version}")
    _go(component, "mod", "tidy")


def _ldflags(component: Component) -> str:
    """Kubernetes' binaries say their version as its release build stamps it
    (kubernetes/hack/lib/version.sh: ``-X`` of client-go's and component-base's version
    variables); unstamped, the API server reports v0.0.0-master and Helm refuses a chart's
    kubeVersion against it."""
    flags = ["-s", "-w"]
    if component.module == "k8s.io/kubernetes":
        major, minor = component.version.removeprefix("v").split(".")[:2]
        values = {"gitVersion": component.version, "gitMajor": major, "gitMinor": minor}
        for package in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
            flags += [f"-X {package}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


def _stamp(component: Component) -> str:
    digest = hashlib.sha256((component.home / "go.sum").read_bytes()).hexdigest()
    return f"{component.module} {component.version} {digest} {_ldflags(component)}\n"


def up_to_date(component: Component) -> bool:
    stamp = STAMPS / component.name
    return (
        all(binary.exists() for binary in component.binaries())
        and stamp.exists()
        and stamp.read_text() == _stamp(component)
    )


def build(component: Component) -> None:
    if component.unavailable is not None:
        print(
            f"testbed: {component.name} ({component.module} {component.version}) is not built: "
            f"{component.unavailable}",
            flush=True,
        )
        return
    if required(component) != component.version:
        move(component)
    if up_to_date(component):
        print(f"testbed: {component.name} {component.version} is built", flush=True)
        return
    BIN.mkdir(parents=True, exist_ok=True)
    STAMPS.mkdir(parents=True, exist_ok=True)
    names = ", ".join(binary.name for binary in component.binaries())
    print(
        f"testbed: building {names} from {component.module} {component.version} "
        "(minutes on a new machine: modules download, then compile)",
        flush=True,
    )
    started = time.monotonic()
    output = str(component.binaries()[0]) if component.binary else f"{BIN}/"
    _go(
        component,
        "build",
        "-trimpath",
        f"-ldflags={_ldflags(component)}",
        "-o",
        output,
        *component.packages(),
    )
    (STAMPS / component.name).write_text(_stamp(component))
    print(f"testbed: built {names} in {time.monotonic() - started:.0f} s", flush=True)


def module_root(component: Component) -> Path:
    """Where the Go module cache holds the component's module (its LICENSE, its sources)."""
    listed = subprocess.run(
        ["go", "mod", "download", "-json", f"{component.module}@{component.version}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(listed.stdout)["Dir"])


def plugin_sources() -> list[Path]:
    """The plugin's Go sources the binary is built from (its tests are not: a changed test
    rebuilds nothing; tests/integration/test_plugin_go.py runs them)."""
    return sorted(p for p in PLUGIN_SOURCE.glob("*.go") if not p.name.endswith("_test.go"))


def _plugin_stamp(kubernetes: Component, arch: str) -> str:
    sources = plugin_sources()
    digest = hashlib.sha256(b"".join(f.read_bytes() for f in sources)).hexdigest()
    return _stamp(kubernetes).rstrip("\n") + f" static linux/{arch} {digest}\n"


def host_arch() -> str:
    """This machine's architecture as Go names it."""
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def plugin_scheduler(arch: str | None = None) -> Path:
    """Where ``kube-scheduler-ascend`` for ``arch`` is built: ``.testbed/bin`` for this
    machine's (the one the tests run), ``.testbed/bin/linux-<arch>`` for another."""
    if arch is None or arch == host_arch():
        return BIN / PLUGIN_SCHEDULER
    return BIN / f"linux-{arch}" / PLUGIN_SCHEDULER


def build_plugin_scheduler(kubernetes: Component, arch: str | None = None) -> Path:
    """``kube-scheduler-ascend`` from ``kube_scheduler_plugin/`` and the Kubernetes module, for
    ``arch`` (default: this machine's); its path."""
    arch = arch or host_arch()
    binary = plugin_scheduler(arch)
    stamp = STAMPS / f"{PLUGIN_SCHEDULER}-{arch}"
    if binary.exists() and stamp.exists() and stamp.read_text() == _plugin_stamp(kubernetes, arch):
        print(f"testbed: {PLUGIN_SCHEDULER} {kubernetes.version} ({arch}) is built", flush=True)
        return binary
    print(f"testbed: building {PLUGIN_SCHEDULER} for {arch} (kube_scheduler_plugin/)", flush=True)
    started = time.monotonic()
    module = SRC / PLUGIN_SCHEDULER
    shutil.rmtree(module, ignore_errors=True)
    module.mkdir(parents=True)
    binary.parent.mkdir(parents=True, exist_ok=True)
    STAMPS.mkdir(parents=True, exist_ok=True)
    gomod = (kubernetes.home / "go.mod").read_text()
    name = f"module ascend-npu-k8s/{PLUGIN_SCHEDULER}"
    (module / "go.mod").write_text(re.sub(r"^module \S+", name, gomod, count=1, flags=re.M))
    shutil.copy(kubernetes.home / "go.sum", module / "go.sum")
    for source in plugin_sources():
        shutil.copy(source, module / source.name)
    ldflags = f"-ldflags={_ldflags(kubernetes)}"
    # Static, as the upstream kube-scheduler is built: its image (image.kube_scheduler) holds
    # nothing else, and another architecture needs no C cross-compiler.
    target = {"CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": arch}
    _go(kubernetes, "build", "-trimpath", ldflags, "-o", str(binary), ".", cwd=module, env=target)
    stamp.write_text(_plugin_stamp(kubernetes, arch))
    print(f"testbed: built {PLUGIN_SCHEDULER} in {time.monotonic() - started:.0f} s", flush=True)
    return binary


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m testbed.build", description=__doc__)
    parser.add_argument("names", nargs="*", help="components to build (default: all)")
    args = parser.parse_args()
    chosen = [c for c in components() if not args.names or c.name in args.names]
    everything = not args.names or "volcano" in args.names
    versions = [v for v in volcanoes() if everything or v.name in args.names]
    unknown = set(args.names) - {c.name for c in chosen} - {v.name for v in versions} - {"volcano"}
    if unknown:
        parser.error(f"unknown component(s): {', '.join(sorted(unknown))}")
    for component in chosen:
        build(component)
        if component.module == "k8s.io/kubernetes" and component.unavailable is None:
            build_plugin_scheduler(component)
    try:
        for volcano in versions:
            volcano_build.build(volcano)
    except SourceMissing as missing:
        print(f"testbed: {missing}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
