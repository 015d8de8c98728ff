"""The order the tests are handed out in.

``make test`` runs the suite on pytest-xdist workers, a file at a time (``--dist loadfile``,
in collection order: ``--no-loadscope-reorder``). The tiers that mostly wait on processes
(a real control plane, a simulated cluster) take minutes a file; the unit files take
seconds. Collected longest tier first, the long files start at once and the short ones fill
the workers at the end, instead of one long file starting last and running alone.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Slowest first (docs/testing.md has each tier's time).
TIERS = ("real", "e2e", "deploy", "integration", "unit")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Under xdist, a short base folder of our own: each worker's ``tmp_path`` sits in a
    ``popen-gwN`` folder under it, which under pytest's default base pushes the sockets the
    tests make there past the 107 bytes a unix socket's path may have."""
    workers = config.getoption("numprocesses", None)
    if workers and config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="pt", dir="/tmp")
        config.add_cleanup(lambda: shutil.rmtree(config.option.basetemp, ignore_errors=True))


def tier_of(item: pytest.Item) -> int:
    parts = item.nodeid.split("/")
    name = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    return TIERS.index(name) if name in TIERS else len(TIERS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=tier_of)  # stable: each file's own order is kept


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory for unix sockets, whose paths must stay under 107 bytes: pytest's
    ``tmp_path`` is too long for a cluster's sockets, more so under a worker's folder."""
    path = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)
