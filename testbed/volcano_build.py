"""The real Volcano for the test bed, each pinned version into ``.testbed/bin/volcano-<version>/``.

Called by ``python -m testbed.build`` (``make testbed``) after the Go-module components; the pins
are ``[volcano]`` of ``testbed/versions.toml``. Two ways, one a version:

- **From source, with Huawei's plugin** (v1.12.0, the Volcano MindCluster v26.1.0 builds its
  plugin against): the Go module proxy refuses ``volcano.sh/volcano`` and ``volcano.sh/apis``
  v1.12.0, and Huawei's ``ascend-for-volcano`` is no module, so both are built in one Volcano
  tree from the source snapshots (``testbed/snapshots.py``: a folder or tarball of
  ``../shared/upstream`` first, else a git clone) as Huawei's ``build/build.sh`` builds them
  (MindCluster ``component/ascend-for-volcano/build/build.sh``): the snapshot unpacked in
  ``.testbed/src/`` beside its ``volcano.sh/apis`` (a ``replace``), the plugin copied in as
  ``pkg/scheduler/plugins/ascend-volcano-plugin``, build.sh's source edits
  (``testbed/huawei_patches.py``), ``go mod tidy``, then ``vc-controller-manager`` (no cgo),
  ``vc-scheduler`` (cgo: it loads Go plugins) and ``volcano-npu_<plugin version>.so`` with
  build.sh's flags. ``-trimpath`` is added to all three: a Go plugin loads only into a binary
  built with the same toolchain and flags, and without it a new clone's tree path would miss
  the Go build cache. The one ``vc-scheduler`` serves both Volcano's own plugins (``extender``
  among them) and Huawei's, which it loads only with ``--plugins-dir`` (every ``*.so`` there;
  the bin folder holds just the one) and runs only where its configuration names it.
- **As a Go module** (v1.15.0, vanilla): the proxy serves ``volcano.sh/volcano`` at this version,
  so it is built like the other components from ``testbed/go/volcano-<version>/`` (its ``go.mod``
  made from Volcano's own: the same ``replace`` lines, the in-tree ``volcano.sh/apis``, which
  the proxy refuses, pointed at the snapshot's ``staging/``), without cgo as Volcano's Makefile
  builds it by default (``SUPPORT_PLUGINS=no``).

Where Huawei's plugin is built, the project's own in-process adapter is built beside it the same
way: ``volcano_adapter/`` copied into the tree as ``pkg/scheduler/plugins/ascend-npu-adapter``,
``ascend-npu-adapter.so`` with the plugin's flags (cgo on, ``-buildmode=plugin``). Its stamp
(``.testbed/stamps/volcano-<version>-adapter``: the version's stamp, the adapter's flags and a
digest of ``volcano_adapter/``) is its own: a change of the adapter rebuilds the adapter alone,
in the tree already there. v1.15.0 is built without cgo (it loads no Go plugin), so the adapter
is not built for it; there Volcano's own ``extender`` plugin calls the service.

What each build leaves besides the binaries: ``.testbed/volcano-<version>/crd/*.yaml`` (the CRDs,
from the snapshot's ``installer/helm/chart/volcano/crd/bases/``) and, where Huawei's plugin is
built, ``.testbed/volcano-<version>/huawei-volcano-<version>.yaml``: Huawei's deployment YAML
(``build/volcano-<version>.yaml``) as build.sh writes it out, its scheduler configuration naming
the plugin built. A version is skipped when all of it is there and its stamp
(``.testbed/stamps/volcano-<version>``: the pins and the flags) is unchanged.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed import huawei_patches
from testbed.snapshots import ROOT, Snapshot, obtain, sha256_of

TESTBED = ROOT / "testbed"
WORK = ROOT / ".testbed"
BIN = WORK / "bin"
STAMPS = WORK / "stamps"
SRC = WORK / "src"
VERSION_PACKAGE = "volcano.sh/volcano/pkg/version"
# build.sh's CGO hardening (its openEuler glibc flavour: the system compiler, CC unset).
CGO_FLAGS = "-fstack-protector-all -D_FORTIFY_SOURCE=2 -O2 -fPIC -ftrapv"
RECIPE = 1  # raised when the steps below change what is built from the same pins
ADAPTER_SOURCE = ROOT / "volcano_adapter"  # the project's in-process adapter (package main)
ADAPTER_NAME = "ascend-npu-adapter"  # its plugin name: the .so's stem, its PluginName
ADAPTER_DIR = Path("pkg/scheduler/plugins") / ADAPTER_NAME  # where it goes in a Volcano tree


@dataclass(frozen=True)
class GoBuild:
    """One ``go build`` of a Volcano version: its output, package and flags."""

    output: str  # the file's name in the version's bin folder
    package: str
    cgo: bool
    flags: tuple[str, ...]
    ldflags: str
    dated: bool = True  # ``-X`` of the build date in ldflags (not in the stamp)

    def argv(self, out: Path, built: str) -> list[str]:
        ldflags = self.ldflags
        if self.dated:
            ldflags += f" -X '{VERSION_PACKAGE}.Built={built}'"
        return [
            "build", "-trimpath", *self.flags, f"-ldflags={ldflags}",
            "-o", str(out / self.output), self.package,
        ]  # fmt: skip


@dataclass(frozen=True)
class HuaweiPlugin:
    version: str  # MindCluster's release, e.g. v26.1.0
    snapshot: Snapshot  # holding component/ascend-for-volcano

    @property
    def name(self) -> str:
        """The plugin's name: the ``.so`` file's stem, which Volcano registers it under, must
        equal the ``PluginName`` variable, which the plugin answers to (build.sh's
        ``REL_NPU_PLUGIN``)."""
        return f"volcano-npu_{self.version}"


@dataclass(frozen=True)
class Volcano:
    version: str
    source: Snapshot
    commands: tuple[str, ...]
    module: str | None = None  # built as this Go module from the proxy, not from the source
    apis: Snapshot | None = None
    plugin: HuaweiPlugin | None = None

    @property
    def name(self) -> str:
        return f"volcano-{self.version}"

    @property
    def bin(self) -> Path:
        return BIN / self.name

    @property
    def data(self) -> Path:
        return WORK / self.name

    @property
    def tree(self) -> Path:
        return SRC / self.source.name

    @property
    def home(self) -> Path:
        """Where a module build's go.mod lives (the tree of a source build)."""
        return TESTBED / "go" / self.name if self.module else self.tree

    @property
    def huawei_yaml(self) -> Path:
        return self.data / f"huawei-volcano-{self.version}.yaml"

    def builds(self) -> list[GoBuild]:
        base = self.module or "volcano.sh/volcano"
        x = f"-X '{VERSION_PACKAGE}.Version={self.version}' "
        x += f"-X '{VERSION_PACKAGE}.GitSHA={self.source.commit}'"
        if self.plugin is None:  # Volcano's Makefile: no cgo by default
            return [
                GoBuild(f"vc-{c.rsplit('/', 1)[-1]}", f"{base}/{c}", False, (), f"-s -w {x}")
                for c in self.commands
            ]
        # build.sh's build_workflow, its flags as they are (-trimpath added, see above).
        external = "-s -linkmode=external -extldflags=-Wl,-z,now"
        plugin = f"volcano.sh/volcano/{huawei_patches.PLUGIN_DIR.as_posix()}"
        pie = ("-mod=mod", "-buildmode=pie")
        return [
            GoBuild("vc-controller-manager", f"{base}/cmd/controller-manager", False, pie,
                    f"-s -bindnow {x}"),
            GoBuild("vc-scheduler", f"{base}/cmd/scheduler", True, pie, f"{external} {x}"),
            GoBuild(f"{self.plugin.name}.so", plugin, True, ("-mod=mod", "-buildmode=plugin"),
                    f"{external} -X {plugin}.PluginName={self.plugin.name}", dated=False),
        ]  # fmt: skip

    def adapter_build(self) -> GoBuild | None:
        """The adapter's build, where Huawei's plugin is built: with the plugin's flags, so
        that it loads into the same vc-scheduler."""
        if self.plugin is None:
            return None
        package = f"volcano.sh/volcano/{ADAPTER_DIR.as_posix()}"
        (huawei,) = [b for b in self.builds() if b.output == f"{self.plugin.name}.so"]
        ldflags = huawei.ldflags.rsplit(" -X ", 1)[0] + f" -X {package}.PluginName={ADAPTER_NAME}"
        return GoBuild(f"{ADAPTER_NAME}.so", package, True, huawei.flags, ldflags, dated=False)

    def adapter_stamp(self) -> str:
        adapter = self.adapter_build()
        pins = {
            "volcano": self.stamp(),
            "build": asdict(adapter) if adapter else None,
            "source": adapter_digest(),
        }
        return json.dumps(pins, sort_keys=True) + "\n"

    def adapter_up_to_date(self) -> bool:
        adapter = self.adapter_build()
        if adapter is None:
            return True
        stamp = STAMPS / f"{self.name}-adapter"
        return (
            (self.bin / adapter.output).exists()
            and stamp.exists()
            and stamp.read_text() == self.adapter_stamp()
        )

    def outputs(self) -> list[Path]:
        files = [self.bin / build.output for build in self.builds()]
        return files + ([self.huawei_yaml] if self.plugin else [])

    def stamp(self) -> str:
        pins: dict[str, Any] = {
            "recipe": RECIPE,
            "version": self.version,
            "source": asdict(self.source),
            "module": self.module,
            "apis": asdict(self.apis) if self.apis else None,
            "plugin": asdict(self.plugin) if self.plugin else None,
            "builds": [asdict(build) for build in self.builds()],
        }
        if self.module is not None:
            gosum = self.home / "go.sum"
            pins["go.sum"] = sha256_of(gosum) if gosum.exists() else None
        return json.dumps(pins, sort_keys=True) + "\n"

    def up_to_date(self) -> bool:
        stamp = STAMPS / self.name
        return (
            all(path.exists() for path in self.outputs())
            and any((self.data / "crd").glob("*.yaml"))
            and stamp.exists()
            and stamp.read_text() == self.stamp()
        )


def adapter_digest(source: Path = ADAPTER_SOURCE) -> str:
    """sha256 over the adapter's files, their names and contents."""
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(path.relative_to(source).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def volcanoes(path: Path = TESTBED / "versions.toml") -> list[Volcano]:
    table = tomllib.loads(path.read_text())["volcano"]
    snapshots = {
        name: Snapshot.from_toml(name, entry) for name, entry in table["snapshots"].items()
    }
    found = []
    for version, entry in table["versions"].items():
        plugin = entry.get("huawei-plugin")
        found.append(
            Volcano(
                version,
                snapshots[entry["source"]],
                tuple(str(c) for c in table["commands"]),
                entry.get("module"),
                snapshots[entry["apis"]] if "apis" in entry else None,
                None
                if plugin is None
                else HuaweiPlugin(str(plugin["version"]), snapshots[plugin["snapshot"]]),
            )
        )
    return found


def _say(volcano: Volcano, message: str) -> None:
    print(f"testbed: {time.strftime('%H:%M:%S')} {volcano.name}: {message}", flush=True)


def _go(volcano: Volcano, *args: str, cgo: bool | None = None) -> float:
    """Run a go command in the version's module; its seconds. On failure the go command's
    answer is printed and the build stops."""
    environment = {**os.environ, "GOFLAGS": "-buildvcs=false", "GO111MODULE": "on"}
    if volcano.plugin is not None:  # build.sh's environment, the same for all three builds
        environment.pop("CC", None)
        environment |= {"CGO_CFLAGS": CGO_FLAGS, "CGO_CPPFLAGS": CGO_FLAGS}
    if cgo is not None:
        environment["CGO_ENABLED"] = "1" if cgo else "0"
    started = time.monotonic()
    done = subprocess.run(
        ["go", *args],
        cwd=volcano.home,
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-20000:] + done.stderr[-20000:])
        raise SystemExit(
            f"testbed: `go {' '.join(args)}` failed for {volcano.name}; the go command's answer "
            "is above"
        )
    return time.monotonic() - started


def _copy_crds(volcano: Volcano) -> None:
    crd = volcano.data / "crd"
    if crd.exists():
        shutil.rmtree(crd)
    crd.mkdir(parents=True)
    for path in sorted((volcano.tree / "installer/helm/chart/volcano/crd/bases").glob("*.yaml")):
        shutil.copy(path, crd / path.name)
    _say(volcano, f"{len(list(crd.iterdir()))} CRDs in {crd}")


def _prepare_huawei_tree(volcano: Volcano) -> None:
    """The Volcano tree as build.sh expects it: the apis beside it, the plugin inside, patched,
    tidied."""
    assert volcano.plugin is not None and volcano.apis is not None
    for snapshot, dest in (
        (volcano.source, volcano.tree),
        (volcano.apis, SRC / volcano.apis.name),
        (volcano.plugin.snapshot, SRC / volcano.plugin.snapshot.name),
    ):
        _say(volcano, f"{snapshot.name} from {obtain(snapshot, dest)}")
    _go(volcano, "mod", "edit", f"-replace=volcano.sh/apis=../{volcano.apis.name}")
    plugin_source = SRC / volcano.plugin.snapshot.name / (volcano.plugin.snapshot.subdir or "")
    shutil.copytree(plugin_source, volcano.tree / huawei_patches.PLUGIN_DIR, symlinks=True)
    _copy_adapter(volcano)
    changed = huawei_patches.patch_all_source(volcano.tree, volcano.version)
    _say(volcano, "build.sh's source edits, files changed: " + json.dumps(changed))
    _say(volcano, "go mod tidy")
    _say(volcano, f"tidied in {_go(volcano, 'mod', 'tidy'):.0f} s")


def _copy_adapter(volcano: Volcano) -> None:
    """``volcano_adapter/`` into the tree beside Huawei's plugin (replacing what was there)."""
    dest = volcano.tree / ADAPTER_DIR
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(ADAPTER_SOURCE, dest)


def _build_adapter(volcano: Volcano, built: str) -> None:
    adapter = volcano.adapter_build()
    if adapter is None:
        return
    _say(volcano, f"go build {adapter.output} (cgo on, -trimpath {' '.join(adapter.flags)})")
    seconds = _go(volcano, *adapter.argv(volcano.bin, built), cgo=adapter.cgo)
    _say(volcano, f"built {adapter.output} in {seconds:.0f} s")
    STAMPS.mkdir(parents=True, exist_ok=True)
    (STAMPS / f"{volcano.name}-adapter").write_text(volcano.adapter_stamp())


def module_gomod(volcano: Volcano, upstream_gomod: str) -> str:
    """The test bed's go.mod for a module build: Volcano's ``go`` line and ``replace`` lines
    (a dependency's replaces are not applied, so the build would resolve other versions), its
    in-tree replace targets pointed at the snapshot's tree."""
    assert volcano.module is not None
    go_line = re.search(r"^go \S+$", upstream_gomod, re.M)
    block = re.search(r"^replace \((.*?)^\)", upstream_gomod, re.M | re.S)
    lines = re.findall(r"^replace ([^(\s].*)$", upstream_gomod, re.M)
    lines += block.group(1).splitlines() if block else []
    replaces = []
    for line in (ln.split("//", 1)[0].strip() for ln in lines):
        if not line:
            continue
        old, new = (side.strip() for side in line.split("=>"))
        if new.startswith(("./", "../")):
            new = os.path.relpath(volcano.tree / new, volcano.home)
        replaces.append(f"\t{old} => {new}\n")
    return (
        f"module testbed/{volcano.name}\n\n{go_line.group(0) if go_line else 'go 1.25.0'}\n\n"
        f"require {volcano.module} {volcano.version}\n\nreplace (\n{''.join(replaces)})\n"
    )


def _tools_go(volcano: Volcano) -> str:
    imports = "".join(f'\t_ "{volcano.module}/{c}"\n' for c in sorted(volcano.commands))
    return (
        "//go:build tools\n\n"
        f"// Package tools pins Volcano's commands (testbed/volcano_build.py builds them).\n"
        f"package tools\n\nimport (\n{imports})\n"
    )


def required(volcano: Volcano) -> str | None:
    gomod = volcano.home / "go.mod"
    if volcano.module is None or not gomod.exists():
        return None
    pattern = rf"^\s*(?:require\s+)?{re.escape(volcano.module)}\s+(v\S+)"
    found = re.search(pattern, gomod.read_text(), re.M)
    return found.group(1) if found else None


def _prepare_module(volcano: Volcano) -> None:
    _say(volcano, f"{volcano.source.name} from {obtain(volcano.source, volcano.tree)}")
    listed = subprocess.run(
        ["go", "mod", "download", "-json", f"{volcano.module}@{volcano.version}"],
        capture_output=True,
        text=True,
        check=False,
    )
    info = json.loads(listed.stdout or "{}")
    if listed.returncode != 0 or "Error" in info:
        raise SystemExit(f"testbed: {volcano.module} {volcano.version}: {info.get('Error')}")
    origin = info.get("Origin", {}).get("Hash")
    if origin not in (None, volcano.source.commit):
        raise SystemExit(
            f"testbed: the Go module proxy's {volcano.module} {volcano.version} is commit "
            f"{origin}, versions.toml pins {volcano.source.commit}"
        )
    _say(volcano, f"{volcano.module} {volcano.version} from the Go module proxy, commit {origin}")
    if required(volcano) == volcano.version:
        return
    _say(volcano, f"writing {volcano.home}/go.mod from Volcano's, go mod tidy")
    volcano.home.mkdir(parents=True, exist_ok=True)
    (volcano.home / "go.mod").write_text(module_gomod(volcano, Path(info["GoMod"]).read_text()))
    (volcano.home / "go.sum").unlink(missing_ok=True)
    (volcano.home / "tools.go").write_text(_tools_go(volcano))
    _go(volcano, "mod", "tidy")


def build(volcano: Volcano) -> None:
    if (volcano.module is None or required(volcano) == volcano.version) and volcano.up_to_date():
        if volcano.adapter_up_to_date():
            print(f"testbed: {volcano.name} is built ({volcano.bin})", flush=True)
            return
        # The adapter alone changed: rebuilt in the tree already there (Huawei's plugin and
        # vc-scheduler, which it must match, unchanged).
        _say(volcano, "the adapter (volcano_adapter/) changed")
        _copy_adapter(volcano)
        _build_adapter(volcano, time.strftime("%Y-%m-%d %H:%M:%S"))
        return
    started = time.monotonic()
    _say(volcano, "building (minutes each step on a new machine)")
    if volcano.module is None:
        _prepare_huawei_tree(volcano)
    else:
        _prepare_module(volcano)
    if volcano.bin.exists():
        shutil.rmtree(volcano.bin)
    volcano.bin.mkdir(parents=True)
    built = time.strftime("%Y-%m-%d %H:%M:%S")
    for step in volcano.builds():
        flags = " ".join(("-trimpath", *step.flags))
        _say(volcano, f"go build {step.output} (cgo {'on' if step.cgo else 'off'}, {flags})")
        seconds = _go(volcano, *step.argv(volcano.bin, built), cgo=step.cgo)
        _say(volcano, f"built {step.output} in {seconds:.0f} s")
    _build_adapter(volcano, built)
    _copy_crds(volcano)
    if volcano.plugin is not None:
        shipped = (
            volcano.tree / huawei_patches.PLUGIN_DIR / "build" / f"volcano-{volcano.version}.yaml"
        )
        volcano.huawei_yaml.write_text(
            huawei_patches.release_yaml(
                shipped.read_text(), volcano.version, volcano.plugin.name, volcano.plugin.version
            )
        )  # fmt: skip
        _say(volcano, f"Huawei's deployment YAML in {volcano.huawei_yaml}")
    STAMPS.mkdir(parents=True, exist_ok=True)
    (STAMPS / volcano.name).write_text(volcano.stamp())
    _say(volcano, f"built in {volcano.bin} in {time.monotonic() - started:.0f} s")
