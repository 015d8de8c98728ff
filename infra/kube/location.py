"""Which Kubernetes configuration a command uses, resolved as kubectl resolves it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

MODES = ("auto", "in-cluster", "kubeconfig")


def kubeconfig_for(
    mode: str,
    explicit: Path | None,
    environ: Mapping[str, str] = os.environ,
    home: Path | None = None,
) -> Path | None:
    """The kubeconfig file to read, or None for the pod's service account (in-cluster).

    ``auto`` is kubectl's order: ``--kubeconfig``, then the first file of ``$KUBECONFIG``,
    then ``~/.kube/config`` when it exists, then in-cluster. ValueError names a missing file.
    """
    if mode == "in-cluster":
        return None
    if mode == "kubeconfig":
        if explicit is None:
            raise ValueError("--kube kubeconfig needs --kubeconfig FILE")
        return explicit
    if explicit is not None:
        return explicit
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        return Path(listed[0])
    default = (home or Path.home()) / ".kube" / "config"
    return default if default.exists() else None
