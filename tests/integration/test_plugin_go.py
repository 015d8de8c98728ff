"""The kube-scheduler plugin's Go tests (``kube_scheduler_plugin/plugin_test.go``): its own logic
against a service played by httptest, compiled with the Kubernetes module the test bed built
kube-scheduler-ascend from (``make testbed``), as that build compiles it (static, trimmed paths,
so Go's cache of that build serves this one). The real kube-scheduler runs the plugin in
``tests/real``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from testbed.build import PLUGIN_SCHEDULER, PLUGIN_SOURCE, SRC


def test_the_plugins_go_tests_pass(tmp_path: Path) -> None:
    built = SRC / PLUGIN_SCHEDULER
    assert (built / "go.mod").exists(), f"no {built}/go.mod: `make testbed` builds it"
    for name in ("go.mod", "go.sum"):
        shutil.copy(built / name, tmp_path / name)
    tests = sorted(PLUGIN_SOURCE.glob("*_test.go"))
    assert tests, f"no Go tests in {PLUGIN_SOURCE}"
    for source in PLUGIN_SOURCE.glob("*.go"):
        shutil.copy(source, tmp_path / source.name)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false"}
    done = subprocess.run(
        ["go", "test", "-trimpath", "-count=1", "-v", "."],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    passed = {line.split()[2] for line in output.splitlines() if line.startswith("--- PASS: ")}
    declared = {
        line.split("(")[0].removeprefix("func ")
        for test in tests
        for line in test.read_text().splitlines()
        if line.startswith("func Test")
    }
    assert passed == declared, f"ran {sorted(passed)}, declared {sorted(declared)}"
