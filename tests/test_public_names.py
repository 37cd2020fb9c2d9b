"""The package's public names: each name in `nas.__all__` and `nas.train.__all__` resolves
(lazily, to the object its module defines) by both `from P import X` and `P.X`, an unknown
name is an AttributeError, and `nas.__version__` is the distribution's version, read from
its installed metadata or, in a source tree that is not installed, from pyproject.toml."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import tomllib

import pytest

import nas

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# where each public name is defined, so that a lazy export pointing elsewhere fails here
HOMES = {
    "nas": {"Cost": "nas.functions", "load_candidate": "nas.io.candidate",
            "save_candidate": "nas.io.candidate", "from_flax": "nas.interop.importer",
            "check_import": "nas.interop.check", "export_flax": "nas.interop.flax_code",
            "preprocess": "nas.train.data", "run_search": "nas.search.api",
            "SearchResult": "nas.search.api", "StopSearch": "nas.search.api",
            "SearchInterrupted": "nas.search.api"},
    "nas.train": {"Metrics": "nas.train.perf", "TrainOptions": "nas.train.options",
                  "train_and_eval": "nas.train.train", "zoo_graph": "nas.train.train"},
}
RENAMED = {"zoo_graph": "build_graph"}


def _pyproject_version() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["version"]


@pytest.mark.parametrize("package", sorted(HOMES))
def test_every_public_name_resolves_to_its_modules_object(package):
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(HOMES[package])
    for name, home in HOMES[package].items():
        expected = getattr(importlib.import_module(home), RENAMED.get(name, name))
        assert getattr(module, name) is expected, (package, name)
        namespace: dict = {}
        exec(f"from {package} import {name}", namespace)
        assert namespace[name] is expected, (package, name)
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        module.not_a_name  # noqa: B018


def test_version_is_the_sources_when_not_installed_and_the_metadatas_when_installed(
        monkeypatch):
    monkeypatch.delitem(nas.__dict__, "__version__", raising=False)
    # this tree is either not installed or installed from itself: both give its version
    assert nas.__version__ == _pyproject_version()

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.delitem(nas.__dict__, "__version__")
    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert nas.__version__ == _pyproject_version()

    monkeypatch.delitem(nas.__dict__, "__version__")
    asked = []
    monkeypatch.setattr(importlib.metadata, "version", lambda name: asked.append(name) or "9.9")
    assert nas.__version__ == "9.9" and asked == ["alphanas-search"]
