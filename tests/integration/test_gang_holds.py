"""Gang holds within quota (issue 38), through the extender's verbs as kube-scheduler calls
them, against the in-memory store: a gang size only its pods claim holds nothing for another
tenant; a PodGroup gang still holds the chips its missing members need and starts on them
ahead of a stream of small pods; a namespace holds at most its share; a namespace whose hold
ended unused backs off."""

from __future__ import annotations

from typing import Any

from contract.groups import COSCHEDULING, COSCHEDULING_GROUP_LABEL, PODGROUP_APIS, podgroups
from simulation.memory import pod_object
from tests.integration.test_extender import Harness


def one_pod(h: Harness, namespace: str, name: str, npu: int) -> dict[str, Any]:
    h.api.put("Pod", pod_object(namespace, name, None, npu))
    return h.api.get_pod(namespace, name)


def claimed_gang(h: Harness, namespace: str, name: str, size: int, npu: int) -> dict[str, Any]:
    """One pod of a gang whose size only the pod's own annotation claims."""
    pod = pod_object(namespace, f"{name}-0", None, npu, labels={"ascend.npu/gang": name})
    pod["metadata"]["annotations"]["ascend.npu/gang-size"] = str(size)
    h.api.put("Pod", pod)
    return h.api.get_pod(namespace, f"{name}-0")


def podgroup_gang(
    h: Harness, namespace: str, name: str, size: int, npu: int, *, pods: range
) -> list[dict[str, Any]]:
    """Pods ``pods`` of a gang whose coscheduling PodGroup (made with its first pod) states
    its size."""
    h.api.apis.add(PODGROUP_APIS[COSCHEDULING])
    if pods.start == 0:
        podgroup = {"metadata": {"namespace": namespace, "name": name}, "spec": {"minMember": size}}
        h.api.create_object(podgroups(COSCHEDULING), podgroup)
    for r in pods:
        labels = {COSCHEDULING_GROUP_LABEL: name}
        h.api.put("Pod", pod_object(namespace, f"{name}-{r}", None, npu, labels=labels))
    h.service.refresh()
    return [h.api.get_pod(namespace, f"{name}-{r}") for r in pods]


def waits(h: Harness, pod: dict[str, Any]) -> None:
    """The gang member is tried and refused: its gang waits."""
    answer = h.filter(pod)
    assert answer.NodeNames == [] and all("waiting" in r for r in answer.FailedNodes.values())


def held(h: Harness, pod: dict[str, Any]) -> dict[str, str]:
    """The nodes the pod is refused for a hold (node → why)."""
    return {n: why for n, why in h.filter(pod).FailedNodes.items() if why.startswith("held")}


def test_one_chip_pods_claiming_gangs_of_two_hold_nothing_against_another_tenant() -> None:
    # The attack: three 1-chip pods, each claiming a gang of 2 in an annotation,
    # held three whole nodes (24 chips) against another tenant; re-created under new names
    # they held them again.
    h = Harness(3, hold_share=1)
    for name in ("g1", "g2", "g3"):
        waits(h, claimed_gang(h, "attacker", name, 2, 1))
    # Each says why nothing is held for it (the reason kube-scheduler records on the pod).
    answer = h.filter(claimed_gang(h, "attacker", "g1", 2, 1))
    assert all(
        why.endswith("(no chips held for it meanwhile: no PodGroup states its size)")
        for why in answer.FailedNodes.values()
    ), answer.FailedNodes
    victim = one_pod(h, "victim", "train", 8)
    assert held(h, victim) == {}
    assert h.filter(victim).NodeNames == ["n0", "n1", "n2"]
    for name in ("g4", "g5", "g6"):  # again, under new names
        waits(h, claimed_gang(h, "attacker", name, 2, 1))
    assert h.schedule(victim) is not None


def test_a_podgroup_gang_holds_its_chips_and_starts_on_them_ahead_of_small_pods() -> None:
    h = Harness(4, hold_share=0.5)
    h.schedule(one_pod(h, "other", "busy", 1))  # n0 is no longer whole
    (first,) = podgroup_gang(h, "train", "pg", 2, 8, pods=range(1))
    waits(h, first)
    reserved = sorted(held(h, one_pod(h, "other", "probe", 1)))
    assert reserved == ["n1", "n2"], "two whole nodes for the two missing members of 8 chips"
    # A stream of small pods fills what is not held, then is refused there.
    placed = [h.schedule(one_pod(h, "other", f"s{i}", 1)) for i in range(15)]
    assert sorted(set(placed)) == ["n0", "n3"] and placed.count("n3") == 8  # type: ignore[type-var]
    late = one_pod(h, "other", "late", 1)
    assert h.filter(late).NodeNames == []
    assert held(h, late)["n1"].startswith("held for gang train/pg (8 chips)")
    # The last member comes: the gang starts on the nodes held for it.
    (second,) = podgroup_gang(h, "train", "pg", 2, 8, pods=range(1, 2))
    assert sorted([h.schedule(first), h.schedule(second)]) == ["n1", "n2"]  # type: ignore[type-var]


def test_one_chip_members_keep_a_chip_each_not_whole_nodes() -> None:
    h = Harness(2, hold_share=1)
    (member,) = podgroup_gang(h, "train", "small", 3, 1, pods=range(1))
    waits(h, member)
    assert sorted(held(h, one_pod(h, "other", "eight", 8))) == ["n0", "n1"]
    assert h.filter(one_pod(h, "other", "four", 4)).NodeNames == ["n0", "n1"]


def test_a_namespace_holds_at_most_its_share_of_the_cluster() -> None:
    h = Harness(4)  # the default share, 1/4: 8 of 32 chips
    (big,) = podgroup_gang(h, "a", "big", 3, 8, pods=range(1))
    waits(h, big)
    (second,) = podgroup_gang(h, "a", "second", 2, 8, pods=range(1))
    waits(h, second)
    (other,) = podgroup_gang(h, "b", "other", 2, 8, pods=range(1))
    waits(h, other)
    reasons = sorted(held(h, one_pod(h, "c", "probe", 1)).values())
    assert [r.split(" (")[0] for r in reasons] == ["held for gang a/big", "held for gang b/other"]


def test_a_namespace_whose_hold_ended_unused_backs_off_then_holds_again() -> None:
    h = Harness(2, hold_limit=100, hold_share=1)
    (first,) = podgroup_gang(h, "a", "first", 2, 8, pods=range(1))
    waits(h, first)
    probe = one_pod(h, "b", "probe", 8)
    assert len(held(h, probe)) == 2
    h.clock.now += 101  # the hold limit passes: the hold ended unused
    h.service.refresh()
    assert held(h, probe) == {}
    # Re-created under a new name, it holds nothing until the backoff (100 s) ends.
    h.api.delete("Pod", "a", "first-0")
    h.clock.now += 49
    (again,) = podgroup_gang(h, "a", "again", 2, 8, pods=range(1))
    waits(h, again)
    assert held(h, probe) == {}
    h.clock.now += 51
    h.service.refresh()
    assert len(held(h, probe)) == 2
