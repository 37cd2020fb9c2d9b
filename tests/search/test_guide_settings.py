"""docs/guide.md's table of search settings agrees with their declaration
(`nas.search.strategy.settings.SearchSettings`): every name it lists is a field, its default
is the declared one and the value in parentheses the digits search's."""

import ast
import dataclasses
import os
import re
import runpy

import pytest

from nas.mutation.config import MutationConfig
from nas.search.strategy.fidelity import FidelityConfig
from nas.search.strategy.selection import SelectionConfig
from nas.search.strategy.settings import SearchSettings, search_defaults
from nas.train.fit_config import FitConfig
from tests.search.conftest import ROOT, SEARCH_CONFIG

GUIDE = os.path.join(ROOT, "docs", "guide.md")
HEADER = "| setting (under `search.`) |"
# sections whose defaults live in their typed record, not in `search_defaults()`
RECORDS = {"mutation": MutationConfig, "fidelity": FidelityConfig, "fit": FitConfig,
           "selection": SelectionConfig}
# declared fields the table leaves to other sections of the guide, or to the module docs
NOT_IN_GUIDE = {"log_every_steps", "num_cpus_per_candidate", "num_gpus_per_candidate",
                "max_attempts", "max_proposal_failures"}


def table_rows() -> list[tuple[list[str], str]]:
    """(names, defaults cell) of each row of the guide's search settings table."""
    lines = open(GUIDE, encoding="utf-8").read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1]))
    return rows


def split_top(cell: str) -> list[str]:
    """`cell` split at the commas outside brackets and backticks."""
    parts, depth, quoted, part = [], 0, False, ""
    for ch in cell:
        quoted ^= ch == "`"
        if not quoted:
            depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and not depth and not quoted:
            parts.append(part.strip())
            part = ""
        else:
            part += ch
    return [*parts, part.strip()] if part.strip() else parts


def value(text: str) -> object:
    """A value as the table writes it: `local`, 0.02, True, `{}`, `("flops", "params")`."""
    text = text.strip().strip("`")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def same(a: object, b: object) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, int | float) and isinstance(b, int | float) and \
            not isinstance(a, bool) and not isinstance(b, bool):
        return float(a) == float(b)
    return a == b


def declared(search: dict, path: str) -> object:
    """Field `path` of a search section (a dict), its record's default where a section
    leaves it out."""
    top, *rest = path.split(".")
    node = search[top]
    if not rest:
        return node
    if rest[0] in node:
        return node[rest[0]]
    return getattr(RECORDS[top](), rest[0])


def plain(config) -> dict:
    return config.to_dict() if hasattr(config, "to_dict") else dict(config)


ROWS = table_rows()


def test_every_name_in_the_table_is_a_declared_field():
    fields = {f.name for f in dataclasses.fields(SearchSettings)}
    named = {name.split(".")[0] for names, _ in ROWS for name in names if
             re.fullmatch(r"[a-z_][a-z_.]*", name)}
    assert named - fields == set()
    assert fields - named == NOT_IN_GUIDE


@pytest.mark.parametrize("names, cell", [r for r in ROWS if r[1]],
                         ids=[", ".join(r[0]) for r in ROWS if r[1]])
def test_the_tables_defaults_are_the_declared_ones(names, cell):
    parts = split_top(cell)
    assert len(parts) == len(names), (names, cell)
    defaults = plain(search_defaults())
    digits = plain(runpy.run_path(SEARCH_CONFIG)["get_config"]().search)
    for name, part in zip(names, parts, strict=True):
        if part == "...":  # a section the row links to
            continue
        match = re.fullmatch(r"(`[^`]*`|[^(]*?)\s*(?:\((.*)\))?", part)
        assert match, (name, part)
        default, preset = match.groups()
        assert same(value(default), declared(defaults, name)), (name, default)
        if preset is not None:
            assert same(value(preset), declared(digits, name)), (name, preset)
