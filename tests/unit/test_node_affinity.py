"""The nodes a pod's own constraints allow, by kube-scheduler's rules (``contract.node_affinity``),
on upstream's own test cases:

- NodeAffinity: kubernetes/kubernetes pkg/scheduler/framework/plugins/nodeaffinity/
  node_affinity_test.go ``TestNodeAffinity`` (the required part; the names are upstream's);
- TaintToleration: pkg/scheduler/framework/plugins/tainttoleration/taint_toleration_test.go
  ``TestTaintTolerationFilter``, and k8s.io/api/core/v1/toleration_test.go
  ``TestTolerationToleratesTaint``;
- NodeUnschedulable: pkg/scheduler/framework/plugins/nodeunschedulable/
  node_unschedulable_test.go ``TestNodeUnschedulable``.

And the table the verbs read them through (``node_fits``): computed once per change of a
node's labels or taints."""

from __future__ import annotations

from typing import Any

import pytest

from contract.node_affinity import (
    AFFINITY_REASON,
    EVERYWHERE,
    NodeFacts,
    Taint,
    misfit,
    node_facts,
    pod_constraints,
)
from contract.pods import pod_view
from scheduler_core.service.state.cluster_view import trim_node
from scheduler_core.service.state.node_fits import NodeFits


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    selector = {"nodeSelectorTerms": list(terms)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": selector}}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def term(*expressions: dict[str, Any], fields: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    made: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields:
        made["matchFields"] = list(fields)
    return made


def node(labels: dict[str, str] | None = None, name: str = "node_1", **spec: Any) -> NodeFacts:
    return node_facts({"metadata": {"name": name, "labels": labels or {}}, "spec": spec})


def fits(spec: dict[str, Any], on: NodeFacts) -> bool:
    return misfit(pod_constraints({"spec": spec}), on) == ""


# TestNodeAffinity: (upstream's name, the pod's spec, the node's labels, whether it fits)
NODE_AFFINITY: list[tuple[str, dict[str, Any], dict[str, str], bool]] = [
    ("missing labels", {"nodeSelector": {"foo": "bar"}}, {}, False),
    ("same labels", {"nodeSelector": {"foo": "bar"}}, {"foo": "bar"}, True),
    (
        "node labels are superset",
        {"nodeSelector": {"foo": "bar"}},
        {"foo": "bar", "baz": "blah"},
        True,
    ),
    (
        "node labels are subset",
        {"nodeSelector": {"foo": "bar", "baz": "blah"}},
        {"foo": "bar"},
        False,
    ),
    (
        "Pod with matchExpressions using In operator that matches the existing node",
        {"affinity": required(term(expr("foo", "In", "bar", "value2")))},
        {"foo": "bar"},
        True,
    ),
    (
        "Pod with matchExpressions using Gt operator that matches the existing node",
        {"affinity": required(term(expr("kernel-version", "Gt", "0204")))},
        {"kernel-version": "0206"},
        True,
    ),
    (
        "Pod with matchExpressions using NotIn operator that matches the existing node",
        {"affinity": required(term(expr("mem-type", "NotIn", "DDR", "DDR2")))},
        {"mem-type": "DDR3"},
        True,
    ),
    (
        "Pod with matchExpressions using Exists operator that matches the existing node",
        {"affinity": required(term(expr("GPU", "Exists")))},
        {"GPU": "NVIDIA-GRID-K1"},
        True,
    ),
    (
        "Pod with affinity that don't match node's labels won't schedule onto the node",
        {"affinity": required(term(expr("foo", "In", "value1", "value2")))},
        {"foo": "bar"},
        False,
    ),
    (
        "Pod with empty MatchExpressions is not a valid value will match no objects",
        {"affinity": required(term())},
        {"foo": "bar"},
        False,
    ),
    (
        "Pod with an empty []NodeSelectorTerm in affinity, can't match the node's labels",
        {"affinity": required()},
        {"foo": "bar"},
        False,
    ),
    ("Pod with no Affinity will schedule onto a node", {}, {"foo": "bar"}, True),
    (
        "Pod with Affinity but nil NodeSelector will schedule onto a node",
        {"affinity": {"nodeAffinity": {}}},
        {"foo": "bar"},
        True,
    ),
    (
        "Pod with multiple matchExpressions ANDed that matches the existing node",
        {"affinity": required(term(expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")))},
        {"GPU": "NVIDIA-GRID-K1"},
        True,
    ),
    (
        "Pod with multiple matchExpressions ANDed that doesn't match the existing node",
        {"affinity": required(term(expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER")))},
        {"GPU": "NVIDIA-GRID-K1"},
        False,
    ),
    (
        "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's labels",
        {
            "affinity": required(
                term(expr("foo", "In", "bar", "value2")),
                term(expr("diffkey", "In", "wrong", "value2")),
            )
        },
        {"foo": "bar"},
        True,
    ),
    (
        "Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are deprecating) "
        "both are satisfied, will schedule onto the node",
        {"nodeSelector": {"foo": "bar"}, "affinity": required(term(expr("foo", "Exists")))},
        {"foo": "bar"},
        True,
    ),
    (
        "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the old thing "
        "that we are deprecating) is not satisfied, won't schedule onto the node",
        {"nodeSelector": {"foo": "bar"}, "affinity": required(term(expr("foo", "Exists")))},
        {"foo": "barrrrrr"},
        False,
    ),
    (
        "Pod with an invalid value in Affinity term won't be scheduled onto the node",
        {"affinity": required(term(expr("foo", "NotIn", "invalid value: ___@#$%^")))},
        {"foo": "bar"},
        False,
    ),
]

NAME_IN = {"key": "metadata.name", "operator": "In", "values": ["node_1"]}
NAME_IN_2 = {"key": "metadata.name", "operator": "In", "values": ["node_2"]}
# TestNodeAffinity's matchFields cases, on node_1 labelled foo=bar.
MATCH_FIELDS: list[tuple[str, dict[str, Any], bool]] = [
    (
        "Pod with matchFields using In operator that matches the existing node",
        required(term(fields=(NAME_IN,))),
        True,
    ),
    (
        "Pod with matchFields using In operator that does not match the existing node",
        required(term(fields=(NAME_IN_2,))),
        False,
    ),
    (
        "Pod with two terms: matchFields does not match, but matchExpressions matches",
        required(term(fields=(NAME_IN_2,)), term(expr("foo", "In", "bar"))),
        True,
    ),
    (
        "Pod with one term: matchFields does not match, but matchExpressions matches",
        required(term(expr("foo", "In", "bar"), fields=(NAME_IN_2,))),
        False,
    ),
    (
        "Pod with one term: both matchFields and matchExpressions match",
        required(term(expr("foo", "In", "bar"), fields=(NAME_IN,))),
        True,
    ),
    (
        "Pod with two terms: both matchFields and matchExpressions do not match",
        required(term(fields=(NAME_IN_2,)), term(expr("foo", "In", "not-match-to-bar"))),
        False,
    ),
]


@pytest.mark.parametrize(("name", "spec", "labels", "expected"), NODE_AFFINITY)
def test_node_affinity_as_kube_schedulers_node_affinity_plugin(
    name: str, spec: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    assert fits(spec, node(labels)) is expected, name


@pytest.mark.parametrize(("name", "affinity", "expected"), MATCH_FIELDS)
def test_match_fields_read_the_nodes_name(
    name: str, affinity: dict[str, Any], expected: bool
) -> None:
    assert fits({"affinity": affinity}, node({"foo": "bar"})) is expected, name


def test_the_comparisons_read_the_label_as_go_reads_an_int64() -> None:
    gt = {"affinity": required(term(expr("v", "Gt", "5")))}
    lt = {"affinity": required(term(expr("v", "Lt", "5")))}
    assert fits(gt, node({"v": "+6"})) and fits(lt, node({"v": "-6"}))
    for unreadable in ("6.0", " 6", "6_0", "0x6", "99999999999999999999", ""):
        assert not fits(gt, node({"v": unreadable})) and not fits(lt, node({"v": unreadable}))
    assert not fits(gt, node({})), "Gt needs the label"
    # A requirement that does not parse drops its term (Gt takes one integer).
    assert not fits({"affinity": required(term(expr("v", "Gt", "five")))}, node({"v": "6"}))
    assert not fits({"affinity": required(term(expr("v", "Gt", "1", "2")))}, node({"v": "6"}))
    # NotIn passes a node without the label; an unknown operator matches nothing.
    assert fits({"affinity": required(term(expr("v", "NotIn", "1")))}, node({}))
    assert not fits({"affinity": required(term(expr("v", "Equals", "1")))}, node({"v": "1"}))


def test_the_reasons_name_the_constraint() -> None:
    spec = {"nodeSelector": {"zone": "a"}}
    assert misfit(pod_constraints({"spec": spec}), node({"zone": "b"})) == (
        f"{AFFINITY_REASON} (nodeSelector zone=a)"
    )
    affinity = {"affinity": required(term(expr("zone", "In", "a")))}
    assert misfit(pod_constraints({"spec": affinity}), node({})) == (
        f"{AFFINITY_REASON} (required node affinity)"
    )


TAINT = {"key": "dedicated", "value": "user1", "effect": "NoSchedule"}


def toleration(key: str, operator: str, value: str, effect: str) -> dict[str, str]:
    return {"key": key, "operator": operator, "value": value, "effect": effect}


# TestTaintTolerationFilter: (upstream's name, the pod's tolerations, the node's taints, fits)
TAINT_TOLERATION: list[tuple[str, list[dict[str, str]], list[dict[str, str]], bool]] = [
    (
        "A pod having no tolerations can't be scheduled onto a node with nonempty taints",
        [],
        [TAINT],
        False,
    ),
    (
        "A pod which can be scheduled on a dedicated node assigned to user1 with effect NoSchedule",
        [toleration("dedicated", "Equal", "user1", "NoSchedule")],
        [TAINT],
        True,
    ),
    (
        "A pod which can't be scheduled on a dedicated node assigned to user2 with effect "
        "NoSchedule",
        [toleration("dedicated", "Equal", "user2", "NoSchedule")],
        [TAINT],
        False,
    ),
    (
        "A pod can be scheduled onto the node, with a toleration uses operator Exists that "
        "tolerates the taints on the node",
        [toleration("foo", "Exists", "", "NoSchedule")],
        [{"key": "foo", "value": "bar", "effect": "NoSchedule"}],
        True,
    ),
    (
        "A pod has multiple tolerations, node has multiple taints, all the taints are "
        "tolerated, pod can be scheduled onto the node",
        [
            toleration("dedicated", "Equal", "user2", "NoSchedule"),
            toleration("foo", "Exists", "", "NoSchedule"),
        ],
        [
            {"key": "dedicated", "value": "user2", "effect": "NoSchedule"},
            {"key": "foo", "value": "bar", "effect": "NoSchedule"},
        ],
        True,
    ),
    (
        "A pod has a toleration that keys and values match the taint on the node, but (non-empty)"
        " effect doesn't match, can't be scheduled onto the node",
        [toleration("foo", "Equal", "bar", "PreferNoSchedule")],
        [{"key": "foo", "value": "bar", "effect": "NoSchedule"}],
        False,
    ),
    (
        "The pod has a toleration that keys and values match the taint on the node, the effect "
        "of toleration is empty, and the effect of taint is NoSchedule. Pod can be scheduled "
        "onto the node",
        [toleration("foo", "Equal", "bar", "")],
        [{"key": "foo", "value": "bar", "effect": "NoSchedule"}],
        True,
    ),
    (
        "The pod has a toleration that key and value don't match the taint on the node, but the "
        "effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
        [toleration("dedicated", "Equal", "user2", "NoSchedule")],
        [{"key": "dedicated", "value": "user1", "effect": "PreferNoSchedule"}],
        True,
    ),
    (
        "The pod has no toleration, but the effect of taint on node is PreferNoSchedule. Pod can "
        "be scheduled onto the node",
        [],
        [{"key": "dedicated", "value": "user1", "effect": "PreferNoSchedule"}],
        True,
    ),
]


@pytest.mark.parametrize(("name", "tolerations", "taints", "expected"), TAINT_TOLERATION)
def test_taints_as_kube_schedulers_taint_toleration_plugin(
    name: str, tolerations: list[dict[str, str]], taints: list[dict[str, str]], expected: bool
) -> None:
    assert fits({"tolerations": tolerations}, node(taints=taints)) is expected, name


# TestTolerationToleratesTaint: (the toleration, the taint, tolerated)
TOLERATES: list[tuple[dict[str, str], Taint, bool]] = [
    # same key and effect, Exists, the taint without a value / with one
    (toleration("foo", "Exists", "", "NoSchedule"), Taint("foo", "", "NoSchedule"), True),
    (toleration("foo", "Exists", "", "NoSchedule"), Taint("foo", "bar", "NoSchedule"), True),
    # an empty key with Exists: every taint of the effect
    (toleration("", "Exists", "", "NoSchedule"), Taint("foo", "bar", "NoSchedule"), True),
    # same key, effect and value, Equal
    (toleration("foo", "Equal", "bar", "NoSchedule"), Taint("foo", "bar", "NoSchedule"), True),
    # different values, Equal
    (
        toleration("foo", "Equal", "value1", "NoSchedule"),
        Taint("foo", "value2", "NoSchedule"),
        False,
    ),
    # different effects
    (toleration("foo", "Equal", "bar", "NoExecute"), Taint("foo", "bar", "NoSchedule"), False),
    # an empty operator is Equal; an empty effect matches every effect
    (toleration("foo", "", "bar", ""), Taint("foo", "bar", "NoExecute"), True),
    # an operator upstream does not know (Gt / Lt with their feature gate off) tolerates nothing
    (toleration("foo", "Gt", "1", "NoSchedule"), Taint("foo", "2", "NoSchedule"), False),
]


@pytest.mark.parametrize(("given", "taint", "expected"), TOLERATES)
def test_a_toleration_tolerates_as_the_api_says(
    given: dict[str, str], taint: Taint, expected: bool
) -> None:
    constraints = pod_constraints({"spec": {"tolerations": [given]}})
    assert (constraints.untolerated((taint,)) is None) is expected


def test_an_empty_key_with_exists_and_no_effect_tolerates_every_taint() -> None:
    taints = [TAINT, {"key": "a", "value": "b", "effect": "NoExecute"}]
    assert fits({"tolerations": [{"operator": "Exists"}]}, node(taints=taints))
    assert misfit(pod_constraints({"spec": {}}), node(taints=taints)) == (
        "node(s) had untolerated taint {dedicated: user1}"
    )


def test_an_unschedulable_node_takes_only_a_pod_tolerating_it() -> None:
    """TestNodeUnschedulable: "Does not schedule pod to unschedulable node", and "Schedule pod
    with toleration to unschedulable node (node.Spec.Unschedulable==true)"."""
    cordoned = node(unschedulable=True)
    assert not fits({}, cordoned)
    tolerates = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    assert fits({"tolerations": [{**tolerates, "operator": "Exists"}]}, cordoned)
    assert fits({}, node(unschedulable=False))


def test_a_pod_view_carries_its_constraints_and_a_trimmed_node_keeps_what_they_read() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeSelector": {"zone": "a"}, "tolerations": [{"operator": "Exists"}]},
    }
    assert pod_view(pod).constraints == pod_constraints(pod) != EVERYWHERE
    assert pod_view({"metadata": {"name": "q"}}).constraints is EVERYWHERE
    full = {
        "metadata": {"name": "n", "labels": {"zone": "a", "kubernetes.io/hostname": "n"}},
        "spec": {
            "taints": [TAINT, {"key": "soft", "value": "", "effect": "PreferNoSchedule"}],
            "unschedulable": True,
            "podCIDR": "10.0.0.0/24",
        },
        "status": {"capacity": {}, "images": [{"names": ["big"]}]},
    }
    trimmed = trim_node(full)
    assert trimmed["spec"] == {"taints": [TAINT], "unschedulable": True}
    assert node_facts(trimmed) == node_facts(full)
    assert node_facts(full).taints == (
        Taint("dedicated", "user1", "NoSchedule"),
        Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),
    )


def test_the_table_rules_out_nodes_once_per_change_of_their_labels_or_taints() -> None:
    fits_table = NodeFits()
    for i in range(4):
        fits_table.set(f"n{i}", node({"zone": "a" if i < 2 else "b"}, name=f"n{i}"))
    zone_a = pod_constraints({"spec": {"nodeSelector": {"zone": "a"}}})
    names = ["n0", "n1", "n2", "n3", "not-an-npu-node"]
    assert sorted(fits_table.misfits(zone_a, names)) == ["n2", "n3"]
    assert sorted(fits_table.misfits(zone_a, ["n1", "n3"])) == ["n3"]
    # Relabelled: ruled out afresh.
    fits_table.set("n3", node({"zone": "a"}, name="n3"))
    assert sorted(fits_table.misfits(zone_a, names)) == ["n2"]
    # A pod selecting nothing is kept off only the tainted nodes it does not tolerate.
    assert fits_table.misfits(EVERYWHERE, names) == {}
    fits_table.set("n1", node({"zone": "a"}, name="n1", taints=[TAINT]))
    assert fits_table.misfits(EVERYWHERE, names) == {
        "n1": "node(s) had untolerated taint {dedicated: user1}"
    }
    assert sorted(fits_table.misfits(zone_a, names)) == ["n1", "n2"]
    assert fits_table.misfit(zone_a, "n0") == ""
    assert fits_table.misfit(zone_a, "not-an-npu-node") is None
    fits_table.set("n0", None)
    assert fits_table.misfit(zone_a, "n0") is None
