"""The edits Huawei's build makes to a Volcano tree before it builds its plugin there.

The same edits as ``patch_all_source`` and ``build_workflow`` of MindCluster's
``component/ascend-for-volcano/build/build.sh`` (Ascend/mind-cluster v26.1.0) make with ``sed``,
done here in Python so that the test bed needs no GOPATH layout; each function reproduces its
``sed`` expression's effect, GNU sed's semantics included where they matter (a ``.`` in a pattern
matches any character; ``N`` joins the next line). Only the branch for Volcano v1.10 and later is
done (v1.7.0 and v1.9.0 have edits of their own there that the test bed does not pin).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from pathlib import Path

PLUGIN_DIR = Path("pkg/scheduler/plugins/ascend-volcano-plugin")
RUNNING_GO = Path("pkg/controllers/job/state/running.go")
ALLOCATE_GO = Path("pkg/scheduler/actions/allocate/allocate.go")


def _sed_pattern(literal: str) -> str:
    """A sed basic regular expression whose only special characters are dots (as build.sh's
    patterns are) as a Python pattern: the dots match any character, as in sed."""
    return ".".join(re.escape(part) for part in literal.split("."))


def ignore_action(text: str) -> str:
    """The job controller's running state ignores an "Ignore" action (only where the file does
    not say ``Ignore`` yet; Volcano v1.12.0's ``switch action.Action {`` does not match, so
    there it changes nothing, as upstream's sed does not)."""
    if "Ignore" in text:
        return text
    return text.replace("switch action {", 'switch action { case "Ignore" : return nil')


_KLOG = re.compile(_sed_pattern('k8s.io/klog"').encode())


def klog_v2(data: bytes) -> bytes:
    """``k8s.io/klog`` imports become ``k8s.io/klog/v2``: Volcano since v1.9 logs through klog/v2,
    and the plugin's lines through the old klog would be lost."""
    return _KLOG.sub(b'k8s.io/klog/v2"', data)


def klog_files(plugin: Path) -> list[Path]:
    """The files of ``find . -type f ! -path './.git*/*' ! -path './doc/*'`` run in the plugin's
    folder (find's ``-path`` wildcards match slashes too, as fnmatch's do)."""
    found = []
    for path in sorted(plugin.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        relative = "./" + path.relative_to(plugin).as_posix()
        if fnmatch.fnmatchcase(relative, "./.git*/*") or fnmatch.fnmatchcase(relative, "./doc/*"):
            continue
        found.append(path)
    return found


_PIPELINE = re.compile(_sed_pattern("ji.WaitingTaskNum()+ji.ReadyTaskNum() < job.MinAvailable"))


def pipeline_tasks(text: str) -> str:
    """The plugin's job-readiness check also counts pending best-effort tasks (the pipeline
    task patch)."""
    return _PIPELINE.sub(
        "ji.WaitingTaskNum()+ji.ReadyTaskNum()+ji.PendingBestEffortTaskNum() < job.MinAvailable",
        text,
    )


# sed '/case len(nodes) == 1:/ { N; N; s/case len(nodes) == 1:.*\n.*\n.*/            default:/ }':
# the matching line from that case on and the two lines after it become one "default:", so that
# allocate scores the nodes (where the plugin picks the chips) even when one node is left. At the
# end of the file, where N finds no line, GNU sed prints the lines unchanged: so here.
_ONE_NODE = re.compile(r"^([^\n]*?)case len\(nodes\) == 1:[^\n]*\n[^\n]*\n[^\n]*", re.M)


def score_single_node(text: str) -> str:
    return _ONE_NODE.sub(lambda found: found.group(1) + "            default:", text)


def _edit_text(path: Path, edit: Callable[[str], str]) -> bool:
    before = path.read_text()
    after = edit(before)
    if after != before:
        path.write_text(after)
    return after != before


def patch_all_source(tree: Path, base_version: str) -> dict[str, int]:
    """Apply build.sh's ``patch_all_source`` for ``base_version`` to the Volcano ``tree`` that
    holds the plugin at ``PLUGIN_DIR``; returns how many files each edit changed."""
    if base_version in {"v1.7.0", "v1.9.0"}:
        raise ValueError(f"build.sh edits Volcano {base_version} differently; not done here")
    changed = {"running.go Ignore": int(_edit_text(tree / RUNNING_GO, ignore_action))}
    klog = 0
    for path in klog_files(tree / PLUGIN_DIR):
        data = path.read_bytes()
        if (edited := klog_v2(data)) != data:
            path.write_bytes(edited)
            klog += 1
    changed["klog/v2"] = klog
    changed["npu.go pipeline"] = int(_edit_text(tree / PLUGIN_DIR / "npu.go", pipeline_tasks))
    changed["allocate.go one node"] = int(_edit_text(tree / ALLOCATE_GO, score_single_node))
    return changed


def release_yaml(text: str, base_version: str, plugin_name: str, plugin_version: str) -> str:
    """Huawei's deployment YAML as ``build_workflow`` writes it into its openEuler (glibc) output:
    the scheduler configuration names the plugin built, the images carry the plugin's version,
    ``/bin/ash`` is ``/bin/sh``."""
    text = re.sub(r"name: volcano-npu_.*", f"name: {plugin_name}", text)
    text = re.sub(_sed_pattern(f":{base_version}"), f":{base_version}-{plugin_version}", text)
    return text.replace("/bin/ash", "/bin/sh")
