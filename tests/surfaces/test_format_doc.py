"""The code's citations of the record-log format name docs/format-1.md and a section it has.

Docstrings and comments cite the format as `docs/format-1.md 4.8` (several sections as `4.1, 4.2`,
a run as `4.5-4.7`, a whole part as `1`), on one line: each names numbered headings of that page, so a
reader who follows one lands on the rule it means, and renumbering the page breaks this test.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.docs_kit import ROOT

PAGE = ROOT / "docs" / "format-1.md"
SOURCES = ("core", "store", "activities", "workflows", "threadline", "worker.py", "bench", "tests", "pyproject.toml")
SUFFIXES = (".py", ".toml", ".sql")
_NUMBER = r"\d+(?:\.\d+)?"
_MENTION = re.compile(r"(\S*)format-1\.md")
_CITATION = re.compile(rf"docs/format-1\.md(?: ({_NUMBER}(?:(?:, |-){_NUMBER})*))?")
_HEADING = re.compile(rf"#+ ({_NUMBER})\.? ")


def sections(page: Path) -> set[str]:
    """The numbers of the page's numbered headings (`## 4. The rules` is 4, `### 4.8 ...` is 4.8)."""
    found = (_HEADING.match(line) for line in page.read_text(encoding="utf-8").splitlines())
    return {match[1] for match in found if match}


def cited(refs: str) -> list[str]:
    """Every section `4.1, 4.5-4.7` names: 4.1, 4.5, 4.6 and 4.7."""
    out: list[str] = []
    for part in refs.split(", "):
        first, _, last = part.partition("-")
        if not last:
            out.append(first)
            continue
        (major, low), (other, high) = first.split("."), last.split(".")
        out += [f"{major}.{n}" for n in range(int(low), int(high) + 1)] if major == other else [first, last]
    return out


def broken_citations(text: str, known: set[str]) -> list[str]:
    """The citations of `text` that name another page, no section or one `known` lacks, each as written."""
    broken = [m[0] for m in _MENTION.finditer(text) if not m[1].endswith("docs/")]
    for match in _CITATION.finditer(text):
        if not match[1] or any(ref not in known for ref in cited(match[1])):
            broken.append(match[0])
    return broken


def source_files() -> list[Path]:
    """The code, tests and settings that may cite the format (this file's examples aside)."""
    files: list[Path] = []
    for name in SOURCES:
        path = ROOT / name
        files += [path] if path.is_file() else [p for p in sorted(path.rglob("*")) if p.suffix in SUFFIXES]
    return [path for path in files if path.resolve() != Path(__file__).resolve()]


def test_the_checker_finds_a_wrong_section_and_another_page() -> None:
    """A section the page lacks (at either end of a run too), no section, and a page elsewhere are found."""
    known = {"1", "1.3", "4.5", "4.6", "4.7"}

    assert [] == broken_citations("(docs/format-1.md 1.3, 4.5-4.7) and docs/format-1.md 1", known)
    assert ["docs/format-1.md 4.5-4.8"] == broken_citations("(docs/format-1.md 4.5-4.8)", known)
    assert ["docs/format-1.md 9.9"] == broken_citations("(docs/format-1.md 9.9)", known)
    assert ["(format-1.md"] == broken_citations("(format-1.md 1.3)", known)
    assert ["docs/format-1.md"] == broken_citations("as docs/format-1.md says", known)


def test_every_citation_of_the_format_names_a_section_of_docs_format_1() -> None:
    """Each `format-1.md` citation in the code names docs/format-1.md and headings it has."""
    known = sections(PAGE)
    citations = 0
    broken = []
    for path in source_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            citations += line.count("format-1.md")
            broken += [f"{path.relative_to(ROOT)}:{number}: {c}" for c in broken_citations(line, known)]

    assert [] == broken
    assert citations >= 30, "the code cites the format throughout: this test must find those citations"
