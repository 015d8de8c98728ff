"""``python -m image.kube_scheduler``: kube-scheduler-ascend (kube-scheduler with the AscendNPU
plugin, ``kube_scheduler_plugin/``) as an image for amd64 and arm64, for the chart's
``kubeScheduler.plugin`` (``kubeScheduler.pluginImage``) and the ``kube-scheduler-plugin``
overlay.

An out-of-tree plugin is compiled into the scheduler (``app.WithPlugin``, as
kubernetes-sigs/scheduler-plugins builds its schedulers), so the image carries a whole
kube-scheduler: the test bed's build of ``kube-scheduler-ascend`` from the pinned Kubernetes
module (``testbed.build``, which builds it when missing: ``make testbed``; arm64's is built by
Go's cross-compiler here), static (no cgo), so that the image needs nothing else. One layer a
platform: ``/usr/local/bin/kube-scheduler`` (the chart's
Deployment runs ``kube-scheduler --config=...`` as the upstream image's), ``/etc/passwd`` naming
the chart's user 10001, and the licences of Kubernetes and the project under
``/usr/share/doc``. The tag is ``<Kubernetes version>-<project version>``: kube-scheduler must
not be newer than the API server.

Both platforms in one index, as the project's image (Kunpeng control planes are arm64). Stages
are cached beside the project image's (``~/.cache/ascend-npu-k8s/image``). Exit status 1 when
a step fails.
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
from testbed import build as testbed

RECIPE = Path(__file__).resolve()
NAME = "ascend-npu-k8s-kube-scheduler"
USER = 10001  # the chart's runAsUser for kube-scheduler
PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    f"kube-scheduler:x:{USER}:{USER}:kube-scheduler:/nonexistent:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
)
GROUP = f"root:x:0:\nkube-scheduler:x:{USER}:\nnogroup:x:65534:\n"
BINARY = "usr/local/bin/kube-scheduler"


def kubernetes() -> testbed.Component:
    (found,) = [c for c in testbed.components() if c.module == "k8s.io/kubernetes"]
    return found


def image_tag() -> str:
    return f"{kubernetes().version}-{build.project().version}"


@dataclass(frozen=True)
class Inputs:
    scheduler: Path
    licences: tuple[tuple[str, Path], ...]  # (folder under /usr/share/doc, LICENSE)

    def digest(self) -> str:
        files = [self.scheduler, *(path for _, path in self.licences)]
        return build.fingerprint(*(x for f in files for x in (f.name, f.read_bytes())))


def inputs(arch: str) -> Inputs:
    """The test bed's kube-scheduler-ascend for ``arch``, built first when missing or stale."""
    component = kubernetes()
    return Inputs(
        testbed.build_plugin_scheduler(component, arch),
        (
            ("kubernetes", testbed.module_root(component) / "LICENSE"),
            (build.NAME, build.ROOT / "LICENSE"),
        ),
    )


def tree(made: Inputs, dest: Path) -> None:
    binary = dest / BINARY
    binary.parent.mkdir(parents=True)
    shutil.copyfile(made.scheduler, binary)
    binary.chmod(0o755)
    (dest / "etc").mkdir()
    (dest / "etc" / "passwd").write_text(PASSWD)
    (dest / "etc" / "group").write_text(GROUP)
    (dest / "tmp").mkdir(mode=0o1777)
    build.licences(dest, made.licences)


def configuration(platform: build.Platform, tag: str, stages: list[build.Stage]) -> dict[str, Any]:
    return build.scheduler_config(
        platform,
        user=USER,
        entrypoint=[f"/{BINARY}"],
        title=NAME,
        description=f"kube-scheduler {kubernetes().version} with the AscendNPU plugin",
        version=tag,
        stages=stages,
    )


def build_image(cache: Path | None = None, say: Callable[[str], None] | None = None) -> build.Image:
    """The image, from the cache when its inputs are unchanged."""
    cache = cache or build.cache_root()
    tell = say or _say
    tag = image_tag()
    recipe = build.fingerprint(RECIPE.read_bytes(), (RECIPE.parent / "build.py").read_bytes())
    stages: dict[str, build.Stage] = {}
    for platform in build.PLATFORMS:
        made = inputs(platform.arch)
        stages[platform.arch] = build.stage(
            cache,
            f"kube-scheduler-{platform.arch}",
            build.fingerprint(recipe, made.digest()),
            f"kube-scheduler-ascend {kubernetes().version} for {platform.arch} as /{BINARY}",
            partial(tree, made),
            say=tell,
        )
    platforms = [
        (
            build.oci_platform(p),
            configuration(p, tag, [stages[p.arch]]),
            [stages[p.arch].layer],
        )
        for p in build.PLATFORMS
    ]
    sizes = ", ".join(f"{a} {s.layer.size / 1e6:.1f} MB" for a, s in stages.items())
    told = f"{NAME} {tag}: {sizes} compressed; /{BINARY}, user {USER}"
    return build.written(
        cache,
        "ks-image",
        reference=tag,
        stages=list(stages.values()),
        platforms=platforms,
        summary=lambda: told,
        say=tell,
    )


def _say(message: str) -> None:
    print(f"kube-scheduler image: {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    what = "Build kube-scheduler with the AscendNPU plugin (docs/image.md)."
    return build.command(argv, "kube_scheduler", what, build_image, NAME)


if __name__ == "__main__":
    sys.exit(main())
