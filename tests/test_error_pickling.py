"""Every exception class of the project crosses a process boundary intact.

Why: a worker process's exception is pickled back to the driver; a class that pickle cannot
rebuild (its `__init__` takes other arguments than its message) broke the whole process
pool and hid the candidate's cause behind "worker process died".
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pickle
import pkgutil

import pytest

import nas

# Classes whose constructor takes more than a message: how to build one of each.
BUILDERS = {
    "nas.graph.model.OpError": lambda cls: cls("op 'x' (RESHAPE) failed", "cannot reshape"),
    "nas.mutation.move_errors.MoveFailed": lambda cls: cls("deepen", "TypeError: bad",
                                                           "nas/mutation/net2net.py:3"),
    "nas.search.store.study.DuplicateCandidateError": lambda cls: cls("abc123", 7),
    "nas.train.memory.DeviceBudgetExceeded": lambda cls: cls(3 << 20, 1 << 20),
}


def project_exceptions() -> list[type[BaseException]]:
    """Every exception class defined in a module of `nas`: each module that defines a class
    is imported (the two CLIs cannot both be: each defines the absl flag `--config`)."""
    found = {}
    for info in pkgutil.walk_packages(nas.__path__, "nas."):
        spec = importlib.util.find_spec(info.name)
        with open(spec.origin) as f:
            tree = ast.parse(f.read())
        if not any(isinstance(node, ast.ClassDef) for node in ast.walk(tree)):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("nas."):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


CLASSES = project_exceptions()


def test_the_known_ones_are_found():
    names = {f"{c.__module__}.{c.__qualname__}" for c in CLASSES}
    assert set(BUILDERS) <= names
    assert {"nas.search.execution.worker.CandidateTimeout",
            "nas.search.store.database.StudyNotFoundError",
            "nas.mutation.model_mutator.NoChildFound"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_round_trips_through_pickle(cls):
    name = f"{cls.__module__}.{cls.__qualname__}"
    build = BUILDERS.get(name)
    if build is None:
        # A class not listed must take its message alone (add it to BUILDERS otherwise).
        error = cls("something named went wrong")
    else:
        error = build(cls)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert str(back) == str(error)
    assert back.__dict__ == error.__dict__
