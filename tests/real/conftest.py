"""The real control plane under the tests (``testbed``): one per test module, so that each
module's nodes, scheduler service and controllers see only their own cluster.

The binaries come from ``make testbed``; ``make test`` builds them first. A missing binary is an
error, not a skip: these tests are the ones that meet the real components.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.control_plane import ControlPlane, running


@pytest.fixture(scope="module")
def control_plane() -> Iterator[ControlPlane]:
    with running("cp") as plane:
        yield plane
