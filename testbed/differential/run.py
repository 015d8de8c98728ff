"""Cases through both sides, the verdicts, the summary table and the disagreements file."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.differential import vnpu
from testbed.differential.cases import Case, Obj, case_from_json
from testbed.differential.huawei import VolcanoCases
from testbed.differential.known import Known, known_difference
from testbed.differential.ours import AGREE, KINDS, Verdict, judge
from testbed.differential.outcome import Outcome, outcome_from_json


@dataclass(frozen=True)
class Result:
    case: Case
    # What the real Volcano did with the case: Huawei's plugin deciding in it, or our adapter
    # and service (``our_volcano``), judged against our engine alike.
    huawei: Outcome
    verdict: Verdict
    known: Known | None  # the known difference the disagreement is, if any

    def to_json(self) -> Obj:
        return {
            "case": self.case.to_json(),
            "kind": self.verdict.kind,
            "detail": self.verdict.detail,
            "known": self.known.name if self.known else None,
            "huawei": self.huawei.to_json(),
            "ours": self.verdict.ours.to_json(),
        }


def compare(case: Case, huawei: Outcome, *, known: bool = True) -> Result:
    """``known``: a disagreement may be a known difference between Huawei's plugin and our
    engine; without it (our own side through Volcano against our engine) none is."""
    verdict = (vnpu.judge if case.spec.vnpu_cores else judge)(case, huawei)
    difference = known_difference(case, verdict) if known and not verdict.agrees else None
    return Result(case, huawei, verdict, difference)


def run_cases(runner: VolcanoCases, cases: Sequence[Case], *, known: bool = True) -> list[Result]:
    """Every case through the runner's Volcano and through our engine, compared."""
    outcomes = runner.run(cases)
    return [compare(case, outcomes[case.name], known=known) for case in cases]


def summary(results: Sequence[Result]) -> str:
    """Per hardware group: cases, agreements, disagreements by kind; then the known
    differences met and the disagreements no known difference explains."""
    groups: dict[str, Counter[str]] = {}
    for result in results:
        group = (
            "Huawei's samples" if result.case.name.startswith("sample-") else result.case.hardware
        )
        row = groups.setdefault(group, Counter())
        row["cases"] += 1
        row[result.verdict.kind] += 1
    columns = ["cases", AGREE, *KINDS]
    width = max(len(g) for g in [*groups, "group", "all"]) + 2
    lines = ["".join(["group".ljust(width), *(c.rjust(10) for c in columns)])]
    total: Counter[str] = Counter()
    for group in sorted(groups):
        row = groups[group]
        total.update(row)
        lines.append("".join([group.ljust(width), *(str(row[c]).rjust(10) for c in columns)]))
    lines.append("".join(["all".ljust(width), *(str(total[c]).rjust(10) for c in columns)]))
    known = Counter(r.known.name for r in results if r.known is not None)
    unknown = [r for r in results if not r.verdict.agrees and r.known is None]
    agreed = total[AGREE]
    lines.append(
        f"\nagreement: {agreed}/{total['cases']} ({100 * agreed / max(total['cases'], 1):.1f} %)"
    )
    for name, count in sorted(known.items()):
        lines.append(f"known difference {name}: {count}")
    lines.append(f"disagreements no known difference explains: {len(unknown)}")
    return "\n".join(lines)


def write_record(results: Sequence[Result], path: Path) -> None:
    """Every case with Huawei's outcome, to compare again without Volcano (``rejudge``)."""
    record = [{"case": r.case.to_json(), "huawei": r.huawei.to_json()} for r in results]
    path.write_text(json.dumps(record, indent=1) + "\n")


def rejudge(path: Path) -> list[Result]:
    """The cases of a record (``write_record``) or a disagreements file, Huawei's recorded
    outcomes compared with our engine as it is now."""
    return [
        compare(case_from_json(entry["case"]), outcome_from_json(entry["huawei"]))
        for entry in json.loads(path.read_text())
    ]


def write_disagreements(results: Sequence[Result], path: Path) -> int:
    """The disagreements as JSON (a list, each with its case, both outcomes and the kind);
    how many."""
    found = [r.to_json() for r in results if not r.verdict.agrees]
    path.write_text(json.dumps(found, indent=1) + "\n")
    return len(found)
