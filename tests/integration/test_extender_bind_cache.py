"""``/bind`` (and Volcano's ``allocateFunc``) decides from the watch cache's pod when it shows
the bound UID: one write per bind, no read; every check of a bind still holds on the cached
view (its scheduler, its NPUs, its UID), and a pod the cache lacks is read once.
Prioritize's C-loop path answers as the per-node one did."""

from __future__ import annotations

import random
from typing import Any

import pytest

from scheduler_core.engine.model import Job
from scheduler_core.service.verbs.extender import BindRefused
from scheduler_core.service.wire import best, best_list, normalize, normalize_list, pod_request
from simulation.memory import pod_object
from tests.integration.test_extender import Harness, pending, schedule


def counted_gets(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pods the extender reads from the API server from now on."""
    reads: list[str] = []
    real = h.api.get_pod

    def get_pod(namespace: str, name: str) -> dict[str, Any]:
        reads.append(f"{namespace}/{name}")
        return real(namespace, name)

    monkeypatch.setattr(h.api, "get_pod", get_pod)
    return reads


def test_a_bind_of_a_pod_the_cache_shows_reads_no_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(2)
    pod = pending(h.api, "p", 2)
    h.service.refresh()  # the watch's view of it
    reads = counted_gets(h, monkeypatch)
    node = schedule(h.extender, pod, h.names)
    assert node is not None
    assert h.api.get_pod("ns", "p")["spec"]["nodeName"] == node
    assert reads == ["ns/p"]  # this test's own read above: the verbs read none


def test_a_bind_of_a_pod_the_cache_lacks_reads_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness(2)
    pod = pending(h.api, "late", 2)  # not refreshed: the watch has not shown it yet
    reads = counted_gets(h, monkeypatch)
    assert schedule(h.extender, pod, h.names) is not None
    # filter and prioritize read it (the cache lacks it), bind once more
    assert reads == ["ns/late"] * 3


def test_a_cached_pod_of_another_scheduler_is_refused_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(1)
    pod = pod_object("ns", "theirs", None, 2)
    pod["spec"]["schedulerName"] = "default-scheduler"
    h.api.put("Pod", pod)
    h.service.refresh()
    pod = h.api.get_pod("ns", "theirs")
    assert h.filter(pod).NodeNames == ["n0"]
    reads = counted_gets(h, monkeypatch)
    meta = pod["metadata"]
    with pytest.raises(BindRefused, match="for scheduler 'default-scheduler', not ours"):
        h.extender.bind(
            {"PodName": "theirs", "PodNamespace": "ns", "PodUID": meta["uid"], "Node": "n0"}
        )
    assert reads == []
    assert not h.api.get_pod("ns", "theirs")["spec"].get("nodeName")


def test_a_bind_naming_another_uid_than_the_cache_shows_reads_and_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(1)
    pod = pending(h.api, "p", 2)
    h.service.refresh()
    assert h.filter(pod).NodeNames == ["n0"]
    reads = counted_gets(h, monkeypatch)
    with pytest.raises(BindRefused, match="another UID"):
        h.extender.bind({"PodName": "p", "PodNamespace": "ns", "PodUID": "forged", "Node": "n0"})
    assert reads == ["ns/p"]


def test_volcanos_allocation_of_a_pod_the_cache_shows_reads_no_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # allocateFunc (Volcano) decides from the cached pod as bind does: one write, no read;
    # a forged UID is still read and refused.
    h = Harness(1)
    pod = pending(h.api, "p", 2)
    h.service.refresh()
    reads = counted_gets(h, monkeypatch)
    assert h.extender.annotate(pod, "n0") == ""
    assert reads == []
    forged = pending(h.api, "q", 2)
    h.service.refresh()
    forged["metadata"]["uid"] = "forged"
    before = len(reads)
    assert "another UID" in h.extender.annotate(forged, "n0")
    assert reads[before:] == ["ns/q"]
    assert h.api.get_pod("ns", "p")["metadata"]["annotations"]


@pytest.mark.parametrize("seed", range(5))
def test_prioritize_in_c_loops_answers_as_per_node(seed: int) -> None:
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(200)]
    values = [rng.choice([None, 0.5, 1.0, 2.0, 7.25]) for _ in names]
    scores = {n: v for n, v in zip(names, values, strict=True) if v is not None}
    assert normalize_list(values, names) == normalize(scores, names)
    same = [3.0 if v is not None else None for v in values]
    assert normalize_list(same, names) == normalize(
        {n: v for n, v in zip(names, same, strict=True) if v is not None}, names
    )
    assert normalize_list([None] * 3, names[:3]) == normalize({}, names[:3])


@pytest.mark.parametrize("seed", range(5))
def test_the_best_nodes_are_those_prioritize_scores_highest(seed: int) -> None:
    # Scores that round to the top one (96 of 0..100 is 10 of 0..10) tie with it there.
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(200)]
    values = [rng.choice([None, 0.0, 50.0, 94.0, 96.0, 100.0]) for _ in names]
    chosen = best_list(values, names)
    assert chosen == best(normalize_list(values, names))
    assert {v for n, v in zip(names, values, strict=True) if n in chosen} <= {96.0, 100.0}
    assert (
        best_list([None, None], names[:2])
        == names[:2]
        == best(normalize_list([None] * 2, names[:2]))
    )
    assert best_list([4.0, None, 4.0], names[:3]) == [names[0], names[2]]


def test_session_score_list_is_score_in_order() -> None:
    h = Harness(6)
    for i in range(3):
        schedule(h.extender, pending(h.api, f"p{i}", 2 * i + 1), h.names)
    h.service.refresh()
    session = h.extender.state.session
    names = [*h.names, "no-such-node"]
    job = pod_job(h, 2)
    scores = session.score(job, 2, names)
    assert session.score_list(job, 2, names) == [scores.get(n) for n in names]


def pod_job(h: Harness, npu: int) -> Job:
    view = h.extender.live(pending(h.api, "probe", npu))
    return pod_request(view, h.extender.state.job_of).job()
