"""A search's user functions: which ones, checked against the study, measured in workers.

Keys: "loss", "optimizer", "augment" (the `train` config's fields, `nas.train.custom`) and
"costs.<name>" (`search.costs`: {name: "package.module:function"}). The study records each
one's name and code digest (state "functions"), and a resumed search whose function differs
is refused in one line. The driver ships the functions by value with every task, so one
defined in a notebook or `__main__` trains in worker processes and Ray tasks too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from nas import functions as fn_lib
from nas.io.candidate import ExportedCandidate
from nas.search.strategy.selection import spread_name
from nas.search.strategy.settings import SearchSettings
from nas.train import custom
from nas.train.config import image_shape

STATE = "functions"  # the study's record: {key: {"name", "digest"}}
COST_PREFIX = "costs."


class CostFailed(RuntimeError):
    """A user's cost raised or returned something other than a finite number."""


def search_functions(train: Any, search: SearchSettings,
                     given: Mapping[str, Callable[..., Any]] | None = None
                     ) -> dict[str, Callable[..., Any]]:
    """{key: function} of the config's user functions: `given`, else imported."""
    given = dict(given or {})
    out = custom.train_functions(train, {k: v for k, v in given.items() if k in custom.KEYS})
    out.update(cost_functions(search.costs, given))
    return out


def cost_functions(costs: Mapping[str, str], given: Mapping[str, Callable[..., Any]]
                   ) -> dict[str, Callable[..., Any]]:
    """{"costs.<name>": function} for `costs` {name: "module:function"}."""
    out = {}
    for name, ref in sorted(costs.items()):
        key = COST_PREFIX + name
        out[key] = given[key] if key in given else fn_lib.resolve(
            ref, f"config field 'search.costs.{name}'")
    return out


def check_recorded(recorded: Mapping[str, Any] | None,
                   functions: Mapping[str, Callable[..., Any]], where: str) -> None:
    """One ValueError line when `functions` are not the ones the study `recorded`."""
    if not recorded:
        return
    now = fn_lib.describe(functions)

    def text(d: Any) -> str:
        return f"{d['name']} (code {d['digest']})" if d else "none"

    # the training functions first, then the costs: the line names the first that differs
    for key in sorted(set(recorded) | set(now), key=lambda k: (k.startswith(COST_PREFIX), k)):
        was, given = recorded.get(key), now.get(key)
        if was == given:
            continue
        field = key if key.startswith(COST_PREFIX) else f"train.{key}"
        raise ValueError(f"{field}: the study in {where} was run with {text(was)}, not "
                         f"{text(given)}; resume it with the same function, or start a new "
                         f"workdir")


def measure_costs(costs: Mapping[str, Callable[..., Any]], graph: Any, constants: Any,
                  variables: Mapping[str, Any], train_config: Mapping[str, Any],
                  metrics: Mapping[str, Any]) -> dict[str, float]:
    """Each cost of the trained candidate (as `nas.load_candidate` gives it), by name."""
    candidate = ExportedCandidate(path="(the trained candidate)", graph=graph,
                                  constants=dict(constants or {}), variables=dict(variables),
                                  input_shape=image_shape(train_config),
                                  train_config=dict(train_config),
                                  metrics=dict(metrics))
    out = {}
    for key, fn in costs.items():
        name = key.removeprefix(COST_PREFIX)
        repeats = fn.repeats if isinstance(fn, fn_lib.Cost) else 1
        values = [_one_value(name, fn, candidate) for _ in range(repeats)]
        if repeats == 1:
            out[name] = values[0]
        else:  # the median is the cost, the interquartile range its spread
            q1, median, q3 = np.percentile(values, [25, 50, 75])
            out[name], out[spread_name(name)] = float(median), float(q3 - q1)
    return out


def _one_value(name: str, fn: Callable[..., Any], candidate: Any) -> float:
    try:
        value = fn(candidate)
    except Exception as e:  # noqa: BLE001 - the user's code: its cause is the record
        first = str(e).splitlines()[0] if str(e) else ""
        raise CostFailed(f"cost {name!r} ({fn_lib.name_of(fn)}) raised "
                         f"{type(e).__name__}: {first}") from None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CostFailed(f"cost {name!r} returned {type(value).__name__} {value!r:.80}, "
                         f"expected a number") from None
    if not math.isfinite(number):
        raise CostFailed(f"cost {name!r} returned {number}, expected a finite number")
    return number
