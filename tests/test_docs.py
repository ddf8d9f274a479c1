"""Every citation of the project's documents resolves inside the repository.

Code and tests cite background as `docs/NAME.md` or `docs/NAME.md §N` / `§N.M` (several sections may follow, as in
`§2.2/§2.3`). Each cited page must exist in docs/ and each cited section must be a numbered heading of that page.
Nothing may point at a document that is not shipped: the read-only material beside the repository, or the names
the code once cited it by.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SCANNED = ("ndcp", "scripts", "tests", "examples", "README.md")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg"}
SKIPPED_DIRS = {"__pycache__", ".venv", ".hypothesis", ".pytest_cache"}
THIS_FILE = Path(__file__).resolve()

CITATION = re.compile(r"(?<![\w./-])docs/([A-Za-z0-9_-]+)\.md")  # not another repository's (Repo/docs/x.md)
FIRST_SECTION = re.compile(r"\s*§\s*(\d+(?:\.\d+)*)")
MORE_SECTIONS = re.compile(r"\s*(?:/|,|;|&|–|-|and|or|to)\s*§\s*(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?(?:\s|$)", re.MULTILINE)
# Documents outside the repository, or the names the code once cited them by (built from parts so that this file
# does not name them itself).
FORBIDDEN = {
    "a path into ../shared": re.compile(r"\.\./" + "shared"),
    "the shared reference folder": re.compile("shared/" + r"(?:reference|design)"),
    "formulas.md without docs/": re.compile(r"(?<!docs/)\bformulas" + r"\.md"),
    "sapp.md": re.compile(r"\bsapp" + r"\.md"),
    "design-notes": re.compile("design" + "-notes"),
    "calibration.yaml": re.compile(r"\bcalibration" + r"\.yaml"),
}


def scanned_files() -> list[Path]:
    files = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in sorted(path.rglob("*")) if p.is_file() and p.suffix in SUFFIXES
                      and not SKIPPED_DIRS.intersection(p.relative_to(ROOT).parts)]
    return files


@lru_cache(maxsize=None)
def headings(page: str) -> frozenset[str]:
    """Section numbers of a docs page's numbered headings ("## 5. Activation memory" -> "5", "### 2.2 ..." -> "2.2")."""
    return frozenset(HEADING.findall((DOCS / f"{page}.md").read_text(encoding="utf-8")))


def citations(text: str) -> list[tuple[str, tuple[str, ...], int]]:
    """(page, cited sections, line) of every `docs/NAME.md [§N[.M] ...]` in a text."""
    out = []
    for match in CITATION.finditer(text):
        sections, end = [], match.end()
        first = FIRST_SECTION.match(text, end)
        if first:
            sections.append(first.group(1))
            end = first.end()
            while more := MORE_SECTIONS.match(text, end):
                sections.append(more.group(1))
                end = more.end()
        out.append((match.group(1), tuple(sections), text.count("\n", 0, match.start()) + 1))
    return out


def citation_problems(text: str, where: str = "text") -> list[str]:
    """Citations in `text` whose page or section does not exist."""
    problems = []
    for page, sections, line in citations(text):
        if not (DOCS / f"{page}.md").is_file():
            problems.append(f"{where}:{line}: docs/{page}.md does not exist")
            continue
        problems += [f"{where}:{line}: docs/{page}.md has no section {s}" for s in sections if s not in headings(page)]
    return problems


def forbidden_problems(text: str, where: str = "text") -> list[str]:
    """References to documents that are not in the repository."""
    return [f"{where}:{text.count(chr(10), 0, m.start()) + 1}: {label}: {m.group(0)!r}"
            for label, pattern in FORBIDDEN.items() for m in pattern.finditer(text)]


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def test_docs_pages_exist():
    for page in ("README", "formulas", "solver", "reference-planner", "calibration"):
        assert (DOCS / f"{page}.md").is_file(), page
    assert {"1", "2", "2.2", "2.3", "5", "6", "7"} <= headings("formulas")
    assert {"2.2", "2.3", "3.4"} <= headings("reference-planner")
    assert {"3.2", "3.3", "9"} <= headings("solver")


def test_every_citation_resolves():
    problems, count = [], 0
    for path in scanned_files():
        if path.resolve() == THIS_FILE:  # its own examples are broken on purpose
            continue
        text = _read(path)
        count += len(citations(text))
        problems += citation_problems(text, str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)
    assert count > 0  # the scan finds the citations the code makes


def test_nothing_points_outside_the_repository():
    problems = []
    for path in scanned_files():
        if path.resolve() != THIS_FILE:
            problems += forbidden_problems(_read(path), str(path.relative_to(ROOT)))
    assert not problems, "\n".join(problems)


def test_docs_link_to_existing_files():
    """Relative links between the docs pages (and to the README) resolve, and the docs cite nothing outside."""
    problems = []
    for page in sorted(DOCS.glob("*.md")):
        text = _read(page)
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if not target.startswith(("http://", "https://")) and not (page.parent / target).exists():
                problems.append(f"{page.name}: link to {target} does not resolve")
        problems += [p for p in forbidden_problems(text, page.name) if "formulas.md without docs/" not in p]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("text,expected", [
    ("see docs/formulas.md §5", []),
    ("see docs/formulas.md §2.2/§2.3 and docs/solver.md §3.3", []),
    ("see docs/formulas.md §99", ["no section 99"]),
    ("see docs/formulas.md §2.2/§2.99", ["no section 2.99"]),
    ("see docs/no-such-page.md §1", ["does not exist"]),
    ("Megatron-LM docs/user-guide/features/dist_optimizer.md", []),  # another project's docs: not a citation
    ("NVIDIA-NeMo/Megatron-Bridge/docs/performance-summary.md", []),
])
def test_the_checker_catches_broken_citations(text, expected):
    problems = citation_problems(text)
    assert len(problems) == len(expected)
    assert all(e in p for e, p in zip(expected, problems))


@pytest.mark.parametrize("text,bad", [
    ("read ../" + "shared/reference/formulas.md", True),
    ("formulas" + ".md §5", True),
    ("docs/formulas.md §5", False),
    ("sapp" + ".md §2.2", True),
    ("design" + "-notes approach C", True),
    ("calibration" + ".yaml hardware", True),
    ("examples/published_runs.yaml hardware", False),
])
def test_the_checker_catches_outside_references(text, bad):
    assert bool(forbidden_problems(text)) is bad
