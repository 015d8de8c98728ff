"""The test bed's pins: ``testbed/versions.toml`` is the one place the versions are read from,
and each component's committed Go module builds exactly that version (a module moved by hand
without the file, or the file without ``make testbed``, is caught here)."""

from __future__ import annotations

import re

import pytest

from testbed.build import Component, components, required


@pytest.mark.parametrize(
    "component", [c for c in components() if not c.unavailable], ids=lambda c: c.name
)
def test_each_go_module_requires_the_pinned_version(component: Component) -> None:
    assert required(component) == component.version
    assert (component.home / "go.sum").read_text().count(f"{component.module} {component.version}")


def test_kubernetes_staging_modules_are_replaced_by_their_matching_release() -> None:
    (kubernetes,) = [c for c in components() if c.module == "k8s.io/kubernetes"]
    staging = "v0." + kubernetes.version.removeprefix("v1.")
    replaced = re.findall(
        r"^\s*(k8s\.io/\S+) => \1 (v\S+)$", (kubernetes.home / "go.mod").read_text(), re.M
    )
    assert len(replaced) >= 30, "every staging module of k8s.io/kubernetes"
    assert {version for _, version in replaced} == {staging}
