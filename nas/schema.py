"""Declarative config schemas: one `Field` per config field, checked by one function.

Why: every section of a config (`train`, `search`, `search.mutation`, ...) states each
field's type and range or allowed values in one table, so adding a field is one line and
every mistake reads the same: `config field 'search.workers' must be an int >= 1, got 0`.
Imports nothing else from `nas`, so every stage can use it.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

_NAMES = {bool: "a bool", int: "an int", float: "a number", str: "a string",
          dict: "a dict", list: "a list"}


@dataclasses.dataclass(frozen=True)
class Field:
    """One config field: its type, and optionally a range, allowed values or a predicate.

    `kind` int/float/str/bool/dict/list (a float field accepts ints); `low`/`high` bound
    numbers (`low_open`: strictly greater); `choices` lists allowed values; `check` is a
    predicate described by `expected`; `nullable` allows None.
    """

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: Sequence[Any] | None = None
    check: Callable[[Any], bool] | None = None
    expected: str = ""
    nullable: bool = False

    def describe(self) -> str:
        parts = [_NAMES.get(self.kind, self.kind.__name__)]
        if self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {self.low:g}")
        if self.high is not None:
            parts.append(f"{'and ' if self.low is not None else ''}<= {self.high:g}")
        if self.choices is not None:
            parts = [f"one of {', '.join(repr(c) for c in self.choices)}"]
        if self.expected:
            parts.append(self.expected)
        if self.nullable:
            parts.append("or None")
        return " ".join(parts)

    def ok(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if self.kind is bool:
            good = isinstance(value, bool)
        elif self.kind is int:
            good = isinstance(value, int) and not isinstance(value, bool)
        elif self.kind is float:
            good = isinstance(value, int | float) and not isinstance(value, bool) and \
                math.isfinite(value)
        elif self.kind is dict:
            good = isinstance(value, Mapping) or hasattr(value, "to_dict")  # a ConfigDict
        elif self.kind is list:
            good = isinstance(value, list | tuple)
        else:
            good = isinstance(value, self.kind)
        if not good:
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and value > self.high:
            return False
        if self.choices is not None and value not in self.choices:
            return False
        return self.check is None or bool(self.check(value))


def positive(kind: type = int, **kw: Any) -> Field:
    return Field(kind, low=0, low_open=True, **kw)


def at_least(low: float, kind: type = int, **kw: Any) -> Field:
    return Field(kind, low=low, **kw)


def fraction(**kw: Any) -> Field:
    return Field(float, low=0, high=1, **kw)


def one_of(*choices: Any, **kw: Any) -> Field:
    return Field(type(choices[0]), choices=tuple(choices), **kw)


Schema = Mapping[str, "Field | Schema"]


def check(values: Any, schema: Schema, prefix: str = "", *, partial: bool = True) -> None:
    """Raise ValueError naming the first field of `values` that is unknown or invalid.

    Nested schemas (dicts) check nested sections. `partial`: fields may be missing (their
    defaults apply elsewhere); otherwise every field of `schema` must be present.
    """
    if hasattr(values, "to_dict"):  # a ConfigDict
        values = values.to_dict()
    if not isinstance(values, Mapping):
        name = prefix.rstrip(".") or "config"
        raise ValueError(f"config field {name!r} must be a dict, got {_kind(values)}")
    for key in values:
        if not isinstance(key, str) or key not in schema:
            known = ", ".join(sorted(schema))
            name = repr(f"{prefix}{key}")  # escapes a newline in the key: one line
            if len(name) > 48:  # the line stays short beside a long list of known fields
                name = name[:45] + "..."
            if len(known) > 250:  # one short line: the closest names, not all of them
                near = difflib.get_close_matches(str(key), list(schema), n=3, cutoff=0.5)
                known = (f"the {len(schema)} fields of {prefix.rstrip('.') or 'the config'}"
                         + (f", e.g. {', '.join(near)}" if near else
                            f", e.g. {', '.join(sorted(schema)[:6])}, ..."))
            raise ValueError(f"config field {name} is unknown; expected one of {known}")
    for key, spec in schema.items():
        path = f"{prefix}{key}"
        if key not in values:
            if not partial:
                raise ValueError(f"config field {path!r} is missing")
            continue
        value = values[key]
        if isinstance(spec, Mapping):
            check(value, spec, f"{path}.", partial=partial)
        elif not spec.ok(value):
            shown = " ".join(repr(value).split())  # a ConfigDict's repr spans lines
            if len(shown) > 60:
                shown = shown[:57] + "..."
            raise ValueError(f"config field {path!r} must be {spec.describe()}, got {shown}")


def _kind(value: Any) -> str:
    return "None" if value is None else type(value).__name__
