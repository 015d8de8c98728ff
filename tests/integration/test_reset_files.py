"""A job's ``reset-config-<job>`` mirrored into the host folder its pods mount by hostPath
(agent/reset_files.py) over an in-memory API server and the agent's own pod cache: a
"container" holding the folder open, as a hostPath mount does, sees ``reset.json`` change
within a deadline and never a half-written file; the layout is upstream's (one file per data
key, 0644, in ``<namespace>.reset-config-<job>``, 0755); the folder goes with the job's pods."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.pod_cache import PodCache
from agent.reset_files import ConfigMapFiles, mirrors
from scheduler_core.engine import rescheduling
from simulation.cluster import wait_for
from simulation.memory import MemoryCluster

NODE = "node-a"
NS = "vcjob"
DEADLINE = 10.0


def pod(name: str, job: str, node: str = NODE) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": NS,
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"volcano.sh/job-name": job},
        },
        "spec": {"nodeName": node, "containers": [{"name": "ascend"}]},
        "status": {"phase": "Running"},
    }


def configmap(name: str, data: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"namespace": NS, "name": name, "labels": labels}, "data": data}


class Container:
    """Reads ``reset.json`` through a descriptor of the folder, as a process does through
    its hostPath mount of it (the same directory, whatever is renamed inside)."""

    def __init__(self, folder: Path) -> None:
        self._dir = os.open(folder, os.O_RDONLY)
        self.seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.wait(0.005):
            handle = os.open("reset.json", os.O_RDONLY, dir_fd=self._dir)
            with os.fdopen(handle, encoding="utf-8") as file:
                text = file.read()
            if not self.seen or self.seen[-1] != text:
                self.seen.append(text)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        os.close(self._dir)


@pytest.fixture
def api() -> MemoryCluster:
    cluster = MemoryCluster()
    cluster.put("Node", {"metadata": {"name": NODE}})
    return cluster


@pytest.fixture
def files(api: MemoryCluster, tmp_path: Path) -> Iterator[ConfigMapFiles]:
    due = threading.Event()
    cache = PodCache(api, NODE, on_change=(due.set,))
    cache.start()
    assert wait_for(lambda: cache.synced)
    mirror = ConfigMapFiles(
        api, cache, mirrors(tmp_path / "reset", tmp_path / "trace"), period=0.2, due=due
    )
    mirror.start()
    yield mirror
    mirror.stop()
    cache.stop()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_jobs_reset_config_reaches_its_pods_folder_and_goes_with_them(
    api: MemoryCluster, files: ConfigMapFiles, tmp_path: Path
) -> None:
    root = tmp_path / "reset"
    root.mkdir()
    (root / "someone-elses").mkdir()  # not ours: never touched
    initial = {"reset.json": '{\n    "status":"initializing"\n}\n', "checkCode": ""}
    api.put("ConfigMap", configmap("reset-config-job1", initial, {"reset": "true"}))
    # A job on another node, and one whose reset-config lacks reset=true: no folder.
    api.put("ConfigMap", configmap("reset-config-job2", initial, {"reset": "true"}))
    api.put("ConfigMap", configmap("reset-config-job3", initial, {}))
    api.put("ConfigMap", configmap("data-trace-job1", {"profilingSwitch": "{}"}, {}))
    api.put("Pod", pod("job2-0", "job2", node="node-b"))
    api.put("Pod", pod("job3-0", "job3"))
    api.put("Pod", pod("job1-0", "job1"))
    folder = root / f"{NS}.reset-config-job1"
    assert wait_for((folder / "reset.json").is_file, DEADLINE)
    assert sorted(p.name for p in folder.iterdir()) == ["checkCode", "reset.json"]
    assert (folder / "reset.json").read_text() == initial["reset.json"]
    assert (folder / "checkCode").read_text() == ""
    assert mode(folder) == 0o755
    assert {mode(p) for p in folder.iterdir()} == {0o644}
    trace = tmp_path / "trace" / f"{NS}.data-trace-job1" / "profilingSwitch"
    assert wait_for(trace.is_file, DEADLINE) and trace.read_text() == "{}"
    assert sorted(p.name for p in root.iterdir()) == ["someone-elses", folder.name]

    container = Container(folder)
    try:
        assert wait_for(lambda: bool(container.seen), DEADLINE)
        # Volcano's update after a pod-level rescheduling, as our scheduler writes it.
        current = api.get_configmap(NS, "reset-config-job1")
        data = rescheduling.reset_config(current["data"], 1_700_000_000.0, pod_level=True)
        api.update_configmap({**current, "data": data})
        new = data["reset.json"]
        assert wait_for(lambda: container.seen[-1] == new, DEADLINE)
    finally:
        container.close()
    assert set(container.seen) <= {initial["reset.json"], new}, "never a part of a file"
    assert (folder / "restartType").read_text() == "podReschedule"
    assert (folder / "checkCode").read_text() == data["checkCode"]
    assert {mode(p) for p in folder.iterdir()} == {0o644}

    api.delete("Pod", NS, "job1-0")
    assert wait_for(lambda: not folder.exists(), DEADLINE)
    assert wait_for(lambda: not trace.parent.exists(), DEADLINE)
    assert sorted(p.name for p in root.iterdir()) == ["someone-elses"]


def test_a_deleted_configmap_takes_its_folder_and_a_new_one_brings_it_back(
    api: MemoryCluster, files: ConfigMapFiles, tmp_path: Path
) -> None:
    data = {"reset.json": '{"RankList":null}', "checkCode": "x", "stale": "1"}
    api.put("ConfigMap", configmap("reset-config-job1", data, {"reset": "true"}))
    api.put("Pod", pod("job1-0", "job1"))
    folder = tmp_path / "reset" / f"{NS}.reset-config-job1"
    assert wait_for((folder / "stale").is_file, DEADLINE)
    current = api.get_configmap(NS, "reset-config-job1")
    api.update_configmap({**current, "data": {"reset.json": "{}", "checkCode": "y"}})
    assert wait_for(lambda: not (folder / "stale").exists(), DEADLINE), "a key gone, its file"
    api.delete("ConfigMap", NS, "reset-config-job1")
    assert wait_for(lambda: not folder.exists(), DEADLINE)
    api.put("ConfigMap", configmap("reset-config-job1", data, {"reset": "true"}))
    assert wait_for((folder / "reset.json").is_file, DEADLINE)
