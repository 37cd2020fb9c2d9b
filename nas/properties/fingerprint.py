"""Fingerprints: one digest per computation, the same in every process and on every machine.

Used to reject a child identical to its parent and to de-duplicate a study. The digest
ignores op names and op order; it depends on op types, resolved kwargs (with the flax
defaults filled in, so an explicit default equals an omitted one), wiring, graph input names
and shapes, and output names. It is a sha256 over canonical text: no Python `hash()` (whose
string hashing is salted per process) and no object identities (initializers are hashed by
their `"I:..."` text).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Mapping
from typing import Any

from nas.graph.ops import Graph, OpType, canonical_name
from nas.graph.validate import INPUT_KWARG_DEFAULTS, MODULE_TYPES, validate
from nas.properties.resolved import freeze, resolve_kwargs
from nas.properties.tensor_shapes import GraphShapes, graph_shapes

# Ops whose result does not depend on the order of their inputs.
_COMMUTATIVE = frozenset({OpType.ADD, OpType.MUL})


def _digest(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


@functools.cache
def _module_defaults(op_type: OpType) -> tuple[tuple[str, Any], ...]:
    """Frozen defaults of the flax module's fields (callables by qualified name)."""
    out = []
    for f in dataclasses.fields(MODULE_TYPES[op_type]):
        if f.name in ("parent", "name") or f.default is dataclasses.MISSING:
            continue
        out.append((f.name, freeze(f.default)))
    return tuple(out)


def _full_op_kwargs(op_type: OpType, op_kw: Mapping[str, Any]) -> tuple:
    merged = dict(_module_defaults(op_type)) if op_type in MODULE_TYPES else {}
    merged.update((k, freeze(v)) for k, v in op_kw.items() if k != "name")
    return tuple(sorted(merged.items()))


def _stated_input_kwargs(op_type: OpType, in_kw: Mapping[str, Any]) -> dict[str, Any]:
    """Input kwargs less the name and any optional kwarg written at its default value:
    `GELU(approximate=True)` computes what `GELU()` does. (Dropping rather than filling in
    defaults keeps the fingerprints of graphs written before these kwargs existed.)"""
    defaults = INPUT_KWARG_DEFAULTS.get(op_type, {})
    return {k: v for k, v in in_kw.items() if k != "name" and not (
        k in defaults and isinstance(v, bool) == isinstance(defaults[k], bool)
        and v == defaults[k])}


def fingerprint_graph(
    graph: Graph,
    constants: Mapping[str, Any] | None = None,
    input_values: Mapping[str, Any] | None = None,
    state: Any = None,
    *,
    shapes: GraphShapes | None = None,
) -> str:
    """A hex sha256 of what `graph` computes (the reference's arguments; its `state` is
    accepted and ignored: a fingerprint is of the computation, not of its weights).

    With `input_values` (arrays, specs or shape tuples) or precomputed `shapes`, symbolic
    kwargs are resolved first, so `"S:-1*2"` and the width it resolves to fingerprint
    alike. Without either, kwargs are hashed as written (with the constants).
    """
    del state
    validate(graph)
    constants = dict(constants or {})
    if shapes is None and input_values is not None:
        shapes = graph_shapes(graph, constants, input_values)
    digests: dict[str, str] = {}
    for name in graph.input_names:
        key = canonical_name(name)
        spec = shapes.tensors.get(key) if shapes is not None else None
        shape = (tuple(spec.shape), str(spec.dtype)) if spec is not None else None
        digests[key] = _digest("input", key, shape)
    for op in graph.ops:
        ins = [digests[n] for n in op.input_names]
        if op.type in (OpType.IDENTITY, OpType.NONE):
            digests[op.output_names[0]] = ins[0]
            continue
        if shapes is not None:
            in_shapes = [shapes.shape(n) for n in op.input_names]
            op_kw, in_kw = resolve_kwargs(op, in_shapes, shapes.tensors, constants)
        else:
            op_kw, in_kw = op.op_kwargs, op.input_kwargs
        if op.type in _COMMUTATIVE and not in_kw.get("layer_drop_rate"):
            ins = sorted(ins)
        base = _digest(op.type.name, _full_op_kwargs(op.type, op_kw),
                       freeze(_stated_input_kwargs(op.type, in_kw)), tuple(ins))
        for idx, out in enumerate(op.output_names):
            digests[out] = _digest(base, idx)
    outputs = sorted((canonical_name(n), digests[canonical_name(n)]) for n in graph.output_names)
    unresolved = freeze(constants) if shapes is None else None  # K: values hashed as text
    return _digest("graph", tuple(outputs), unresolved)
