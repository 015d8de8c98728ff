"""Label and field selectors as the API server evaluates them, for the harness stores.

Terms joined by commas, each ``key=value``, ``key==value`` or ``key!=value`` (a label term
may also be a bare ``key`` or ``!key``). Fields are the few the API server supports for the
kinds served here; any other is refused, as the API server refuses it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contract.objects import Obj
from infra.kube.port import KubeError

FIELDS: dict[str, Callable[[Obj], str]] = {
    "metadata.name": lambda o: str((o.get("metadata") or {}).get("name", "")),
    "metadata.namespace": lambda o: str((o.get("metadata") or {}).get("namespace", "")),
    "spec.nodeName": lambda o: str((o.get("spec") or {}).get("nodeName") or ""),
    "spec.driver": lambda o: str((o.get("spec") or {}).get("driver") or ""),  # ResourceSlices
    "status.phase": lambda o: str((o.get("status") or {}).get("phase") or ""),
}


class BadSelector(KubeError):
    """A selector the API server would answer 400 to."""


@dataclass(frozen=True, slots=True)
class Term:
    key: str
    value: str | None  # None: the key exists (or not, with ``equal`` False)
    equal: bool

    def holds(self, actual: str | None) -> bool:
        if self.value is None:
            return (actual is not None) == self.equal
        return (actual == self.value) == self.equal


def _terms(text: str, labels: bool) -> tuple[Term, ...]:
    found = []
    for raw in text.split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            found.append(Term(key.strip(), value.strip(), False))
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            found.append(Term(key.strip(), value.strip(), True))
        elif labels:
            bare = term.removeprefix("!")
            found.append(Term(bare, None, not term.startswith("!")))
        else:
            raise BadSelector(f"field selector term {term!r} has no operator")
        if not labels and found[-1].key not in FIELDS:
            raise BadSelector(f"field selector {found[-1].key!r} is not supported")
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Selector:
    labels: tuple[Term, ...]
    fields: tuple[Term, ...]

    @staticmethod
    def parse(labels: str, fields: str) -> Selector:
        return Selector(_terms(labels, True), _terms(fields, False))

    def matches(self, obj: Obj) -> bool:
        have = (obj.get("metadata") or {}).get("labels") or {}
        return all(t.holds(have.get(t.key)) for t in self.labels) and all(
            t.holds(FIELDS[t.key](obj)) for t in self.fields
        )


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a LabelSelector object selects ``labels`` (``matchLabels``, and
    ``matchExpressions`` with In, NotIn, Exists, DoesNotExist)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for term in selector.get("matchExpressions") or []:
        key, values = term.get("key", ""), term.get("values") or []
        matched = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }.get(term.get("operator", ""), False)
        if not matched:
            return False
    return True
