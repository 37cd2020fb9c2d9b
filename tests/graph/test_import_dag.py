"""The modules of `nas.graph` import each other as a DAG: no cycle, counting imports made
inside functions too (a deferred import hides a cycle from Python, not from readers)."""

import ast
from pathlib import Path

import nas.graph

PACKAGE = "nas.graph"


def module_sources(package_dir: Path, package: str) -> dict[str, str]:
    """Dotted module name -> source, for every module of the package (`__init__` is the
    package itself)."""
    sources = {}
    for path in sorted(package_dir.glob("*.py")):
        name = package if path.stem == "__init__" else f"{package}.{path.stem}"
        sources[name] = path.read_text()
    return sources


def imported_modules(module: str, source: str, known: set[str]) -> set[str]:
    """The modules among `known` that `module` imports anywhere in its source."""
    is_package = any(k.startswith(module + ".") for k in known)
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: `.` is this module's package, `..` its parent
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from pkg import name` imports the submodule `pkg.name` when there is one,
            # else a name defined by `pkg` itself.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        found.update(t for t in targets if t in known and t != module)
    return found


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    known = set(sources)
    return {m: imported_modules(m, s, known) for m, s in sources.items()}


def test_nas_graph_modules_form_a_dag():
    sources = module_sources(Path(nas.graph.__file__).parent, PACKAGE)
    assert {"nas.graph.ops", "nas.graph.validate", "nas.graph.symbolic"} <= set(sources)
    edges = import_graph(sources)
    assert "nas.graph.validate" in edges["nas.graph.ops"]  # the edge that used to close a loop
    assert find_cycle(edges) is None, f"import cycle: {' -> '.join(find_cycle(edges))}"


def test_a_cycle_through_a_function_level_import_is_found():
    sources = {
        "pkg": "from pkg import a\n",
        "pkg.a": "from pkg.b import f\n",
        "pkg.b": "def f():\n    from pkg import c\n    return c\n",
        "pkg.c": "import pkg.a\n",
        "pkg.d": "from . import a\n",
    }
    edges = import_graph(sources)
    assert edges["pkg.b"] == {"pkg.c"}
    assert edges["pkg.d"] == {"pkg.a"}
    assert find_cycle(edges) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
    sources["pkg.b"] = "def f():\n    return 1\n"
    assert find_cycle(import_graph(sources)) is None
