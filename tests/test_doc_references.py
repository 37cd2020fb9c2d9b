"""The repository stands on its own: every file of it that a page names (a benchmark to
run, a test, a config, another page) is there, and nothing cites a file outside it (the
workplace's shared folder, its design notes, a script left under /tmp), so a reader can
run every command the docs print. The checker has a test that feeds it a bad page, so
that it cannot pass by reading nothing."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A path inside the repository, as pages write it: `benchmarks/fresh_clone.sh`, tests/...
REPO_PATH = re.compile(r"(?<![\w./-])((?:benchmarks|tests|nas|configs|docs|examples)/"
                       r"[\w./-]+\.(?:py|sh|md|ipynb|json))")
# What only the workplace has: its shared folder, its design notes, scripts under /tmp
# (written here in pieces, so that this file does not cite them itself).
OUTSIDE = re.compile(r"\.\./" + "shared" + r"|\bDESIGN" + r"\.md\b"
                     r"|/tmp/[\w.-]+\.(?:sh|py)\b")
# The text the rule applies to: the pages, and the code and scripts beside them.
SOURCES = ("*.md", "docs/**/*.md", "nas/**/*.py", "tests/**/*.py", "benchmarks/*",
           "configs/*.py", ".ci/run")


def pages(root: Path) -> list[Path]:
    return sorted({*root.glob("*.md"), *root.glob("docs/**/*.md")})


def sources(root: Path) -> list[Path]:
    return sorted({p for pattern in SOURCES for p in root.glob(pattern) if p.is_file()})


def missing_paths(root: Path) -> list[str]:
    """`page:line: path` for each repository path a page names that is not there."""
    out = []
    for page in pages(root):
        for n, line in enumerate(page.read_text().splitlines(), 1):
            out += [f"{page.relative_to(root)}:{n}: {m}" for m in REPO_PATH.findall(line)
                    if not (root / m).exists()]
    return out


def outside_citations(root: Path) -> list[str]:
    """`file:line: text` for each citation of a file outside the repository."""
    out = []
    for path in sources(root):
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            out += [f"{path.relative_to(root)}:{n}: {m.group(0)}"
                    for m in OUTSIDE.finditer(line)]
    return out


def test_every_repository_path_a_page_names_is_there():
    assert pages(ROOT) and missing_paths(ROOT) == []


def test_nothing_cites_a_file_outside_the_repository():
    assert len(sources(ROOT)) > 100
    assert outside_citations(ROOT) == []


def test_the_checker_finds_a_missing_path_and_a_citation_outside(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "here.py").write_text("# see ../" + "shared/notes\n")
    (tmp_path / "README.md").write_text(
        "Run `benchmarks/here.py`, then `benchmarks/gone.sh`.\n"
        "Made by `bash /tmp/" + "probe.sh`.\n")
    assert missing_paths(tmp_path) == ["README.md:1: benchmarks/gone.sh"]
    assert outside_citations(tmp_path) == ["README.md:2: /tmp/" + "probe.sh",
                                           "benchmarks/here.py:1: ../" + "shared"]
