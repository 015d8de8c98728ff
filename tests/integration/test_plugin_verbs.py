"""The verbs of the AscendNPU kube-scheduler plugin (``kube_scheduler_plugin/``), over HTTPS
with kube-scheduler's client certificate: ``place`` answers the nodes of the best score among
every NPU node the service knows (no node list comes in); ``reserve`` holds chips on the node
kube-scheduler chose and answers their annotations, writing nothing; ``unreserve`` gives them
back unless the pod is bound; each with ``/bind``'s checks, and only for kube-scheduler's
certificate. The real kube-scheduler built with the plugin runs in
``tests/real/test_scheduler_scale.py`` and ``tests/real/test_plugin_scheduler.py``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contract import deviceinfo
from scheduler_core.service.verbs.plugin import (
    FreedAnswer,
    PlaceAnswer,
    PluginArgs,
    PluginVerbs,
    ReserveAnswer,
    WaitsAnswer,
    feasible_nodes_to_find,
)
from scheduler_core.service.wire import BadRequest
from simulation.memory import pod_object
from tests.integration.test_extender import Harness, add_node, pending
from tests.integration.test_extender_access import BEARER, Pki, call, pki, served

__all__ = ["pki"]  # the module's fixture, used here

CHIPS = "huawei.com/Ascend910"
PLUGIN_GO = Path(__file__).parents[2] / "kube_scheduler_plugin" / "plugin.go"


@pytest.fixture
def service(pki: Pki) -> Iterator[tuple[Harness, str]]:
    h, url = served(pki)
    yield h, url
    h.service.stop()


def verb(url: str, pki: Pki, name: str, pod: dict[str, Any], node: str = "") -> tuple[int, Any]:
    body: dict[str, Any] = {"Pod": pod} | ({"Node": node} if node else {})
    status, answer, _ = call(url, pki, client=pki.scheduler, path=name, body=body)
    return status, answer


def test_place_answers_the_best_nodes_of_every_npu_node_and_reserve_holds_chips(
    service: tuple[Harness, str], pki: Pki
) -> None:
    h, url = service
    first = pending(h.api, "first", 4)
    status, answer = verb(url, pki, "place", first)
    assert status == 200 and sorted(answer["NodeNames"]) == ["n0", "n1"], answer
    status, held = verb(url, pki, "reserve", first, "n0")
    assert status == 200 and held["Error"] == "", held
    assert held["Annotations"][CHIPS] == "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3"
    assert held["Annotations"]["predicate-time"].isdigit()
    assert CHIPS not in h.api.get_pod("ns", "first")["metadata"]["annotations"], "nothing written"
    # The held chips count before any Binding is seen: n0's other ring is now the best fit
    # for a 4-chip pod (it leaves n1 whole).
    second = pending(h.api, "second", 4)
    assert verb(url, pki, "place", second)[1]["NodeNames"] == ["n0"]
    assert verb(url, pki, "reserve", second, "n0")[1]["Annotations"][CHIPS] == (
        "Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7"
    )
    third = pending(h.api, "third", 8)
    assert verb(url, pki, "place", third)[1]["NodeNames"] == ["n1"]
    # Given back, n0 is whole again.
    assert verb(url, pki, "unreserve", first, "n0") == (200, {"Annotations": {}, "Error": ""})
    assert verb(url, pki, "unreserve", second, "n0")[0] == 200
    assert sorted(verb(url, pki, "place", third)[1]["NodeNames"]) == ["n0", "n1"]


def test_no_place_says_why_and_whether_preemption_could_help(
    service: tuple[Harness, str], pki: Pki
) -> None:
    h, url = service
    too_many = pending(h.api, "nine", 9)
    status, answer = verb(url, pki, "place", too_many)
    assert status == 200 and answer["NodeNames"] == [] and answer["Unresolvable"], answer
    assert answer["Reason"].startswith("2 x "), answer
    for name in ("a", "b"):
        pod = pending(h.api, name, 8)
        node = verb(url, pki, "place", pod)[1]["NodeNames"][0]
        assert verb(url, pki, "reserve", pod, node)[1]["Error"] == ""
    full = verb(url, pki, "place", pending(h.api, "late", 1))[1]
    assert full["NodeNames"] == [] and not full["Unresolvable"], "evicting could free chips"


def test_reserve_has_binds_checks(service: tuple[Harness, str], pki: Pki) -> None:
    h, url = service
    pod = pending(h.api, "p", 2)
    status, answer = verb(url, pki, "reserve", pod, "n1")
    assert status == 403
    assert answer["Error"].endswith("the node did not pass this service's filter for the pod")
    assert verb(url, pki, "place", pod)[0] == 200
    forged = {**pod, "metadata": {**pod["metadata"], "uid": "uid-of-an-older-p"}}
    status, answer = verb(url, pki, "reserve", forged, "n0")
    assert status == 403 and answer["Error"].endswith("the cluster's pod has another UID")
    nameless = {**pod, "metadata": {k: v for k, v in pod["metadata"].items() if k != "uid"}}
    status, answer = verb(url, pki, "reserve", nameless, "n0")
    assert status == 400 and "uid is required" in answer["Error"], answer
    status, answer = verb(url, pki, "reserve", pod)
    assert (status, answer) == (400, {"Error": "Node is required"})
    theirs = pod_object("ns", "theirs", None, 2)
    theirs["spec"]["schedulerName"] = "default-scheduler"
    h.api.put("Pod", theirs)
    theirs = h.api.get_pod("ns", "theirs")
    verb(url, pki, "place", theirs)
    status, answer = verb(url, pki, "reserve", theirs, "n0")
    assert status == 403 and answer["Error"].endswith("not ours"), answer


def test_unreserve_gives_nothing_back_of_a_bound_pod(
    service: tuple[Harness, str], pki: Pki
) -> None:
    """kube-scheduler unreserves after a failed Binding, which may have landed all the same:
    a bound pod's chips stay taken."""
    h, url = service
    pod = pending(h.api, "p", 8)
    verb(url, pki, "place", pod)
    held = verb(url, pki, "reserve", pod, "n0")[1]["Annotations"]
    meta = pod["metadata"]
    h.api.bind_pod("ns", "p", meta["uid"], "n0", held)
    status, answer = verb(url, pki, "unreserve", pod, "n0")
    assert status == 200 and answer["Error"] == "unreserve ns/p: bound to n0", answer
    assert verb(url, pki, "place", pending(h.api, "next", 8))[1]["NodeNames"] == ["n1"]


def test_only_kube_schedulers_certificate_calls_the_plugins_verbs(
    service: tuple[Harness, str], pki: Pki
) -> None:
    h, url = service
    pod = pending(h.api, "p", 2)
    for name in PluginVerbs.VERBS:
        body = {"Pod": pod, "Node": "n0"}
        status, answer, _ = call(url, pki, path=name, body=body, headers=BEARER)
        assert status == 403 and f"'/{name}' is not for the token" in answer["Error"], answer
        status, _, _ = call(url, pki, client=pki.intruder, path=name, body=body)
        assert status == 403
        assert call(url, pki, path=name, body=body)[0] == 401
    assert CHIPS not in h.api.get_pod("ns", "p")["metadata"]["annotations"]


def test_freed_counts_the_places_freed_that_kube_scheduler_sees_no_event_for(
    service: tuple[Harness, str], pki: Pki
) -> None:
    # The plugin polls the count and activates the pods it refused when it moves: a node left
    # out and offered again (here its DeviceInfo gone and back; a NodeD report cleared on the
    # real control plane, tests/real/test_noded.py), and chips held for a bind that never came
    # and given back. A node leaving frees nothing.
    h, url = service

    def freed() -> int:
        status, answer, _ = call(url, pki, client=pki.scheduler, path="freed", body={})
        assert status == 200, answer
        return int(answer["Freed"])

    start = freed()
    for node in ("n0", "n1"):
        h.api.delete("ConfigMap", deviceinfo.NAMESPACE, deviceinfo.configmap_name(node))
    h.service.refresh()
    assert freed() == start
    # A refusal carries the count as it was decided: the plugin tries the pod again once the
    # count differs.
    refused = verb(url, pki, "place", pending(h.api, "refused", 8))[1]
    assert (refused["NodeNames"], refused["Freed"]) == ([], start), refused
    add_node(h.api, "n0")
    add_node(h.api, "n1")
    h.service.refresh()
    back = freed()
    assert back > start
    pod = pending(h.api, "held", 8)
    (node, *_) = verb(url, pki, "place", pod)[1]["NodeNames"]
    assert verb(url, pki, "reserve", pod, node)[1]["Error"] == ""
    h.service.maintain()
    assert freed() == back, "held, not yet expired"
    h.clock.now += 3600
    h.service.maintain()
    assert freed() > back


def placed(verbs: PluginVerbs, pod: dict[str, Any]) -> list[str]:
    answer = verbs.handle("place", {"Pod": pod})
    assert isinstance(answer, PlaceAnswer)
    return answer.NodeNames


def test_place_samples_as_kube_scheduler_and_every_node_it_answers_may_be_reserved() -> None:
    """Above 100 nodes ``place`` asks kube-scheduler's numFeasibleNodesToFind of them at a
    time, from where the last call stopped (kube-scheduler's nextStartNodeIndex); the nodes
    answered are the pod's passes however many calls it took (each filter call replaces the
    last one's)."""
    h = Harness(300)
    verbs = PluginVerbs(h.extender)
    enough = feasible_nodes_to_find(300)
    assert enough == 144  # 48 % of 300 (50 - 300 / 125)
    first = placed(verbs, pending(h.api, "one", 1))
    second = placed(verbs, pending(h.api, "two", 1))
    assert len(first) == len(second) == enough, "every free node ties: the sample is the answer"
    assert not set(first) & set(second), "the second starts where the first stopped"
    whole = set(h.names)  # "one" and "two" placed, not reserved: nothing taken yet
    for i in range(200):  # 200 nodes taken whole
        pod = pending(h.api, f"full-{i}", 8)
        node = placed(verbs, pod)[0]
        assert not h.extender.hold("ns", f"full-{i}", pod["metadata"]["uid"], node)[0]
        whole.discard(node)
    pod = pending(h.api, "late", 8)
    answer = placed(verbs, pod)
    assert len(whole) == 100 and sorted(answer) == sorted(whole), "asked in 3 calls"
    uid = pod["metadata"]["uid"]
    assert all(h.extender.passes.passed(uid, node, h.clock()) for node in answer)


def test_place_samples_with_the_profiles_percentage_of_nodes_to_score() -> None:
    # kube-scheduler's numFeasibleNodesToFind with the profile's percentage, which the
    # plugin's args repeat: 100 asks every node (the best of all of them), 10 asks its floor
    # of 100 nodes; outside 0..100 the call is refused, naming the value.
    h = Harness(300)
    verbs = PluginVerbs(h.extender)
    assert [feasible_nodes_to_find(300, p) for p in (0, 10, 60, 100)] == [144, 100, 180, 300]
    assert feasible_nodes_to_find(5000, 0) == 500 and feasible_nodes_to_find(99, 10) == 99

    def asked(percentage: int, name: str) -> list[str]:
        body = {"Pod": pending(h.api, name, 1), "PercentageOfNodesToScore": percentage}
        answer = verbs.handle("place", body)
        assert isinstance(answer, PlaceAnswer)
        return answer.NodeNames

    assert sorted(asked(100, "all")) == sorted(h.names), "every free node ties"
    assert len(asked(10, "few")) == 100
    for wrong in (101, -1):
        with pytest.raises(BadRequest, match=f"PercentageOfNodesToScore {wrong} "):
            asked(wrong, f"wrong{wrong + 1}")


def test_a_pod_nominated_by_a_preemption_waits_for_its_node_before_preempting_again(
    service: tuple[Harness, str], pki: Pki
) -> None:
    """``waits`` (the plugin's PostFilter, before kube-scheduler's preemption): a pod whose
    nominated node is still full in this view waits for it for the extender's grace, then
    may preempt again; no nomination, or a node that can never host it: no wait."""
    h, url = service
    for name in ("a", "b"):  # both nodes full
        pod = pending(h.api, name, 8)
        node = verb(url, pki, "place", pod)[1]["NodeNames"][0]
        assert verb(url, pki, "reserve", pod, node)[1]["Error"] == ""
    pod = pending(h.api, "high", 8)
    assert verb(url, pki, "waits", pod) == (200, {"Reason": ""}), "not nominated"
    nominated = {**pod, "status": {**pod["status"], "nominatedNodeName": "n0"}}
    status, answer = verb(url, pki, "waits", nominated)
    assert status == 200 and "waiting for n0" in answer["Reason"], answer
    h.clock.now += 31  # NOMINATION_GRACE
    assert verb(url, pki, "waits", nominated)[1] == {"Reason": ""}
    elsewhere = {**pod, "status": {**pod["status"], "nominatedNodeName": "not-an-npu-node"}}
    assert verb(url, pki, "waits", elsewhere)[1] == {"Reason": ""}, "it can never go there"


def test_the_go_plugin_sends_and_reads_only_the_fields_these_verbs_have() -> None:
    # The wire between kube_scheduler_plugin/plugin.go and these verbs, read from the Go
    # source: a field the one side renames would be dropped by the other without a word
    # (msgspec and encoding/json both ignore unknown fields).
    source = PLUGIN_GO.read_text()
    answers = {
        "placeAnswer": PlaceAnswer,
        "reserveAnswer": ReserveAnswer,
        "waitsAnswer": WaitsAnswer,
        "freedAnswer": FreedAnswer,
    }
    for go, ours in answers.items():
        struct = re.search(rf"type {go} struct \{{(.*?)\n\}}", source, re.S)
        assert struct is not None, go
        read = set(re.findall(r'json:"(\w+)"', struct.group(1)))
        assert read and read <= set(ours.__struct_fields__), (go, read)
    sent = set(re.findall(r'"(\w+)": ', " ".join(re.findall(r"map\[string\]any\{[^}]*\}", source))))
    sent |= set(re.findall(r'body\["(\w+)"\]', source))
    assert sent == set(PluginArgs.__struct_fields__), sent
    verbs = set(re.findall(r'pl\.post\(ctx, "(\w+)"', source))
    assert verbs == set(PluginVerbs.VERBS)
