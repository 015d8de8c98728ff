"""``python -m scheduler_core place``: the JSON contract, and clear errors for bad input."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pytest

from scheduler_core.__main__ import main

NODES = [
    {
        "name": "n1",
        "product": "module910x8",
        "allocatable": 8,
        "free": ["Ascend910-0", "Ascend910-4", "Ascend910-5"],
    },
    {
        "name": "n2",
        "product": "module910x8",
        "allocatable": 8,
        "free": [f"Ascend910-{i}" for i in range(8)],
    },
    {
        "name": "n3",
        "product": "module910x8",
        "allocatable": 7,
        "unhealthy": ["Ascend910-7"],
        "free": [f"Ascend910-{i}" for i in range(7)],
    },
]


def run(
    request: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    policy: str = "huawei",
) -> tuple[int, Any, str]:
    text = request if isinstance(request, str) else json.dumps(request)
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    code = main(["place", "--policy", policy])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out else None, err


def one_task(npu: int, **job: Any) -> dict[str, Any]:
    return {
        "nodes": NODES,
        "job": {
            "name": "j",
            "product": "module910x8",
            "tasks": [{"name": "t0", "npu": npu}],
            **job,
        },
    }


def test_a_feasible_request_prints_placements_and_scores(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, answer, _ = run(one_task(1), monkeypatch, capsys)
    assert code == 0
    assert answer["feasible"] is True
    assert answer["placements"] == [{"task": "t0", "node": "n1", "chips": ["Ascend910-0"]}]
    # n1: ring of 1 → 8·32 + 5; n2: rings of 4 → 8·29; n3: 7 healthy, rings 4 and 3 → 8·27 + 1
    assert answer["scores"] == {"n1": 261.0, "n2": 232.0, "n3": 217.0}


def test_an_infeasible_request_prints_the_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    request = one_task(8)
    request["job"]["tasks"].append({"name": "t1", "npu": 8})
    code, answer, _ = run(request, monkeypatch, capsys)
    assert code == 1, "nothing fits: the answer is printed, the exit code says so"
    assert answer["feasible"] is False
    assert "task t1" in answer["reason"] and "0/3 nodes are available" in answer["reason"]


def test_a_job_of_two_pods_of_four_chips_is_placed_on_910_x8_servers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Huawei's plugin (MindCluster v26.1.0 in Volcano v1.12.0) places it; the old 8-per-pod
    rule of VOL-v5 refused it. Each pod takes a whole ring (``module910x8`` priority [4])."""
    request = one_task(4)
    request["job"]["tasks"].append({"name": "t1", "npu": 4})
    code, answer, _ = run(request, monkeypatch, capsys)
    assert code == 0
    assert answer["placements"] == [
        {"task": "t0", "node": "n2", "chips": [f"Ascend910-{i}" for i in range(4)]},
        {"task": "t1", "node": "n2", "chips": [f"Ascend910-{i}" for i in range(4, 8)]},
    ]


def test_the_binpack_policy_is_selectable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, answer, _ = run(one_task(4), monkeypatch, capsys, policy="binpack")
    assert answer["placements"][0]["node"] == "n3"


def test_the_product_may_come_from_the_accelerator_type_selector(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    request = one_task(1, selector={"accelerator-type": "module-910b-8"})
    del request["job"]["product"]
    _, answer, _ = run(request, monkeypatch, capsys)
    assert answer["feasible"] is False
    assert "check Node n1 label [accelerator-type] Failed, value is module" in answer["reason"]


def broken(path: str, value: Any) -> dict[str, Any]:
    request: Any = json.loads(json.dumps(one_task(2)))
    *parents, last = path.split(".")
    target = request
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return dict(request)


@pytest.mark.parametrize(
    ("request_obj", "error"),
    [
        ("{not json", "request: not JSON"),
        ([], "request: expected an object"),
        (broken("nodes", KeyError), "request.nodes: missing"),
        (broken("nodes.0.free", ["Ascend910-0", "Ascend-1"]), "nodes[0].free[1]: chip name"),
        (broken("nodes.1.allocatable", "8"), 'nodes[1].allocatable: expected int, got "8"'),
        (broken("nodes.0.product", "module910x9"), "nodes[0].product: unknown product"),
        (broken("nodes.0.free", ["Ascend910-9"]), "nodes[0]: node n1: free chip Ascend910-9"),
        (broken("nodes.2.name", "n1"), "nodes[2].name: 'n1' appears twice"),
        (broken("nodes.0.free", ["Ascend910-1", "Ascend910-1"]), "nodes[0].free: names a chip"),
        (broken("job", KeyError), "request.job: missing"),
        (broken("job.tasks.0.npu", -1), "job.tasks[0]: task t0: npu -1 is negative"),
        (broken("job.tasks.0.npu", True), "job.tasks[0].npu: expected int, got true"),
        (broken("job.tasks", {}), "job.tasks: expected list"),
        (broken("job.selector", {"accelerator-type": 3}), "job.selector.accelerator-type"),
    ],
)
def test_malformed_input_exits_2_with_one_line_naming_the_field(
    request_obj: Any,
    error: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, answer, err = run(request_obj, monkeypatch, capsys)
    assert code == 2
    assert answer is None
    assert err.startswith(f"error: {error}")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[" * 100_000, "request: nested too deep"),
        ('{"nodes": [], "job": ' + "9" * 5000 + "}", "request: a number has too many digits"),
    ],
)
def test_input_of_any_depth_or_size_exits_2_with_one_line(
    text: str, error: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, answer, err = run(text, monkeypatch, capsys)
    assert (code, answer) == (2, None)
    assert err.startswith(f"error: {error}") and err.count("\n") == 1, err
    assert len(err) < 300


def test_the_module_runs_as_a_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "scheduler_core", "place"],
        input=json.dumps(one_task(2)),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["placements"][0]["chips"] == ["Ascend910-4", "Ascend910-5"]
    bad = subprocess.run(
        [sys.executable, "-m", "scheduler_core", "place"],
        input="{}",
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr == "error: request.nodes: missing\n"


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--tls-cert-file", "c.crt"], "--tls-cert-file and --tls-private-key-file go together"),
        (
            ["--client-ca-file", "ca.crt"],
            "--client-ca-file needs --tls-cert-file (client certificates are TLS)",
        ),
        (["--token-file", "/nonexistent/token"], "--token-file: No such file or directory"),
    ],
)
def test_serve_refuses_incomplete_access_settings(
    flags: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", *flags]) == 2
    assert capsys.readouterr().err == f"error: {error}\n"


def test_an_inference_job_is_placed_with_its_chip_kinds_names(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The reference's worked case 2: one chip of card310x4; no card has exactly one free
    chip, so the card with three (4, 5, 6) goes before the card with two."""
    inference: dict[str, Any] = {
        "name": "i1",
        "product": "chip310x4",
        "free": [f"Ascend310-{i}" for i in (0, 1, 4, 5, 6)],
    }
    request = {
        "nodes": [inference, {"name": "n1", "product": "module910x8", "free": ["Ascend910-0"]}],
        "job": {"name": "j", "product": "card310x4", "tasks": [{"name": "t0", "npu": 1}]},
    }
    code, answer, _ = run(request, monkeypatch, capsys)
    assert code == 0
    assert answer["placements"] == [{"task": "t0", "node": "i1", "chips": ["Ascend310-4"]}]
    assert answer["rejected"]["n1"].startswith("node n1 has huawei.com/Ascend910 chips")
    inference["free"] = ["Ascend910-0"]
    code, _, err = run(request, monkeypatch, capsys)
    assert code == 2 and "nodes[0].free[0]" in err


def test_a_310p_job_goes_to_the_fullest_node_with_the_lowest_free_chips(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """MindCluster's base handler, as Huawei's plugin in Volcano v1.12.0 decided the same
    request: score 6400 − free chips (internal/npu/base/frame.go ScoreBestNPUNodes), chips the
    first by id (base/node.go sorts them)."""
    nodes = [
        {"name": "p1", "product": "ascend310p", "free": [f"Ascend310P-{i}" for i in range(8)]},
        {"name": "p2", "product": "ascend310p", "free": ["Ascend310P-7", "Ascend310P-5"]},
    ]
    request = {
        "nodes": nodes,
        "job": {
            "name": "j",
            "resource": "huawei.com/Ascend310P",
            "labels": {"npu-310-strategy": "card"},
            "tasks": [{"name": "t0", "npu": 2}],
        },
    }
    code, answer, _ = run(request, monkeypatch, capsys)
    assert code == 0
    assert answer["scores"] == {"p1": 6392.0, "p2": 6398.0}
    assert answer["placements"] == [
        {"task": "t0", "node": "p2", "chips": ["Ascend310P-5", "Ascend310P-7"]}
    ]


def test_a_huawei_npu_job_is_routed_by_its_resource_and_policy(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # MindCluster routes a huawei.com/npu job by its schedule_policy (factory.go): place
    # read every job as huawei.com/Ascend910 and had no key to say otherwise.
    node = {"name": "a5", "product": "atlas350x8", "free": [f"npu-{i}" for i in range(8)]}
    job = {"name": "j", "tasks": [{"name": "t0", "npu": 2}], "resource": "huawei.com/npu"}
    request: dict[str, Any] = {
        "nodes": [node],
        "job": {**job, "annotations": {"huawei.com/schedule_policy": "chip1-node8"}},
    }
    code, answer, _ = run(request, monkeypatch, capsys)
    assert code == 0
    assert answer["placements"] == [{"task": "t0", "node": "a5", "chips": ["npu-0", "npu-1"]}]
    code, _, err = run({"nodes": [node], "job": job}, monkeypatch, capsys)
    assert code == 2 and "job.product: huawei.com/npu asks for a huawei.com/schedule_policy" in err


@pytest.mark.parametrize(
    ("job", "error"),
    [
        (
            {"resource": "huawei.com/Ascend999"},
            "job.resource: 'huawei.com/Ascend999' is not one of",
        ),
        (
            {"resource": "huawei.com/npu", "product": "module910x8"},
            "job.product: module910x8 is a handler of huawei.com/Ascend910, not huawei.com/npu",
        ),
    ],
)
def test_a_resource_no_handler_takes_is_refused_naming_it(
    job: dict[str, Any],
    error: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    request = one_task(1)
    request["job"].pop("product")
    request["job"].update(job)
    code, answer, err = run(request, monkeypatch, capsys)
    assert code == 2 and answer is None and error in err


def test_a_sub_healthy_node_is_read_from_the_request(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """MindCluster's fault handler scores a sub-healthy node 1 lower and keeps jobs that exit
    on sub-health off it (internal/rescheduling/reschedule.go)."""
    nodes = [{**NODES[1], "name": "sick", "card_sub_healthy": True}, NODES[1]]
    request: dict[str, Any] = {
        "nodes": nodes,
        "job": {"name": "j", "product": "module910x8", "tasks": [{"name": "t0", "npu": 4}]},
    }
    code, answer, _ = run(request, monkeypatch, capsys)
    assert code == 0 and answer["scores"] == {"sick": 255.0, "n2": 256.0}
    assert answer["placements"][0]["node"] == "n2"
    request["job"]["labels"] = {"subHealthyStrategy": "forceExit"}
    code, answer, _ = run(request, monkeypatch, capsys)
    assert answer["rejected"]["sick"].startswith("NodePredicate failed, cardSubHealthy=true")
    nodes[0]["card_sub_healthy"] = "yes"
    code, _, err = run(request, monkeypatch, capsys)
    assert code == 2 and "nodes[0].card_sub_healthy: expected bool" in err
