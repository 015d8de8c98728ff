"""Which Kubernetes configuration a command uses: kubectl's order."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.kube.location import kubeconfig_for


def test_auto_takes_the_flag_then_kubeconfig_then_the_home_file_then_in_cluster(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    flag = tmp_path / "flag"
    first, second = tmp_path / "a", tmp_path / "b"
    environ = {"KUBECONFIG": f"{first}:{second}"}
    assert kubeconfig_for("auto", flag, environ, home) == flag
    assert kubeconfig_for("auto", None, environ, home) == first
    assert kubeconfig_for("auto", None, {}, home) is None, "no file: in-cluster"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("")
    assert kubeconfig_for("auto", None, {}, home) == home / ".kube" / "config"


def test_the_explicit_modes_mean_what_they_say(tmp_path: Path) -> None:
    assert kubeconfig_for("in-cluster", tmp_path / "x", {"KUBECONFIG": "y"}) is None
    assert kubeconfig_for("kubeconfig", tmp_path / "x") == tmp_path / "x"
    with pytest.raises(ValueError, match="--kube kubeconfig needs --kubeconfig FILE"):
        kubeconfig_for("kubeconfig", None)
