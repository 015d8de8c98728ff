"""The real control plane under the tests (``testbed``): one per test module, so that each
module's nodes, scheduler service and controllers see only their own cluster.

The binaries come from ``make testbed``; ``make test`` builds them first. A missing binary is an
error, not a skip: these tests are the ones that meet the real components.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from testbed.control_plane import ControlPlane, scratch


@pytest.fixture(scope="module")
def control_plane() -> Iterator[ControlPlane]:
    workdir = scratch("cp")
    plane = ControlPlane(workdir)
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(workdir, ignore_errors=True)
