"""The layers of DESIGN.md, checked on the source: training and everything below it never
import the search, and the graph package imports no other `nas` package.

Every module is parsed with `ast`, so imports inside functions (the lazy ones) count too.
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BELOW_SEARCH = (
    "nas.graph",
    "nas.properties",
    "nas.synthesis",
    "nas.mutation",
    "nas.train",
    "nas.io",
    "nas.interop",
)


def modules(package: str) -> list[tuple[str, str]]:
    """(dotted module name, file path) of every module of `package`."""
    folder = os.path.join(ROOT, *package.split("."))
    out = []
    for dirpath, _, files in os.walk(folder):
        for name in sorted(files):
            if name.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, name), ROOT)[:-3]
                module = rel.replace(os.sep, ".").removesuffix(".__init__")
                out.append((module, os.path.join(dirpath, name)))
    return sorted(out)


def imported(module: str, path: str) -> set[str]:
    """Every module name an import statement anywhere in the file names (relative imports
    resolved against `module`; `from a import b` counts as both `a` and `a.b`)."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    is_package = path.endswith("__init__.py")
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("package", BELOW_SEARCH)
def test_nothing_below_the_search_imports_it(package):
    found = modules(package)
    assert found, package
    offenders = [
        f"{module} imports {name}"
        for module, path in found
        for name in sorted(imported(module, path))
        if _within(name, "nas.search")
    ]
    assert not offenders, offenders


def test_the_graph_package_imports_no_other_nas_package():
    offenders = [
        f"{module} imports {name}"
        for module, path in modules("nas.graph")
        for name in sorted(imported(module, path))
        if (name == "nas" or _within(name, "nas")) and not _within(name, "nas.graph")
    ]
    assert not offenders, offenders


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    path = tmp_path / "mod.py"
    path.write_text(
        "def f():\n    from nas.search.store.study import Study\n    from ..search import cli\n"
    )
    names = imported("nas.train.mod", str(path))
    assert {"nas.search.store.study", "nas.search", "nas.search.cli"} <= names


# The search's subpackages, lowest first: each may import those before it, never one after.
SEARCH_LAYERS = ("strategy", "store", "execution", "reporting")


def test_a_search_subpackage_never_imports_a_higher_one():
    offenders = []
    for rank, layer in enumerate(SEARCH_LAYERS):
        higher = [f"nas.search.{above}" for above in SEARCH_LAYERS[rank + 1:]]
        higher.append("nas.search.cli")
        for module, path in modules(f"nas.search.{layer}"):
            offenders += [f"{module} imports {name}" for name in sorted(imported(module, path))
                          if any(_within(name, h) for h in higher)]
    assert not offenders, offenders


def test_moved_search_modules_answer_to_their_old_paths():
    from nas.search.study import Study  # the path before the subpackages

    import nas.search.execution.driver
    import nas.search.store.study

    assert Study is nas.search.store.study.Study
    assert nas.search.store.study.__spec__.name == "nas.search.store.study"  # its own spec
    import nas.search.driver

    assert nas.search.driver is nas.search.execution.driver
