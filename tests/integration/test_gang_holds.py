"""Gang holds within quota (issue 38, audit finding 2), through the extender's verbs as
kube-scheduler calls them, against the in-memory store: a gang size only its pods claim holds
nothing for another tenant; a PodGroup's members not created hold nothing (a PodGroup of 1000
with one 1-chip pod leaves the other servers whole); a PodGroup gang whose pods exist still
holds whole nodes ahead of a stream of small pods and starts on them; a namespace, and all
namespaces together, hold at most the share, each held node counted whole; a namespace whose
hold ended unused backs off."""

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


def test_a_podgroup_gang_whose_pods_exist_holds_whole_nodes_ahead_of_small_pods() -> None:
    h = Harness(4, hold_share=0.5)
    busy = [h.schedule(one_pod(h, "other", f"busy{i}", 8)) for i in range(3)]
    assert sorted(busy) == ["n0", "n1", "n2"]  # type: ignore[type-var]
    # Both pods of the gang exist; it does not fit yet (only n3 is whole).
    members = podgroup_gang(h, "train", "pg", 2, 8, pods=range(2))
    assert h.filter(members[0]).NodeNames == []
    small = one_pod(h, "other", "small", 1)
    assert h.filter(small).NodeNames == []
    assert held(h, small)["n3"].startswith("held for gang train/pg (8 chips)")
    # A busy node frees: it is held for the second member before a small pod takes it.
    h.api.delete("Pod", "other", "busy0")
    h.service.refresh()
    assert sorted(held(h, small)) == ["n0", "n3"]
    # The gang starts on the nodes held for it.
    assert sorted([h.schedule(m) for m in members]) == ["n0", "n3"]  # type: ignore[type-var]


def test_a_podgroup_of_1000_with_one_one_chip_pod_leaves_the_other_servers_whole() -> None:
    # Audit finding 2: before, a 1-chip hold on every server (999 members not created).
    h = Harness(4)  # the default share, 1/4: 8 of 32 chips, one server
    (member,) = podgroup_gang(h, "a", "huge", 1000, 1, pods=range(1))
    waits(h, member)
    eight = one_pod(h, "b", "eight", 8)
    assert sorted(held(h, eight)) == ["n0"], "one server, for the one member that exists"
    assert [h.schedule(one_pod(h, "b", f"e{i}", 8)) for i in range(3)] == ["n1", "n2", "n3"]


def test_one_chip_members_keep_a_chip_each_not_whole_nodes() -> None:
    h = Harness(2, hold_share=1)
    members = podgroup_gang(h, "train", "small", 3, 1, pods=range(2))
    waits(h, members[0])
    assert sorted(held(h, one_pod(h, "other", "eight", 8))) == ["n0", "n1"]
    assert h.filter(one_pod(h, "other", "four", 4)).NodeNames == ["n0", "n1"]


def test_a_namespace_and_all_namespaces_together_hold_at_most_the_share() -> None:
    h = Harness(8)  # the default share, 1/4: 16 of 64 chips, two servers
    big = podgroup_gang(h, "a", "big", 4, 8, pods=range(3))
    waits(h, big[0])
    (second,) = podgroup_gang(h, "a", "second", 2, 8, pods=range(1))
    waits(h, second)
    (other,) = podgroup_gang(h, "b", "other", 2, 8, pods=range(1))
    waits(h, other)
    reasons = sorted(held(h, one_pod(h, "c", "probe", 1)).values())
    assert [r.split(" (")[0] for r in reasons] == ["held for gang a/big"] * 2, (
        "the oldest gang holds the share's two servers: nothing is left for a/second (its "
        "namespace's share) nor b/other (all namespaces' share)"
    )


def test_a_namespace_whose_hold_ended_unused_backs_off_then_holds_again() -> None:
    h = Harness(2, hold_limit=100, hold_share=1)
    first = podgroup_gang(h, "a", "first", 3, 8, pods=range(2))
    waits(h, first[0])
    probe = one_pod(h, "b", "probe", 8)
    assert len(held(h, probe)) == 2
    freed = h.extender.state.freed
    h.clock.now += 101  # the hold limit passes: the hold ended unused
    h.service.maintain()
    # Nothing kube-scheduler sees changed: the plugin's poll of ``freed`` tries the pods it
    # refused again.
    assert h.extender.state.freed > freed, "the ended hold is counted as freed"
    assert held(h, probe) == {}
    # Re-created under a new name, it holds nothing until the backoff (100 s) ends.
    for pod in first:
        h.api.delete("Pod", "a", pod["metadata"]["name"])
    h.clock.now += 49
    again = podgroup_gang(h, "a", "again", 3, 8, pods=range(2))
    waits(h, again[0])
    assert held(h, probe) == {}
    h.clock.now += 51
    h.service.refresh()
    assert len(held(h, probe)) == 2
