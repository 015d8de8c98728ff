"""A short seeded run of ``benchmarks/fault_reaction.py``: one chip fault per mode; the
job-level restart moves every pod, the pod-level one only the faulty pod, and both place
the job again."""

from __future__ import annotations

from benchmarks.fault_reaction import MODES, STAGES, run_mode, summary


def test_a_fault_moves_four_pods_job_level_and_one_pod_level() -> None:
    samples = [s for mode in MODES for s in run_mode(mode, faults=1, seed=3)]
    assert {s.mode: s.moved for s in samples} == {"job-level": 4, "pod-level": 1}
    for s in samples:
        assert 0 < s.deviceinfo <= s.deleted <= s.placed
    result = summary(samples)
    assert all(f"{stage}_p99_ms" in result[mode] for mode in MODES for stage in STAGES)
