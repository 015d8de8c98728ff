"""Where a pod may go by its own constraints, as kube-scheduler decides it before it calls an
extender: the pod's ``nodeSelector`` and required node affinity against the node's labels
(and name), its tolerations against the node's ``NoSchedule`` / ``NoExecute`` taints.

Each side is parsed once, when it enters (``pod_constraints`` when the pod's view is made,
``node_facts`` when the node changes), into frozen values; ``misfit`` decides from those
alone. The rules are upstream's:

- k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go
  (``GetRequiredNodeAffinity``, ``RequiredNodeAffinity.Match``, ``nodeSelectorTerms.Match``,
  ``newNodeSelectorTerm``, ``nodeSelectorRequirementsAsFieldSelector``): the nodeSelector's
  every key must equal the node's label; the required terms are ORed, a term's requirements
  ANDed; a term with no requirement, or one that does not parse, matches nothing; a required
  affinity with no term that matches, nothing at all. ``matchFields`` has one key,
  ``metadata.name``, with ``In`` or ``NotIn`` and exactly one value;
- k8s.io/apimachinery/pkg/labels/selector.go (``Requirement.Matches``): ``In`` needs the label
  with one of the values, ``NotIn`` passes a node without the label, ``Gt`` / ``Lt`` compare
  the label read as a base-10 int64 (a label that does not read so fails);
- kubernetes/kubernetes pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go
  (``Filter``: ``FindMatchingUntoleratedTaint`` over the ``NoSchedule`` and ``NoExecute``
  taints, ``helper.DoNotScheduleTaintsFilterFunc``; ``PreferNoSchedule`` is only a score) and
  k8s.io/api/core/v1/toleration.go (``ToleratesTaint``: an empty effect matches every effect,
  an empty key with ``Exists`` every taint, an empty operator is ``Equal``; any other
  operator tolerates nothing, as with the comparison-operator feature gate off);
- pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go: a node with
  ``spec.unschedulable`` takes only a pod tolerating
  ``node.kubernetes.io/unschedulable:NoSchedule``.

The API server validates a pod's constraints when it is made; what would not parse here
(an operator upstream does not know, ``Gt`` with a value not a number) makes its term match
nothing, as upstream's lazy-error selector drops it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from contract.objects import Obj

IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT = "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"
EQUAL = "Equal"
NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "NoExecute"
DO_NOT_SCHEDULE = frozenset({NO_SCHEDULE, NO_EXECUTE})
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NAME_FIELD = "metadata.name"
# Go's strconv.ParseInt(s, 10, 64): an optional sign and decimal digits, nothing else.
_INT = re.compile(r"[+-]?[0-9]+")
# What labels.NewRequirement accepts of a key and of each value (k8s.io/apimachinery
# pkg/util/validation/validation.go: IsQualifiedName, IsValidLabelValue).
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"(?:(?P<prefix>{_SUBDOMAIN})/)?(?P<name>{_NAME})")
_VALUE = re.compile(rf"(?:{_NAME})?")
_INT64 = range(-(2**63), 2**63)
# upstream's reasons (nodeaffinity.ErrReasonPod, tainttoleration's Filter,
# nodeunschedulable.ErrReasonUnschedulable), with the constraint named
AFFINITY_REASON = "node(s) didn't match Pod's node affinity/selector"


def _int64(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it; None when it does not."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if value in _INT64 else None


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` entry (labels.Requirement), parsed."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()
    number: int = 0  # Gt / Lt: the value, read as an int64

    def matches(self, labels: Mapping[str, str]) -> bool:
        """labels/selector.go ``Requirement.Matches``."""
        op = self.operator
        value = labels.get(self.key)
        if op == IN:
            return value is not None and value in self.values
        if op == NOT_IN:
            return value is None or value not in self.values
        if op == EXISTS:
            return value is not None
        if op == DOES_NOT_EXIST:
            return value is None
        if value is None:
            return False
        read = _int64(value)
        if read is None:
            return False
        return read > self.number if op == GT else read < self.number


@dataclass(frozen=True, slots=True)
class Term:
    """One ``nodeSelectorTerms`` entry: its label requirements and its ``metadata.name``
    fields ((In?, name) each), all of which a node must meet."""

    labels: tuple[Requirement, ...] = ()
    names: tuple[tuple[bool, str], ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.labels) and all(
            (name == value) == wanted for wanted, value in self.names
        )


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = EQUAL
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """k8s.io/api/core/v1/toleration.go ``ToleratesTaint``."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == EQUAL:
            return self.value == taint.value
        return self.operator == EXISTS


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def describe(self) -> str:
        """As tainttoleration's Filter names it: ``{key: value}``."""
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True)
class PodConstraints:
    """What a pod asks of its node: its nodeSelector, its required node affinity's terms
    (None: it states none) and its tolerations. Hashable: equal constraints share a
    decision."""

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] | None = None
    tolerations: tuple[Toleration, ...] = ()

    @property
    def selects(self) -> bool:
        """Whether it says anything about a node's labels or name."""
        return bool(self.selector) or self.terms is not None

    def selected(self, name: str, labels: Mapping[str, str]) -> str:
        """Why the node's labels (or name) do not suit the pod; "" when they do."""
        for key, value in self.selector:
            if labels.get(key) != value:
                return f"{AFFINITY_REASON} (nodeSelector {key}={value})"
        terms = self.terms
        if terms is not None and not any(t.matches(name, labels) for t in terms):
            return f"{AFFINITY_REASON} (required node affinity)"
        return ""

    def untolerated(self, taints: tuple[Taint, ...]) -> Taint | None:
        """The first taint the pod does not tolerate (v1helper.FindMatchingUntoleratedTaint)."""
        for taint in taints:
            if not any(t.tolerates(taint) for t in self.tolerations):
                return taint
        return None


EVERYWHERE = PodConstraints()
NO_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What of a node the pods' constraints read: its name, every label, and its taints
    that keep pods off (``NoSchedule`` and ``NoExecute``; ``spec.unschedulable`` as the
    taint NodeUnschedulable checks)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: NO_LABELS)
    taints: tuple[Taint, ...] = ()


def misfit(pod: PodConstraints, node: NodeFacts) -> str:
    """Why kube-scheduler's NodeAffinity, NodeUnschedulable or TaintToleration plugin would
    keep the pod off the node; "" when none would."""
    if pod.selects and (why := pod.selected(node.name, node.labels)):
        return why
    if node.taints and (taint := pod.untolerated(node.taints)) is not None:
        return f"node(s) had untolerated taint {taint.describe()}"
    return ""


# ---- parsing, once, where the objects enter ----------------------------------------------


def _strings(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _valid_key(key: str) -> bool:
    found = _KEY.fullmatch(key)
    if found is None or len(found["name"]) > 63:
        return False
    return found["prefix"] is None or len(found["prefix"]) <= 253


def _valid_value(value: str) -> bool:
    return len(value) <= 63 and _VALUE.fullmatch(value) is not None


def _requirement(expression: Any) -> Requirement | None:
    """A ``matchExpressions`` entry, None when it does not parse (labels.NewRequirement:
    the key a qualified name, every value a label value, as many values as the operator
    takes)."""
    if not isinstance(expression, dict):
        return None
    key, op = expression.get("key"), expression.get("operator")
    values = expression.get("values") or []
    if not isinstance(key, str) or not isinstance(values, list) or not _valid_key(key):
        return None
    if not all(isinstance(v, str) and _valid_value(v) for v in values):
        return None
    if op in (IN, NOT_IN):
        return Requirement(key, op, frozenset(values)) if values else None
    if op in (EXISTS, DOES_NOT_EXIST):
        return None if values else Requirement(key, op)
    if op in (GT, LT) and len(values) == 1:
        number = _int64(values[0])
        return None if number is None else Requirement(key, op, number=number)
    return None


def _name_field(expression: Any) -> tuple[bool, str] | None:
    """A ``matchFields`` entry (nodeSelectorRequirementsAsFieldSelector): ``metadata.name``,
    In or NotIn, one value; None when it does not parse."""
    if not isinstance(expression, dict) or expression.get("key") != NAME_FIELD:
        return None
    values = expression.get("values")
    if not isinstance(values, list) or len(values) != 1 or not isinstance(values[0], str):
        return None
    op = expression.get("operator")
    return (op == IN, values[0]) if op in (IN, NOT_IN) else None


def _term(term: Any) -> Term | None:
    """A node selector term; None when it is empty or a part does not parse (it matches
    nothing: ``newNodeSelectorTerms`` leaves it out)."""
    if not isinstance(term, dict):
        return None
    expressions = _list(term.get("matchExpressions"))
    fields = _list(term.get("matchFields"))
    labels = [_requirement(e) for e in expressions]
    names = [_name_field(f) for f in fields]
    if not (labels or names):
        return None
    if any(r is None for r in labels) or any(n is None for n in names):
        return None
    return Term(tuple(r for r in labels if r is not None), tuple(n for n in names if n is not None))


def _toleration(value: Any) -> Toleration | None:
    if not isinstance(value, dict):
        return None
    read = {k: value.get(k) or "" for k in ("key", "operator", "value", "effect")}
    if not all(isinstance(v, str) for v in read.values()):
        return None
    return Toleration(read["key"], read["operator"] or EQUAL, read["value"], read["effect"])


def pod_constraints(pod: Obj) -> PodConstraints:
    """The pod's constraints on its node, from its spec (EVERYWHERE when it has none)."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return EVERYWHERE
    selector = tuple(sorted(_strings(spec.get("nodeSelector")).items()))
    terms: tuple[Term, ...] | None = None
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = (
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(node_affinity, dict)
        else None
    )
    if isinstance(required, dict):
        parsed = (_term(t) for t in _list(required.get("nodeSelectorTerms")))
        terms = tuple(t for t in parsed if t is not None)
    tolerations = tuple(
        t for t in (_toleration(v) for v in _list(spec.get("tolerations"))) if t is not None
    )
    if not selector and terms is None and not tolerations:
        return EVERYWHERE
    return PodConstraints(selector, terms, tolerations)


def node_facts(node: Obj) -> NodeFacts:
    """The node's name, labels and the taints that keep pods off it."""
    meta = node.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    spec = node.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    taints = []
    for value in _list(spec.get("taints")):
        if not isinstance(value, dict) or value.get("effect") not in DO_NOT_SCHEDULE:
            continue
        key, text = value.get("key") or "", value.get("value") or ""
        if isinstance(key, str) and isinstance(text, str):
            taints.append(Taint(key, text, str(value["effect"])))
    if spec.get("unschedulable") is True:
        taints.append(Taint(UNSCHEDULABLE_TAINT, "", NO_SCHEDULE))
    labels = _strings(meta.get("labels"))
    return NodeFacts(
        str(meta.get("name") or ""),
        MappingProxyType(labels) if labels else NO_LABELS,
        tuple(taints),
    )
