"""The house rules: which package may import which (read off the source, not run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SHIPPED = (
    "agent",
    "chip_drivers",
    "chip_topology",
    "contract",
    "deviceplugin_api",
    "dra_driver",
    "infra",
    "scheduler_core",
)
OURS = (*SHIPPED, "simulation")
# What the scheduler's service builds on, and its state, which all of its parts read.
DECIDING = {"contract", "chip_topology", "infra", "scheduler_core.engine"}
SERVICE_PARTS = {*DECIDING, "scheduler_core.service.state"}
SERVICE_PACKAGES = ("state", "verbs", "controllers", "views")
# Package (or sub-package) → the packages of ours it may import, besides itself.
ALLOWED = {
    "contract": set(),
    "chip_topology": {"contract"},
    "deviceplugin_api": set(),
    # Generic: the Kubernetes port, HTTP, metrics, logs; it knows no domain.
    "infra": set(),
    "scheduler_core.engine": {"contract", "chip_topology"},
    # The CLI and the service's wiring (``service.server``): all of the service's parts.
    "scheduler_core": {
        *DECIDING,
        *(f"scheduler_core.service.{part}" for part in SERVICE_PACKAGES),
        "scheduler_core.service.wire",
        "scheduler_core.service.routes",
        "scheduler_core.service.access",
        "scheduler_core.service.election",
    },
    # The service's parts (scheduler_core/service/*/__init__.py say what each is): the state
    # serves and acts on nothing; the verbs, the controllers and the views each read it and
    # import none of the others.
    "scheduler_core.service.state": {*DECIDING, "scheduler_core.service.wire"},
    "scheduler_core.service.wire": {*DECIDING, "scheduler_core.service.state"},
    "scheduler_core.service.verbs": {*SERVICE_PARTS, "scheduler_core.service.wire"},
    "scheduler_core.service.controllers": SERVICE_PARTS,
    "scheduler_core.service.views": SERVICE_PARTS,
    # The routes call the verbs and answer with the views; the controllers are not theirs.
    "scheduler_core.service.routes": {
        *SERVICE_PARTS,
        "scheduler_core.service.verbs",
        "scheduler_core.service.views",
        "scheduler_core.service.wire",
    },
    # Who may call which route: it reads the verbs' and the map's names, and decides nothing.
    "scheduler_core.service.access": {
        "contract",
        "infra",
        "scheduler_core.service.routes",
        "scheduler_core.service.verbs",
        "scheduler_core.service.views",
    },
    # The election knows the Lease and the leader's label, none of the service's parts.
    "scheduler_core.service.election": {"infra"},
    # The chip drivers both node daemons read chips through.
    "chip_drivers": {"contract", "chip_topology", "infra"},
    # The agent imports nothing of the scheduler: the chip rules it needs are shared.
    "agent": {"contract", "chip_topology", "chip_drivers", "infra", "deviceplugin_api"},
    # The DRA driver reads chips through the shared drivers and their shared device state,
    # never the agent; nothing imports it.
    "dra_driver": {"contract", "chip_topology", "chip_drivers", "infra", "deviceplugin_api"},
}
# Third-party packages the pure engine must not touch.
IMPURE = ("kubernetes", "grpc", "watchdog", "yaml", "socket", "threading", "time", "http")


def imports(module: Path) -> set[str]:
    tree = ast.parse(module.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
    return found


def owner(name: str) -> str:
    """The ALLOWED key a dotted module name belongs to (the longest that prefixes it)."""
    return max((k for k in ALLOWED if name == k or name.startswith(k + ".")), key=len, default="")


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_what_the_layering_allows(package: str) -> None:
    for module in modules(package):
        dotted = ".".join(module.relative_to(ROOT).with_suffix("").parts)
        if owner(dotted) != package:
            continue  # a sub-package with rules of its own
        for name in imports(module):
            top = name.split(".")[0]
            if top not in OURS:
                continue
            target = owner(name) or top
            assert target == package or target in ALLOWED[package], f"{dotted} imports {name}"


@pytest.mark.parametrize("package", ["scheduler_core.engine", "chip_topology"])
def test_the_decisions_are_pure(package: str) -> None:
    for module in modules(package):
        for name in imports(module):
            assert name.split(".")[0] not in IMPURE, f"{module.name} imports {name}"


def test_the_simulation_harness_is_not_shipped() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "simulation" not in pyproject
    for package in SHIPPED:
        assert f'"{package}*"' in pyproject
