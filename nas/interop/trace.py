"""Trace a Flax module (linen or NNX) into a flat list of equations, known layers kept whole.

Why: the functional code between layers is only visible as a jaxpr, but a layer traced into
primitives loses what it is (a conv with its weights, a batch norm that trains with batch
statistics). So while tracing, each call of a known layer still runs (its output has the
right shape) but is then replaced by one `nas_layer` primitive that carries the layer's
index; dead-code elimination later drops the layer's own primitives. Nested calls (`jit`,
`custom_jvp`, ...) are inlined, so what is left are primitives and layers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import numpy as np
from jax.extend.core import Primitive

from nas.interop import layers as layer_rules

LAYER = Primitive("nas_layer")


def _layer_abstract_eval(x: Any, *, index: int, shape: tuple[int, ...], dtype: Any) -> Any:
    del x, index
    return jax.core.ShapedArray(shape, dtype)


LAYER.def_abstract_eval(_layer_abstract_eval)

# Primitives holding a sub-jaxpr that is simply called: inlined while flattening.
CALLS = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr",
         "core_call": "call_jaxpr", "custom_jvp_call": "call_jaxpr",
         "custom_vjp_call": "call_jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr",
         "custom_vjp_call_jaxpr": "fun_jaxpr"}


@dataclasses.dataclass
class Eqn:
    """One primitive application with values numbered across inlined calls."""

    primitive: Any
    params: dict[str, Any]
    inputs: list[Any]  # int value ids, or Lit
    outputs: list[int]
    shapes: list[tuple[int, ...]]  # of the outputs
    scope: str  # the module path (name stack) where it sits
    via: str  # the jitted function it was inlined from, e.g. "sort"

    @property
    def name(self) -> str:
        return self.primitive.name


@dataclasses.dataclass(frozen=True, eq=False)
class Lit:
    """A literal scalar of the jaxpr."""

    value: Any


@dataclasses.dataclass
class Traced:
    """What tracing a module gives: flat equations, the input and output value ids, the
    constants by value id, each value's shape and dtype, and the layers called."""

    eqns: list[Eqn]
    input_id: int
    output_ids: list[int]
    consts: dict[int, np.ndarray]
    avals: dict[int, Any]
    layers: list[layer_rules.LayerCall]


def trace(model: Any, x: Any, variables: Mapping[str, Any] | None,
          call_kwargs: Mapping[str, Any]) -> Traced:
    """Trace `model` on `x` (linen: `apply(variables, x, **call_kwargs)`, NNX: `model(x,
    **call_kwargs)`), each known layer one `nas_layer` equation."""
    calls: list[layer_rules.LayerCall] = []
    if layer_rules.is_linen(model):
        fn, guard = _linen_fn(model, variables, call_kwargs, calls)
    else:
        fn, guard = _nnx_fn(model, call_kwargs, calls)
    with guard:
        closed = jax.make_jaxpr(fn)(x)
    return _flatten(closed, calls)


def _record(calls: list[layer_rules.LayerCall], call: layer_rules.LayerCall, out: Any) -> Any:
    """Replace the layer's output by a `nas_layer` application on its input."""
    if not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise ValueError(f"layer {call.path}: returned {type(out).__name__}, expected one array")
    for other in calls:
        if other.path == call.path:
            raise ValueError(f"layer {call.path} ({call.kind}) is called more than once; its "
                             f"weights would be shared, which the IR cannot express")
    call.out_shape = tuple(out.shape)
    calls.append(call)
    return LAYER.bind(call.x, index=len(calls) - 1, shape=tuple(out.shape), dtype=out.dtype)


def _linen_fn(model: Any, variables: Mapping[str, Any] | None, call_kwargs: Mapping[str, Any],
              calls: list[layer_rules.LayerCall]) -> tuple[Callable, Any]:
    import flax.linen as nn

    def interceptor(next_fun: Callable, args: tuple, kwargs: dict, context: Any) -> Any:
        module = context.module
        if context.method_name != "__call__" or not layer_rules.known_linen(module):
            return next_fun(*args, **kwargs)
        call = layer_rules.linen_call(module, args, kwargs)
        if call is None:  # traced through: its primitives are translated one by one
            return next_fun(*args, **kwargs)
        return _record(calls, call, next_fun(*args, **kwargs))

    def fn(x: Any) -> Any:
        return model.apply(variables, x, **call_kwargs)

    return fn, nn.intercept_methods(interceptor)


def _nnx_fn(model: Any, call_kwargs: Mapping[str, Any],
            calls: list[layer_rules.LayerCall]) -> tuple[Callable, Any]:
    from flax import nnx

    modules = list(nnx.iter_modules(model))
    paths = {id(m): "/".join(str(p) for p in path) or type(model).__name__
             for path, m in modules}

    def fn(x: Any) -> Any:
        return model(x, **call_kwargs)

    return fn, _patched_nnx(paths, {type(m) for _, m in modules}, calls)


@contextlib.contextmanager
def _patched_nnx(paths: dict[int, str], classes: set[type],
                 calls: list[layer_rules.LayerCall]) -> Iterator[None]:
    """While tracing, every module of the model runs inside a name scope of its path (so
    the code between its layers is named after it, as linen names it), and the known NNX
    layer classes' calls are recorded. Each class's own `__call__` is patched, restored
    after."""
    layer_classes = set(layer_rules.nnx_classes())
    owners = {next((c for c in cls.__mro__ if "__call__" in vars(c)), None)
              for cls in classes} - {None, object} | layer_classes
    originals = {cls: cls.__call__ for cls in owners}
    entered: list[str] = []  # paths of the modules being called, outermost first

    def wrap(cls: type, original: Callable) -> Callable:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            path = paths.get(id(self))
            if path is None or (entered and entered[-1] == path):  # super().__call__
                return original(self, *args, **kwargs)
            layer = (layer_rules.nnx_call(self, path, args, kwargs)
                     if cls in layer_classes and type(self) is cls else None)
            outer = entered[-1] + "/" if entered else ""
            entered.append(path)
            try:
                with jax.named_scope(path[len(outer):] if path.startswith(outer) else path):
                    out = original(self, *args, **kwargs)
            finally:
                entered.pop()
            return out if layer is None else _record(calls, layer, out)
        return call

    try:
        for cls, original in originals.items():
            cls.__call__ = wrap(cls, original)
        yield
    finally:
        for cls, original in originals.items():
            cls.__call__ = original


def _flatten(closed: Any, calls: list[layer_rules.LayerCall]) -> Traced:
    counter = itertools.count()
    consts: dict[int, np.ndarray] = {}
    avals: dict[int, Any] = {}
    eqns: list[Eqn] = []

    def fresh(var: Any) -> int:
        i = next(counter)
        avals[i] = var.aval
        return i

    def atom(env: dict[Any, Any], v: Any) -> Any:
        if isinstance(v, jax.extend.core.Literal):
            return Lit(v.val)
        return env[v]

    def walk(jaxpr: Any, env: dict[Any, Any], via: str, outer: str | None) -> None:
        for e in jaxpr.eqns:
            ins = [atom(env, v) for v in e.invars]
            scope = outer if outer is not None else str(e.source_info.name_stack)
            key = CALLS.get(e.primitive.name)
            if key is not None and key in e.params:
                inner = e.params[key]
                inner_jaxpr = getattr(inner, "jaxpr", inner)
                inner_consts = getattr(inner, "consts", [])
                sub: dict[Any, Any] = {}
                for v, c in zip(inner_jaxpr.constvars, inner_consts, strict=True):
                    sub[v] = fresh(v)
                    consts[sub[v]] = np.asarray(c)
                for v, a in zip(inner_jaxpr.invars, ins, strict=True):
                    sub[v] = a
                walk(inner_jaxpr, sub, e.params.get("name", via) or via, scope)
                for out, inner_out in zip(e.outvars, inner_jaxpr.outvars, strict=True):
                    env[out] = atom(sub, inner_out)
                continue
            outs = [fresh(v) for v in e.outvars]
            for v, i in zip(e.outvars, outs, strict=True):
                env[v] = i
            eqns.append(Eqn(e.primitive, dict(e.params), ins, outs,
                            [tuple(v.aval.shape) for v in e.outvars], scope, via))

    env: dict[Any, Any] = {}
    for v, c in zip(closed.jaxpr.constvars, closed.consts, strict=True):
        env[v] = fresh(v)
        consts[env[v]] = np.asarray(c)
    (invar,) = closed.jaxpr.invars
    env[invar] = fresh(invar)
    walk(closed.jaxpr, env, "", None)
    outputs = [atom(env, v) for v in closed.jaxpr.outvars]
    if not all(isinstance(o, int) for o in outputs):
        raise ValueError("the model returns a constant, not a function of its input")
    return Traced(_live(eqns, outputs), env[invar], outputs, consts, avals, calls)


def _live(eqns: list[Eqn], outputs: list[int]) -> list[Eqn]:
    """The equations the outputs depend on (the layers' own primitives are dead)."""
    needed = set(outputs)
    kept = []
    for e in reversed(eqns):
        if any(o in needed for o in e.outputs):
            kept.append(e)
            needed.update(i for i in e.inputs if isinstance(i, int))
    return kept[::-1]
