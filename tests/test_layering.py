"""The house rules (docs/architecture.md), checked on the source: the layers (no arrow
up), no import cycle between modules, and no private name taken from another module.

Every module is parsed with `ast` and every import statement in it counts, wherever it
stands: at the top, inside a function (the lazy ones) or under `if TYPE_CHECKING`.
Each rule has a test that feeds it a small bad example, so that none passes by seeing
nothing.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Mapping

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The packages of `nas`, lowest first: each may import the ones of a lower rank, never one
# of its own rank or above, and nothing inside `nas` imports `nas` itself (the top).
PACKAGE_LAYERS = (
    ("nas.atomic", "nas.cli_messages", "nas.functions", "nas.schema", "nas.stats"),  # leaves
    ("nas.graph",),
    ("nas.zoo", "nas.properties"),
    ("nas.synthesis",),
    ("nas.mutation",),
    ("nas.io",),
    ("nas.train",),
    ("nas.interop",),
    ("nas.search",),
)
BELOW_SEARCH = tuple(unit for layer in PACKAGE_LAYERS[:-1] for unit in layer)
# The search's subpackages, lowest first: each may import those before it, never one
# after, nor the modules at the search's top (`api`, `cli`, ...), which stand on them all.
SEARCH_LAYERS = ("strategy", "store", "execution", "reporting")

# Allowances while a split is under way (none now): each entry goes when its split lands.
CYCLES_BEING_SPLIT: set[frozenset[str]] = set()
# Private names one module may take from another (at most 3), each with why.
PRIVATE_NAMES_TAKEN = {
    # The interpreter's stochastic depth: its source is copied into the exported Flax code,
    # which calls it by this name (`flax_ops.STOCH_DEPTH`); a public name there would be
    # one the user's code could shadow.
    ("nas.interop.flax_code", "nas.graph.model._stochastic_depth"),
}


def modules(package: str = "nas") -> dict[str, str]:
    """{dotted module name: file path} of every module of `package` (a package's own
    `__init__` under the package's name)."""
    folder = os.path.join(ROOT, *package.split("."))
    if os.path.isfile(folder + ".py"):
        return {package: folder + ".py"}
    out = {}
    for dirpath, _, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, name), ROOT)[:-3]
                out[rel.replace(os.sep, ".").removesuffix(".__init__")] = os.path.join(dirpath,
                                                                                       name)
    return dict(sorted(out.items()))


def _parse(path: str) -> ast.Module:
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)


def _base(module: str, path: str, node: ast.ImportFrom) -> str:
    """The module a `from ... import` names, relative imports resolved against `module`."""
    base = node.module or ""
    if node.level:
        parts = module.split(".")
        keep = len(parts) - node.level + (1 if path.endswith("__init__.py") else 0)
        base = ".".join(parts[:keep] + ([base] if base else []))
    return base


def import_statements(module: str, path: str) -> list[tuple[str | None, list[str]]]:
    """(base, names) of every import statement anywhere in the file: `import a.b` is
    (None, ["a.b"]), `from a import b, c` is ("a", ["b", "c"]) with a relative base
    resolved against `module`."""
    out: list[tuple[str | None, list[str]]] = []
    for node in ast.walk(_parse(path)):
        if isinstance(node, ast.Import):
            out.append((None, [alias.name for alias in node.names]))
        elif isinstance(node, ast.ImportFrom):
            out.append((_base(module, path, node), [alias.name for alias in node.names]))
    return out


def imported(module: str, path: str) -> set[str]:
    """Every module name an import statement anywhere in the file names (relative imports
    resolved against `module`; `from a import b` counts as both `a` and `a.b`)."""
    found = set()
    for base, names in import_statements(module, path):
        found.update(names if base is None else [base, *(f"{base}.{n}" for n in names)])
    return found


def imported_modules(module: str, path: str, known: Iterable[str]) -> set[str]:
    """The modules of `known` that `module` imports: `from a import b` is the module `a.b`
    when there is one, else `a` (a name defined in `a`); `import a.b` is `a.b`."""
    known = set(known)
    found = set()
    for base, names in import_statements(module, path):
        found.update(names if base is None else
                     (f"{base}.{n}" if f"{base}.{n}" in known else base for n in names))
    return {name for name in found if name in known and name != module}


def import_graph(found: Mapping[str, str]) -> dict[str, set[str]]:
    return {module: imported_modules(module, path, found) for module, path in found.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`: its strongly connected parts of two or more modules
    (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    part.append(member)
                    if member == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return sorted(found)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _unit(module: str) -> tuple[int, str] | None:
    """(rank, unit) of the package layer `module` belongs to; None for `nas` itself."""
    for rank, layer in enumerate(PACKAGE_LAYERS):
        for unit in layer:
            if _within(module, unit):
                return rank, unit
    return None


def arrows_up(graph: Mapping[str, set[str]]) -> list[str]:
    """Imports that go up or sideways between the package layers, into the search's higher
    subpackages or its top, or into a package that contains the importer (its `__init__`,
    which stands on everything below it)."""
    out = []
    for module, targets in sorted(graph.items()):
        mine = _unit(module)
        for name in sorted(targets):
            if _within(module, name):
                out.append(f"{module} imports {name}, a package it is in")
                continue
            theirs = _unit(name)
            if mine is None:  # `nas` itself: it may import anything below it
                continue
            if theirs is None:
                out.append(f"{module} imports {name}, the top of the house")
            elif theirs[1] != mine[1] and theirs[0] >= mine[0]:
                out.append(f"{module} imports {name}, a layer not below its own")
            elif _within(name, "nas.search") and _search_arrow_up(module, name):
                out.append(f"{module} imports {name}, a higher part of the search")
    return out


def _search_arrow_up(module: str, name: str) -> bool:
    parts = module.split(".")
    if len(parts) < 4 or parts[2] not in SEARCH_LAYERS:
        return False  # the search's top (`nas.search.api`, `cli`, ...) may import any layer
    rank = SEARCH_LAYERS.index(parts[2])
    target = name.split(".")
    if len(target) < 3:
        return False  # `nas.search` itself: the package rule above sees it
    if target[2] in SEARCH_LAYERS:
        return SEARCH_LAYERS.index(target[2]) > rank
    return True  # a module at the search's top


def private_names_taken(found: Mapping[str, str]) -> set[tuple[str, str]]:
    """(importer, dotted private name) for every `_name` (not a dunder) a module takes
    from another module: `from m import _x`, `m._x` after `import m` or `from p import m`,
    and a private module (`p._m`) imported from outside its package."""
    taken = set()
    for module, path in found.items():
        tree = _parse(path)
        aliases: dict[str, str] = {}  # local name -> the nas module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    taken |= _private_module(module, a.name) if a.name in found else set()
                    if a.name in found or a.name.split(".")[0] == "nas":
                        aliases[a.asname or a.name.split(".")[0]] = (a.name if a.asname
                                                                      else a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom):
                base = _base(module, path, node)
                taken |= _private_module(module, base) if base in found else set()
                for a in node.names:
                    full = f"{base}.{a.name}"
                    if full in found:
                        aliases[a.asname or a.name] = full
                        taken |= _private_module(module, full)
                    elif base in found and _private(a.name):
                        taken.add((module, full))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                owner = _dotted(node.value, aliases)
                if owner in found and owner != module:
                    taken.add((module, f"{owner}.{node.attr}"))
    return taken


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_module(importer: str, module: str) -> set[tuple[str, str]]:
    """{(importer, module)} when a part of `module`'s path is private (`p._m`, `p._q.m`)
    and `importer` is outside the package that holds that part."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _private(part) and not _within(importer, ".".join(parts[:i])):
            return {(importer, module)}
    return set()


def _dotted(node: ast.expr, aliases: Mapping[str, str]) -> str | None:
    """The module an expression like `a.b.c` names, through the file's import aliases."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


@pytest.fixture(scope="module")
def house() -> tuple[dict[str, str], dict[str, set[str]]]:
    found = modules()
    return found, import_graph(found)


# ------------------------------------------------------------------------ the house


@pytest.mark.parametrize("package", BELOW_SEARCH)
def test_nothing_below_the_search_imports_it(package):
    found = modules(package)
    assert found, package
    offenders = [
        f"{module} imports {name}"
        for module, path in found.items()
        for name in sorted(imported(module, path))
        if _within(name, "nas.search")
    ]
    assert not offenders, offenders


def test_the_graph_package_imports_no_other_nas_package():
    offenders = [
        f"{module} imports {name}"
        for module, path in modules("nas.graph").items()
        for name in sorted(imported(module, path))
        if _within(name, "nas") and not _within(name, "nas.graph")
    ]
    assert not offenders, offenders


def test_every_package_has_a_layer(house):
    found, _ = house
    tops = {".".join(m.split(".")[:2]) for m in found if m != "nas"}
    assert tops == set(BELOW_SEARCH) | {"nas.search"}, tops ^ (set(BELOW_SEARCH) | {"nas.search"})


def test_no_arrow_up(house):
    _, graph = house
    assert not arrows_up(graph), arrows_up(graph)


def test_no_import_cycle_between_modules(house):
    _, graph = house
    found = [part for part in cycles(graph) if frozenset(part) not in CYCLES_BEING_SPLIT]
    assert not found, found


def test_no_private_name_taken_from_another_module(house):
    found, _ = house
    taken = private_names_taken(found)
    assert len(PRIVATE_NAMES_TAKEN) <= 3
    assert taken - PRIVATE_NAMES_TAKEN == set(), sorted(taken - PRIVATE_NAMES_TAKEN)


def test_the_allowances_are_still_needed(house):
    """An allowance that nothing uses any more goes from the lists above."""
    found, graph = house
    now = {frozenset(part) for part in cycles(graph)}
    assert CYCLES_BEING_SPLIT <= now, CYCLES_BEING_SPLIT - now
    assert PRIVATE_NAMES_TAKEN <= private_names_taken(found)


# ------------------------------------------------------- the checker on bad examples


def _package(tmp_path, files: Mapping[str, str]) -> dict[str, str]:
    """Writes `files` ({dotted module: source}) under tmp_path; returns {module: path}."""
    out = {}
    for module, source in files.items():
        parts = module.split(".")
        is_package = any(other.startswith(module + ".") for other in files)
        path = tmp_path.joinpath(*parts, "__init__.py") if is_package else tmp_path.joinpath(
            *parts[:-1], parts[-1] + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        out[module] = str(path)
    return out


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text(
        "def f():\n    from nas.search.store.study import Study\n    from ..search import cli\n"
    )
    names = imported("nas.train.mod", str(path))
    assert {"nas.search.store.study", "nas.search", "nas.search.cli"} <= names


def test_the_checker_finds_a_cycle_hidden_by_a_lazy_import(tmp_path):
    files = {
        "nas.a": "",
        "nas.a.one": "from nas.a import two\n",
        "nas.a.two": "def f():\n    from nas.a.one import g\n",
        "nas.a.three": "import nas.a.one\n",
    }
    found = _package(tmp_path / "cycle", files)
    assert cycles(import_graph(found)) == [["nas.a.one", "nas.a.two"]]
    files["nas.a.two"] = "def f():\n    import nas.a.three\n"  # one -> two -> three -> one
    found = _package(tmp_path / "longer", files)
    assert cycles(import_graph(found)) == [["nas.a.one", "nas.a.three", "nas.a.two"]]
    files["nas.a.three"] = ""
    assert cycles(import_graph(_package(tmp_path / "none", files))) == []


def test_the_checker_finds_arrows_up():
    graph = {
        "nas": {"nas.search.api"},
        "nas.search.strategy.x": {"nas"},  # the top
        "nas.search.strategy.y": {"nas.search.store.study"},  # a higher subpackage
        "nas.search.store.z": {"nas.search.presets"},  # the search's top
        "nas.search.store.w": {"nas.search"},  # its own package's __init__
        "nas.io.candidate": {"nas.train.checkpoint"},  # a higher package
        "nas.zoo.cnn": {"nas.properties.shape"},  # a package of the same rank
        "nas.search.execution.ok": {"nas.search.store.study", "nas.train.train"},
        "nas.search": {"nas.search.store.study"},
        "nas.search.api": {"nas.search.reporting.report"},
    }
    found = arrows_up(graph)
    assert len(found) == 6, found
    assert not [line for line in found if "ok" in line or "api" in line.split()[0]]


def test_the_checker_finds_private_names_taken(tmp_path):
    found = _package(tmp_path, {
        "nas.p": "",
        "nas.p.low": "_x = 1\ndef _f(): pass\n",
        "nas.p._hidden": "",
        "nas.p.mine": "from nas.p import _hidden\n",
        "nas.q": "",
        "nas.q.one": "from nas.p.low import _x\n",
        "nas.q.two": "def f():\n    from nas.p import low\n    return low._f()\n",
        "nas.q.three": "import nas.p.low\nnas.p.low._f()\n",
        "nas.q.four": "from nas.p import _hidden\n",
        "nas.q.five": "from nas.p.low import __name__ as n\n",
        "nas.q.six": "from nas.p._hidden import thing\nimport nas.p._hidden\n",
    })
    assert private_names_taken(found) == {
        ("nas.q.one", "nas.p.low._x"),
        ("nas.q.two", "nas.p.low._f"),
        ("nas.q.three", "nas.p.low._f"),
        ("nas.q.four", "nas.p._hidden"),
        ("nas.q.six", "nas.p._hidden"),
    }
