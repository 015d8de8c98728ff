"""Volcano's extender verbs, with the Go-field-name payloads Volcano sends."""

from __future__ import annotations

from typing import Any

import msgspec

from scheduler_core.service.wire import BadRequest
from tests.integration.test_extender import Harness, pending
from tests.integration.test_network_locality import Cluster

ALLOCATED, PIPELINED = 2, 4  # Volcano's TaskStatus


def task(pod: dict[str, Any], node: str = "", status: int = ALLOCATED) -> dict[str, Any]:
    """A TaskInfo as Volcano's extender plugin sends it (Go field names)."""
    meta = pod["metadata"]
    return {
        "UID": meta["uid"],
        "Name": meta["name"],
        "NodeName": node,
        "Status": status,
        "Pod": pod,
    }


def call(h: Harness | Cluster, verb: str, body: dict[str, Any]) -> Any:
    """A Volcano verb's answer as it goes on the wire."""
    return msgspec.to_builtins(h.service.routes.handle(f"volcano/{verb}", body))


def test_predicate_says_fit_or_why_not() -> None:
    h = Harness(1)
    assert call(h, "predicate", {"task": task(pending(h.api, "p", 2)), "node": {"Name": "n0"}}) == {
        "status": "",
        "code": 0,
    }
    # A request no node can serve: UnschedulableAndUnresolvable, so preempt evicts nothing.
    answer = call(h, "predicate", {"task": task(pending(h.api, "q", 3)), "node": {"Name": "n0"}})
    assert answer["code"] == 3 and "not in map[3:{} 5:{} 6:{} 7:{}]" in answer["status"]
    assert call(h, "allocateFunc", {"task": task(pending(h.api, "big", 8), "n0")}) == {
        "errorMessage": ""
    }
    answer = call(h, "predicate", {"task": task(pending(h.api, "r", 1)), "node": {"Name": "n0"}})
    assert answer["code"] == 2, "full now: evicting could make room"


def test_prioritize_returns_the_policys_own_scores() -> None:
    h = Harness(2)
    answer = call(
        h,
        "prioritize",
        {"task": task(pending(h.api, "p", 1)), "nodes": [{"Name": "n0"}, {"Name": "n1"}]},
    )
    assert answer == {"nodeScore": {"n0": 232.0, "n1": 232.0}, "errorMessage": ""}


def test_allocate_writes_the_annotations_and_deallocate_gives_the_chips_back() -> None:
    h = Harness(1)
    call(h, "onSessionOpen", {"Jobs": {}, "Nodes": {}})
    first = pending(h.api, "first", 8)
    assert call(h, "allocateFunc", {"task": task(first, "n0")}) == {"errorMessage": ""}
    annotations = h.api.get_pod("ns", "first")["metadata"]["annotations"]
    assert annotations["huawei.com/Ascend910"] == ",".join(f"Ascend910-{i}" for i in range(8))
    second = pending(h.api, "second", 8)
    refused = call(h, "allocateFunc", {"task": task(second, "n0")})["errorMessage"]
    assert "task requires 8 NPU cards but node idle is 0" in refused
    assert call(h, "deallocateFunc", {"task": task(first, "n0")}) == {"errorMessage": ""}
    assert call(h, "allocateFunc", {"task": task(second, "n0")}) == {"errorMessage": ""}


def test_allocate_carried_answers_the_annotations_writes_nothing_and_holds_the_chips() -> None:
    """The adapter's allocation: the annotations come back for Volcano's Binding to carry; the
    pod is not written; the chips stay taken until the pod is seen bound with them, or come
    back on deallocateFunc, or once the gang TTL passes with the pod never bound."""
    h = Harness(1)
    call(h, "onSessionOpen", {"Jobs": {}, "Nodes": {}})
    first = pending(h.api, "first", 8)
    answer = call(h, "allocateCarried", {"task": task(first, "n0")})
    assert answer["errorMessage"] == ""
    eight = ",".join(f"Ascend910-{i}" for i in range(8))
    assert answer["annotations"]["huawei.com/Ascend910"] == eight
    assert answer["annotations"]["predicate-time"].isdigit()
    assert h.api.get_pod("ns", "first") == first, "nothing written on the pod"
    second = pending(h.api, "second", 8)
    refused = call(h, "allocateCarried", {"task": task(second, "n0")})
    assert "node idle is 0" in refused["errorMessage"] and refused["annotations"] == {}
    # A discarded statement: the chips come back, nothing to take off the pod.
    assert call(h, "deallocateFunc", {"task": task(first, "n0")}) == {"errorMessage": ""}
    assert h.api.get_pod("ns", "first") == first
    carried = call(h, "allocateCarried", {"task": task(second, "n0")})["annotations"]
    assert carried["huawei.com/Ascend910"] == eight
    # Never bound (Volcano's bind failed, or it died): the chips come back after the TTL.
    h.clock.now += 61
    h.service.refresh()
    assert call(h, "allocateCarried", {"task": task(first, "n0")})["errorMessage"] == ""
    # Bound as Volcano binds it (the Binding's annotations land on the pod): it holds them.
    bound = h.api.get_pod("ns", "first")
    bound["spec"]["nodeName"] = "n0"
    bound["metadata"]["annotations"].update(answer["annotations"])
    h.api.put("Pod", bound)
    h.clock.now += 61
    h.service.refresh()
    third = pending(h.api, "third", 1)
    assert (
        "node idle is 0" in call(h, "allocateCarried", {"task": task(third, "n0")})["errorMessage"]
    )


def test_a_job_is_enqueueable_only_when_enough_chips_are_free() -> None:
    h = Harness(2)

    def job(milli: int) -> dict[str, Any]:
        return {"job": {"TotalRequest": {"ScalarResources": {"huawei.com/Ascend910": milli}}}}

    assert call(h, "jobEnqueueable", job(16000)) == {"status": 1}
    assert call(h, "jobEnqueueable", job(24000)) == {"status": -1}
    assert call(h, "jobEnqueueable", {"job": {"TotalRequest": {"ScalarResources": {}}}}) == {
        "status": 0
    }


def test_an_unknown_verb_is_refused() -> None:
    h = Harness(1)
    try:
        call(h, "bindFunc", {})
    except KeyError as missing:
        assert "bindFunc" in str(missing)
    else:
        raise AssertionError("an unknown verb was accepted")


def test_a_ranked_gang_through_volcano_goes_rank_by_rank_onto_the_tors() -> None:
    # ToRs of 4; 6 pods of a large-model job: 1.0 picks ToR 0 whole + t1-s0, t1-s1 (logical
    # ToRs over 2 whole ToRs). Volcano's predicate (which reserves) passes each pod on every
    # place of its gang still free, whatever the rank: Volcano caches a node's refusal for
    # the pod's whole task within a session (pkg/scheduler/util/predicate_helper.go). Its
    # prioritize sees 200 on the pod's own rank's node only.
    c = Cluster(2)
    pods = c.gang("big", 6, labels={"tor-affinity": "large-model-schema"})
    nodes = [{"Name": n} for n in c.names]
    expected = [f"t0-s{s}" for s in range(4)] + ["t1-s0", "t1-s1"]
    for rank, pod in enumerate(pods):
        outside = call(c, "predicate", {"task": task(pod), "node": {"Name": "t1-s2"}})
        assert outside["code"] == 2 and "not reserved for gang" in outside["status"]
        for later in expected[rank:]:
            passed = call(c, "predicate", {"task": task(pod), "node": {"Name": later}})
            assert passed == {"status": "", "code": 0}, later
        for taken in expected[:rank]:
            refused = call(c, "predicate", {"task": task(pod), "node": {"Name": taken}})
            assert refused["code"] == 2, f"{taken}'s place is taken"
        scores = call(c, "prioritize", {"task": task(pod), "nodes": nodes})
        assert scores == {"nodeScore": {expected[rank]: 200.0}, "errorMessage": ""}
        allocated = call(c, "allocateFunc", {"task": task(pod, expected[rank])})
        assert allocated == {"errorMessage": ""}
        assert c.annotations(f"big-{rank}")["hccl/rankIndex"] == str(rank)


def test_a_gang_member_volcano_puts_on_another_ranks_place_takes_that_place() -> None:
    # Volcano may choose another free place of the gang (other plugins' scores outweigh
    # ours): the pod takes that place and its rank, and its own place stays for another.
    c = Cluster(2)
    first, second, third, *_ = c.gang("big", 6, labels={"tor-affinity": "large-model-schema"})
    passed = call(c, "predicate", {"task": task(first), "node": {"Name": "t0-s1"}})
    assert passed["code"] == 0, "the predicate reserves the gang's places"
    assert call(c, "allocateFunc", {"task": task(first, "t0-s1")}) == {"errorMessage": ""}
    assert c.annotations("big-0")["hccl/rankIndex"] == "1"
    assert call(c, "allocateFunc", {"task": task(second, "t0-s0")}) == {"errorMessage": ""}
    assert c.annotations("big-1")["hccl/rankIndex"] == "0"
    refused = call(c, "allocateFunc", {"task": task(third, "t0-s0")})["errorMessage"]
    assert "no reservation of gang" in refused, "both places there are taken"


def test_predicate_all_answers_every_node_and_scores_the_passing_ones() -> None:
    # The adapter's one call a task: what predicate answers node by node, and prioritize's
    # scores of the nodes that pass.
    h = Harness(2)
    call(h, "allocateFunc", {"task": task(pending(h.api, "big", 8), "n0")})
    body = {"task": task(pending(h.api, "p", 2)), "nodes": ["n0", "n1"]}
    answer = call(h, "predicateAll", body)
    assert answer == {
        "passing": ["n1"],
        "failed": {"n0": answer["failed"]["n0"]},
        "unresolvable": {},
        "scores": call(h, "prioritize", {"task": body["task"], "nodes": [{"Name": "n1"}]})[
            "nodeScore"
        ],
    }
    single = call(h, "predicate", {"task": body["task"], "node": {"Name": "n0"}})
    assert single == {"status": answer["failed"]["n0"], "code": 2}
    # A request no node can serve: every node unresolvable (code 3), nothing scored.
    never = call(h, "predicateAll", {"task": task(pending(h.api, "q", 3)), "nodes": ["n0", "n1"]})
    assert never["passing"] == [] and never["scores"] == {} and never["failed"] == {}
    assert sorted(never["unresolvable"]) == ["n0", "n1"]


def test_predicate_all_is_rank_blind_as_predicate() -> None:
    c = Cluster(2)
    pods = c.gang("big", 6, labels={"tor-affinity": "large-model-schema"})
    expected = [f"t0-s{s}" for s in range(4)] + ["t1-s0", "t1-s1"]
    answer = call(c, "predicateAll", {"task": task(pods[0]), "nodes": c.names})
    assert sorted(answer["passing"]) == sorted(expected)
    assert answer["scores"] == {"t0-s0": 200.0}, "rank 0's own node alone is scored"
    assert "not reserved for gang" in answer["failed"]["t1-s2"]


def test_predicate_all_refuses_a_bad_body_naming_the_field() -> None:
    h = Harness(1)
    pod = task(pending(h.api, "p", 1))
    for body, field in (
        ({"nodes": ["n0"]}, "required field `task`"),
        ({"task": pod, "nodes": [{"Name": "n0"}]}, "`$.nodes[0]`"),
        ({"task": pod, "nodes": "n0"}, "`$.nodes`"),
    ):
        try:
            call(h, "predicateAll", body)
        except BadRequest as bad:
            assert field in str(bad), str(bad)
        else:
            raise AssertionError(f"accepted {body}")


def test_a_gang_is_reserved_only_nodes_its_pods_may_go_to() -> None:
    # Found by running our side in the real Volcano beside other jobs' nodes
    # (benchmarks/differential.py --through ours): the reservation took the best-scored nodes
    # of the whole cluster, and a gang whose pods select a pool (a nodeSelector, as Huawei's
    # samples select accelerator-type or host-arch) was refused on every node until it
    # expired. n0 and n1 come first among equals; the pods select pool b: n2 and n3.
    h = Harness(4)
    for name in ("n2", "n3"):
        node = h.api.get("Node", "", name)
        node["metadata"].setdefault("labels", {})["pool"] = "b"
        h.api.put("Node", node)
    pods = []
    for rank in range(2):
        pod = pending(h.api, f"g-{rank}", 8, gang="g", size=2)
        pod["spec"]["nodeSelector"] = {"pool": "b"}
        h.api.put("Pod", pod)
        pods.append(h.api.get_pod("ns", f"g-{rank}"))
    h.service.refresh()
    answer = call(h, "predicateAll", {"task": task(pods[0]), "nodes": h.names})
    assert sorted(answer["passing"]) == ["n2", "n3"], answer
    for rank, pod in enumerate(pods):
        node = answer["passing"][rank]
        assert call(h, "allocateFunc", {"task": task(pod, node)}) == {"errorMessage": ""}
