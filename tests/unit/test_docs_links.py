"""Every link of the README and of docs/*.md to a repository path resolves, every anchor into a
markdown file names one of its headings (GitHub's slugs), and every figure is shown somewhere."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FIGURES = ROOT / "docs" / "figures"

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)
INLINE_CODE = re.compile(r"`[^`]*`")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # https:, mailto:, ...
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code removed."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(INLINE_CODE.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading (github-slugger): the rendered text in lower case, every
    character but letters, digits, underscores, hyphens and spaces dropped, each space a
    hyphen."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: Counter[str] = Counter()
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            found.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    return found


def links(page: Path) -> list[str]:
    return [t for line in prose_lines(page.read_text()) for t in LINK.findall(line)]


def broken(page: Path, target: str) -> str | None:
    """Why ``target``, linked from ``page``, does not resolve; None when it does."""
    path, _, anchor = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    if not resolved.is_relative_to(ROOT):
        return f"{target}: outside the repository"
    if not resolved.exists():
        return f"{target}: no such file or directory"
    if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
        return f"{target}: no heading of {resolved.relative_to(ROOT)} has the anchor #{anchor}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_to_the_repository_resolves(page: Path) -> None:
    targets = [t for t in links(page) if not EXTERNAL.match(t)]
    problems = [why for t in targets if (why := broken(page, t))]
    assert not problems, "\n".join(problems)


def test_every_figure_is_shown_on_a_page() -> None:
    shown = {(p.parent / t.partition("#")[0]).resolve() for p in PAGES for t in links(p)}
    figures = sorted(f for f in FIGURES.iterdir() if f.is_file())
    assert figures
    assert [f.name for f in figures if f.resolve() not in shown] == []


def test_the_slugs_follow_githubs_rules() -> None:
    assert slug("Where we differ from upstream's code") == "where-we-differ-from-upstreams-code"
    assert slug("Trying a placement: `place`") == "trying-a-placement-place"
    assert slug("DRA: Dynamic Resource Allocation") == "dra-dynamic-resource-allocation"
    assert slug("Switch affinity 1.0") == "switch-affinity-10"
    assert slug("A – b") == "a--b"
