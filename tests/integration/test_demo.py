"""The demo is the main job: it must run clean, and its summary must catch what it claims to."""

from __future__ import annotations

import re

import pytest

from simulation.demo import Row, _summary, run


def test_the_demo_admits_every_pod_with_the_scheduler_chips(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run() == 0
    summary = capsys.readouterr().out.splitlines()[-1]
    corrected = re.search(r"(\d+) with kubelet IDs that differ", summary)
    assert corrected is not None and int(corrected.group(1)) > 0, summary
    assert summary.endswith("0 mismatches, 0 double assignments")


def test_binpack_keeps_room_for_the_gang_in_the_demo(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(policy="binpack") == 0
    out = capsys.readouterr().out
    assert "gang-1 " in out
    assert not [line for line in out.splitlines() if line.startswith("gang ")], "gang placed"


def row(pod: str, visible: str, real: str) -> Row:
    return Row(pod, "n", ("Ascend910-0",), ("Ascend910-1",), visible, real)


def test_the_summary_fails_on_a_mismatch_or_a_chip_given_twice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _summary([row("a", "0", "Ascend910-0")]) == 0
    assert _summary([row("a", "1", "Ascend910-0")]) == 1
    assert _summary([row("a", "0", "Ascend910-0"), row("b", "0", "Ascend910-0")]) == 1
    assert _summary([]) == 1
    assert "1 double assignments" in capsys.readouterr().out
