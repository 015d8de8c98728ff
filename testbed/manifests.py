"""The project's manifests as an admin applies them: rendered by the real kustomize (and
helm) the test bed built, applied server-side to a real API server."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from testbed.control_plane import binary

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "daemonset"


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """``kustomize build directory`` (what ``kubectl apply -k`` applies), as documents."""
    done = subprocess.run(
        [str(binary("kustomize")), "build", str(directory)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"kustomize build {directory} failed: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]
