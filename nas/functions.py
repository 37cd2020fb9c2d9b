"""A user's own functions (loss, optimizer, augmentation, costs): named, digested, shipped.

Why a leaf: training calls them inside its compiled step and the search ships them to
worker processes and Ray tasks, so both need one way to name a function, to tell whether
a resumed study was run with the same code, and to move a function defined in a notebook
cell or `__main__` to another process by value.

- `name_of(fn)`: "package.module:qualname", what configs and studies record.
- `digest_of(fn)`: a digest of the function's code (bytecode, constants, names, defaults
  and the values it closes over), stable across processes, so that resuming a study with
  a changed function is noticed and a re-import of the same code is not.
- `resolve(name)`: the function a "package.module:function" name imports.
- `pack` / `unpack`: functions by value (cloudpickle), for the executors' pipes and the
  object store only. A function of the user's own code (`__main__`, a notebook, a module
  of their project) travels with its code, so a Ray node that has only the installed
  packages runs it; one of an installed package travels by name. Nothing packed is ever
  written to disk or read back from it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import sys
import sysconfig
import types
from collections.abc import Callable, Mapping
from typing import Any

import cloudpickle

DIGEST_CHARS = 16


@dataclasses.dataclass(frozen=True)
class Cost:
    """A user's cost measured `repeats` times on each candidate (`nas.Cost(fn, repeats=5)`
    in `search.costs` or `nas.run_search(costs=...)`): the median is the cost and the
    interquartile range, kept beside it as `<name>_iqr`, its spread; on fronts, costs that
    differ by less than their spread tie. Why: a timing taken once is ordered by noise.
    Calling it calls `func` once."""

    func: Callable[..., Any]
    repeats: int = 1

    def __post_init__(self) -> None:
        if not callable(self.func):
            raise ValueError(f"Cost: expected a function, got {type(self.func).__name__}")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or \
                self.repeats < 1:
            raise ValueError(f"Cost: repeats must be an integer >= 1, got {self.repeats!r}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)


def name_of(fn: Callable[..., Any]) -> str:
    """"module:qualname" of `fn` (a partial or callable object: its type's)."""
    target = getattr(fn, "func", fn)  # functools.partial
    if not isinstance(target, types.FunctionType | types.BuiltinFunctionType | type):
        target = type(target)
    module = getattr(target, "__module__", None) or "__main__"
    return f"{module}:{getattr(target, '__qualname__', type(target).__name__)}"


def digest_of(fn: Callable[..., Any]) -> str:
    """A hex digest of what `fn` computes: its code, and what it closes over."""
    h = hashlib.sha256()
    _feed(h, fn, depth=0)
    return h.hexdigest()[:DIGEST_CHARS]


def _feed(h: Any, value: Any, depth: int) -> None:
    """Hash `value` structurally; objects without a stable structure by their pickle."""
    if depth > 20:
        h.update(b"<deep>")
        return
    if isinstance(value, types.FunctionType):
        h.update(b"fn")
        _feed(h, value.__code__, depth + 1)
        _feed(h, value.__defaults__, depth + 1)
        _feed(h, value.__kwdefaults__, depth + 1)
        for cell in value.__closure__ or ():
            try:
                _feed(h, cell.cell_contents, depth + 1)
            except ValueError:  # an empty cell
                h.update(b"<empty>")
        return
    if isinstance(value, types.CodeType):
        h.update(value.co_code)
        h.update(repr(value.co_names).encode())
        for const in value.co_consts:
            _feed(h, const, depth + 1)
        return
    if isinstance(value, Cost):
        h.update(f"cost x{value.repeats}".encode())
        _feed(h, value.func, depth + 1)
        return
    if hasattr(value, "func") and hasattr(value, "args"):  # functools.partial
        h.update(b"partial")
        for part in (value.func, value.args, value.keywords):
            _feed(h, part, depth + 1)
        return
    if isinstance(value, tuple | list):
        h.update(f"{type(value).__name__}{len(value)}".encode())
        for item in value:
            _feed(h, item, depth + 1)
        return
    if isinstance(value, dict):
        h.update(f"dict{len(value)}".encode())
        for key in sorted(value, key=repr):
            _feed(h, key, depth + 1)
            _feed(h, value[key], depth + 1)
        return
    if value is None or isinstance(value, bool | int | float | complex | str | bytes):
        h.update(f"{type(value).__name__}:{value!r}".encode())
        return
    if isinstance(value, types.ModuleType | types.BuiltinFunctionType | type):
        h.update(f"ref:{getattr(value, '__module__', '')}.{value.__name__}".encode())
        return
    try:  # e.g. a numpy array or a callable object: what it pickles to
        h.update(cloudpickle.dumps(value))
    except Exception:  # noqa: BLE001 - unpicklable: its type is all that is stable
        h.update(f"obj:{type(value).__module__}.{type(value).__qualname__}".encode())


def resolve(name: str, field: str) -> Callable[..., Any]:
    """The function "package.module:function" names; one ValueError naming `field` when
    it cannot be imported (e.g. a `__main__` function in another process)."""
    module_name, sep, attr = str(name).partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{field}: expected 'package.module:function', got {name!r}")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"{field}: cannot import {name!r} here ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}); a function defined "
                         f"in a notebook or __main__ reaches workers only through "
                         f"nas.run_search") from None
    if not callable(target):
        raise ValueError(f"{field}: {name!r} is a {type(target).__name__}, not a function")
    return target


def pack(functions: Mapping[str, Callable[..., Any]], field: str = "functions") -> bytes:
    """`functions` by value; a function that cannot be shipped is one ValueError naming its
    key (e.g. one that closes over an open file, a lock or a live device buffer)."""
    for key, fn in functions.items():
        try:
            cloudpickle.dumps(fn)
        except Exception as e:  # noqa: BLE001 - anything pickling raises
            raise ValueError(f"{key}: {name_of(fn)} cannot be shipped to worker processes "
                             f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                             f"); define it at top level, closing over plain values") from None
    modules = [sys.modules[name] for name in sorted(_users_modules(functions))]
    for module in modules:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(dict(functions))
    finally:
        for module in modules:
            cloudpickle.unregister_pickle_by_value(module)


def _users_modules(functions: Mapping[str, Callable[..., Any]]) -> set[str]:
    """The modules, other than `__main__` (always by value), that define one of `functions`
    and are not installed (the standard library, site-packages): the user's own code."""
    installed = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib",
                                                    "platlib")}
    out = set()
    for fn in functions.values():
        name = getattr(getattr(fn, "func", fn), "__module__", None)
        file = getattr(sys.modules.get(name or ""), "__file__", None)
        if name and name != "__main__" and file and not any(
                file.startswith(root) for root in installed):
            out.add(name)
    return out


def unpack(data: bytes | None) -> dict[str, Callable[..., Any]]:
    """The functions `pack` shipped (an empty dict for None)."""
    return {} if not data else dict(cloudpickle.loads(data))


def describe(functions: Mapping[str, Callable[..., Any]]) -> dict[str, dict[str, str]]:
    """{key: {"name", "digest"}}: what a study records of each function."""
    return {key: {"name": name_of(fn), "digest": digest_of(fn)}
            for key, fn in sorted(functions.items())}
