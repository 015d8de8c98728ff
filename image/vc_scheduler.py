"""``python -m image.vc_scheduler``: Volcano's scheduler carrying the project's in-process
adapter, as an image for amd64, built as ``image/build.py`` builds the project's own.

Why an image of Volcano's scheduler at all: a Go plugin loads only into a binary built by the
same toolchain from the same versions of every package they share (Go's ``plugin`` package
refuses it otherwise: "plugin was built with a different version of package"), so
``ascend-npu-adapter.so`` cannot be dropped into a vc-scheduler built elsewhere. It ships with
the vc-scheduler it was built beside, as Huawei ships its plugin (MindCluster
``component/ascend-for-volcano/output/*/Dockerfile-scheduler``: ``/vc-scheduler`` and
``plugins/volcano-npu_*.so`` in one image).

Two layers:

1. Debian bookworm's ``libc6`` (vc-scheduler and the plugins are cgo: glibc, linked
   dynamically) and ``busybox``: Huawei's Deployment starts the scheduler with ``/bin/ash -c
   "umask 027; /vc-scheduler ..."`` and its init container with ``sh -c "mkdir ...; chmod ...;
   chown ..."`` (``build/volcano-v1.12.0.yaml``), so ``ash``, ``sh`` and those commands are
   busybox's. ``/etc/passwd`` names Huawei's user ``hwMindX`` (9000), which its Deployment runs as.
2. Volcano v1.12.0's ``vc-scheduler`` patched and built as Huawei's ``build/build.sh`` builds it,
   with ``plugins/ascend-npu-adapter.so`` and Huawei's ``plugins/volcano-npu_v26.1.0.so`` built
   beside it (``testbed.volcano_build``, which builds them when missing: ``make testbed``), owned
   by root and only readable by the user, and the licences of Volcano, MindCluster and the
   project under ``/usr/share/doc``. Huawei's plugin stays so that the image replaces Huawei's
   own with the configuration unchanged; it runs only where the configuration names it.

The configuration: ``/vc-scheduler`` as entrypoint (Volcano's chart passes only arguments),
user 9000, working directory ``/`` (Huawei's ``--plugins-dir=plugins`` is relative to it). The
index is tagged ``v1.12.0-<project version>``: the tag names the Volcano it runs, which
``scheduler_core.volcano_config`` reads.

amd64 only: the plugins need cgo, and an arm64 build would need an aarch64 C cross-compiler and a
second build of Volcano (about 20 minutes on two cores), neither of which this machine has.
Stages are cached beside the project image's (``~/.cache/ascend-npu-k8s/image``). Exit status 2
when a tool is missing or the user is not root, 1 when a step fails.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from image import build
from testbed import volcano_build

RECIPE = Path(__file__).resolve()
NAME = "ascend-npu-vc-scheduler"
VOLCANO = "v1.12.0"  # what MindCluster v26.1.0 builds its plugin against
PLATFORM = build.PLATFORMS[0]
assert PLATFORM.arch == "amd64"
PACKAGES = ("libc6", "busybox")
# The commands Huawei's Deployment runs besides the scheduler (its init container's too).
APPLETS = ("ash", "sh", "cat", "chmod", "chown", "ls", "mkdir")
USER = 9000  # Huawei's hwMindX: its Deployment's runAsUser
PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    f"hwMindX:x:{USER}:{USER}:hwMindX:/nonexistent:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
)
GROUP = f"root:x:0:\nhwMindX:x:{USER}:\nnogroup:x:65534:\n"
ENTRYPOINT = ("/vc-scheduler",)
PLUGINS = "plugins"


@dataclass(frozen=True)
class Inputs:
    """What the second layer is made of: the built files and the licences."""

    scheduler: Path
    plugins: tuple[Path, ...]
    licences: tuple[tuple[str, Path], ...]  # (folder under /usr/share/doc, LICENSE)

    def digest(self) -> str:
        files = [self.scheduler, *self.plugins, *(path for _, path in self.licences)]
        return build.fingerprint(*(x for f in files for x in (f.name, f.read_bytes())))


def inputs() -> Inputs:
    """The v1.12.0 build with both plugins, built first when missing or stale."""
    (volcano,) = [v for v in volcano_build.volcanoes() if v.version == VOLCANO]
    volcano_build.build(volcano)
    assert volcano.plugin is not None, "v1.12.0 is pinned with Huawei's plugin"
    return Inputs(
        scheduler=volcano.bin / "vc-scheduler",
        plugins=(
            volcano.bin / f"{volcano_build.ADAPTER_NAME}.so",
            volcano.bin / f"{volcano.plugin.name}.so",
        ),
        licences=(
            ("volcano", volcano.tree / "LICENSE"),
            ("mind-cluster", volcano_build.SRC / volcano.plugin.snapshot.name / "LICENSE"),
            (build.NAME, build.ROOT / "LICENSE"),
        ),
    )


def base(dest: Path) -> None:
    build.debian_extract(PLATFORM, PACKAGES, dest)
    for applet in APPLETS:
        link = dest / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    (dest / "etc" / "passwd").write_text(PASSWD)
    (dest / "etc" / "group").write_text(GROUP)


def scheduler_tree(made: Inputs, dest: Path) -> None:
    shutil.copyfile(made.scheduler, dest / "vc-scheduler")
    (dest / "vc-scheduler").chmod(0o755)
    plugins = dest / PLUGINS
    plugins.mkdir(mode=0o755)
    for plugin in made.plugins:
        shutil.copyfile(plugin, plugins / plugin.name)
        (plugins / plugin.name).chmod(0o644)
    build.licences(dest, made.licences)


def configuration(tag: str, stages: list[build.Stage]) -> dict[str, Any]:
    return build.scheduler_config(
        PLATFORM,
        user=USER,
        entrypoint=ENTRYPOINT,
        title=NAME,
        description=(
            f"Volcano {VOLCANO} vc-scheduler with the ascend-npu-adapter plugin "
            "(and Huawei's volcano-npu plugin)"
        ),
        version=tag,
        stages=stages,
    )


def build_image(cache: Path | None = None, say: Callable[[str], None] | None = None) -> build.Image:
    """The image, from the cache when its inputs are unchanged."""
    cache = cache or build.cache_root()
    tell = say or _say
    reason = build.missing(python=False)
    if reason is not None:
        raise build.MissingTool(reason)
    tag = f"{VOLCANO}-{build.project().version}"
    recipe = build.fingerprint(RECIPE.read_bytes(), (RECIPE.parent / "build.py").read_bytes())
    made = inputs()
    stage = partial(build.stage, cache, say=tell)
    stages = [
        stage(
            f"vc-base-{PLATFORM.arch}",
            build.fingerprint(recipe, PLATFORM.arch),
            f"mmdebstrap --variant=extract {build.SUITE} {' '.join(PACKAGES)}",
            base,
        ),
        stage(
            "vc-scheduler",
            build.fingerprint(recipe, made.digest()),
            f"vc-scheduler {VOLCANO} and {', '.join(p.name for p in made.plugins)}",
            partial(scheduler_tree, made),
        ),
    ]
    platform = (build.oci_platform(PLATFORM), configuration(tag, stages), [s.layer for s in stages])
    told = partial(summary, tag, made, stages)
    return build.written(
        cache,
        "vc-image",
        reference=tag,
        stages=stages,
        platforms=[platform],
        summary=told,
        say=tell,
    )


def summary(tag: str, made: Inputs, stages: list[build.Stage]) -> str:
    sizes = " + ".join(f"{s.layer.size / 1e6:.1f} MB" for s in stages)
    debian = build.dpkg_packages(stages[0].tree)
    return "\n".join(
        (
            f"{NAME} {tag} for {PLATFORM.arch}: {sizes} compressed",
            f"/vc-scheduler (Volcano {VOLCANO}, patched as Huawei's build.sh); /{PLUGINS}: "
            + ", ".join(p.name for p in made.plugins),
            f"user {USER}; entrypoint {' '.join(ENTRYPOINT)}; working directory /",
            f"Debian {build.SUITE} packages ({len(debian)}): "
            + ", ".join(f"{n} {v}" for n, v in sorted(debian.items())),
        )
    )


def _say(message: str) -> None:
    print(f"vc-scheduler image: {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    what = "Build Volcano's scheduler with the in-process adapter (docs/image.md)."
    return build.command(argv, "vc_scheduler", what, build_image, NAME)


if __name__ == "__main__":
    sys.exit(main())
