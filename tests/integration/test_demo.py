"""The demo is the main job: it must run clean, and its summary must catch what it claims to."""

from __future__ import annotations

import re

import pytest

from simulation.demo import Row, _got_the_choice, _summary, run


def test_the_demo_admits_every_pod_with_the_scheduler_chips(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run() == 0
    lines = capsys.readouterr().out.splitlines()
    (summary,) = [line for line in lines if line.startswith("summary:")]
    corrected = re.search(r"(\d+) with kubelet IDs that differ", summary)
    assert corrected is not None and int(corrected.group(1)) > 0, summary
    assert summary.endswith("0 mismatches, 0 double assignments")
    vnpus = re.fullmatch(
        r"vNPUs: (\d+) created, (\d+) given to containers, (\d+) destroyed once their pods "
        r"were gone; 0 pods without the scheduler's choice",
        lines[-1],
    )
    assert vnpus is not None, lines[-1]
    created, given, destroyed = map(int, vnpus.groups())
    assert created == given == destroyed > 0
    # An Atlas A3 node beside them: its 16 chips by die, and a chip2-node16 job on whole dies.
    (a3,) = [line for line in lines if line.startswith("a3-00: ")]
    assert "16 chips in dies of 2 (die:chips 0:0,1 1:2,3" in a3, a3
    assert "Ascend910-0..Ascend910-15, its DeviceInfo publishes 16 free" in a3, a3
    (job,) = [line for line in lines if line.startswith("a3-train-0 ")]
    assert "on a3-00" in job and job.endswith("whole dies: yes"), job


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


def test_a_vnpu_pod_counts_as_served_only_on_the_chip_the_scheduler_chose() -> None:
    assert _got_the_choice("1-vir02_1c", "Ascend310P-2c.1cpu-100-1_0", "100")
    assert not _got_the_choice("1-vir02_1c", "Ascend310P-2c.1cpu-100-0_0", "100")
    assert not _got_the_choice("1-vir02_1c", "Ascend310P-2c.1cpu-100-1_0", "101")
    assert _got_the_choice("0,2", "Ascend310P-0,Ascend310P-2", "0,2")
    assert not _got_the_choice("0,2", "Ascend310P-0,Ascend310P-1", "0,1")
    assert not _got_the_choice("1-vir02_1c", "", "100")
