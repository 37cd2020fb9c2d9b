"""Declarative config schemas: one `Field` per config field, checked by one function.

Why: every section of a config (`train`, `search`, `search.mutation`, ...) states each
field's type and range or allowed values in one table, so adding a field is one line and
every mistake reads the same: `config field 'search.workers' must be an int >= 1, got 0`.
A `Section` is that table as a frozen dataclass: each field a `setting` (default, check,
help), read from a config's dict by `Section.from_dict` under the path it is given.
Imports nothing else from `nas`, so every stage can use it.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

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
    values = _section_dict(values, prefix)
    check_names(values, schema, prefix)
    for key, spec in schema.items():
        path = f"{prefix}{key}"
        if key not in values:
            if not partial:
                raise ValueError(f"config field {path!r} is missing")
            continue
        if isinstance(spec, Mapping):
            check(values[key], spec, f"{path}.", partial=partial)
        else:
            check_value(spec, values[key], path)


def check_names(values: Mapping[Any, Any], names: Mapping[str, Any], prefix: str) -> None:
    """Raise ValueError naming the first key of `values` that is not one of `names`."""
    for key in values:
        if not isinstance(key, str) or key not in names:
            known = ", ".join(sorted(names))
            name = repr(f"{prefix}{key}")  # escapes a newline in the key: one line
            if len(name) > 48:  # the line stays short beside a long list of known fields
                name = name[:45] + "..."
            if len(known) > 250:  # one short line: the closest names, not all of them
                near = difflib.get_close_matches(str(key), list(names), n=3, cutoff=0.5)
                known = (f"the {len(names)} fields of {prefix.rstrip('.') or 'the config'}"
                         + (f", e.g. {', '.join(near)}" if near else
                            f", e.g. {', '.join(sorted(names)[:6])}, ..."))
            raise ValueError(f"config field {name} is unknown; expected one of {known}")


def check_value(spec: Field, value: Any, path: str) -> None:
    """Raise ValueError naming `path` when `value` does not pass `spec`."""
    if not spec.ok(value):
        shown = " ".join(repr(value).split())  # a ConfigDict's repr spans lines
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise ValueError(f"config field {path!r} must be {spec.describe()}, got {shown}")


def _section_dict(values: Any, prefix: str) -> Any:
    """`values` as a plain mapping (a ConfigDict's dict); ValueError when it is none."""
    if hasattr(values, "to_dict"):  # a ConfigDict
        values = values.to_dict()
    if not isinstance(values, Mapping):
        name = prefix.rstrip(".") or "config"
        raise ValueError(f"config field {name!r} must be a dict, got {_kind(values)}")
    return values


def setting(default: Any, check: Field | Schema | None, help: str = "") -> Any:
    """One field of a `Section`: its default (a callable: called for a fresh value each
    time), its check and its help text. A `Schema` check (a nested section's `checks`) is
    for `check` alone; None: none here (its section's `check_section` may check it)."""
    metadata = {"check": check, "help": help}
    if callable(default):
        return dataclasses.field(default_factory=default, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def default_of(field: dataclasses.Field[Any]) -> Any:
    """A fresh copy of the default a dataclass field declares."""
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return copy.deepcopy(field.default)


def settings_of(cls: Any) -> dict[str, dataclasses.Field[Any]]:
    """The fields of a dataclass that a config sets ({name: field}), in declaration order:
    those declared with `setting`."""
    return {f.name: f for f in dataclasses.fields(cls) if "check" in f.metadata}


def checks(cls: Any) -> dict[str, Field]:
    """The `Field` check of every setting of a section that has one: its `Schema`."""
    return {name: f.metadata["check"] for name, f in settings_of(cls).items()
            if isinstance(f.metadata["check"], Field)}


def defaults(cls: Any) -> dict[str, Any]:
    """Every setting of a section at its default, as a config holds it."""
    return {name: default_of(f) for name, f in settings_of(cls).items()}


SectionT = TypeVar("SectionT", bound="Section")


@dataclasses.dataclass(frozen=True)
class Section:
    """A config section: a frozen dataclass whose fields are `setting`s, each checked when
    it is built. A bad field raises one ValueError line naming it under `prefix`, its path
    in the larger config ("search.fit."), which `from_dict` is given.

    `check_section(prefix)` (none by default) checks the fields together and may make
    their values canonical; it runs after every field passed its own check.
    """

    _: dataclasses.KW_ONLY
    prefix: dataclasses.InitVar[str] = ""

    def __post_init__(self, prefix: str) -> None:
        for name, field in settings_of(self).items():
            spec = field.metadata["check"]
            if not isinstance(spec, Field):
                continue
            value = getattr(self, name)
            check_value(spec, value, f"{prefix}{name}")
            if spec.kind is float and value is not None:
                object.__setattr__(self, name, float(value))
        self.check_section(prefix)

    def check_section(self, prefix: str) -> None:
        """The checks of the fields taken together, naming them under `prefix`."""

    @classmethod
    def from_dict(cls: type[SectionT], values: Any, prefix: str = "",
                  **given: Any) -> SectionT:
        """The section of a config's dict (a ConfigDict, or None: every field at its
        default) checked, every error naming its field under `prefix`. `given`: fields
        that are not settings, which the caller provides."""
        if isinstance(values, cls):
            return values
        values = _section_dict({} if values is None else values, prefix)
        check_names(values, settings_of(cls), prefix)
        return cls(**values, **given, prefix=prefix)

    def to_dict(self) -> dict[str, Any]:
        """The section as a config holds it."""
        return {name: copy.deepcopy(getattr(self, name)) for name in settings_of(self)}


def _kind(value: Any) -> str:
    return "None" if value is None else type(value).__name__
