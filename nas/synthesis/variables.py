"""A child's variables: the parent's arrays where name, shape and dtype match, fresh elsewhere.

The child's variable shapes come from one abstract pass (`jax.eval_shape` of `init`), and
fresh values from host-side initializers, so building a child's state compiles nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from nas.graph.model import Model
from nas.graph.ops import Graph
from nas.synthesis.initializers import init_leaf


@dataclass
class ChildVariables:
    variables: dict[str, dict[str, Any]]
    inherited: set[str] = field(default_factory=set)  # op names of inherited params
    new: set[str] = field(default_factory=set)  # op names of freshly initialized params


def as_struct(value: Any) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(tuple(jnp.shape(value)), jnp.result_type(value))


def abstract_variables(
    graph: Graph, constants: Mapping[str, Any] | None, inputs: Mapping[str, Any]
) -> dict[str, Any]:
    """Shapes and dtypes of every variable of `graph` (nothing is computed or compiled)."""
    structs = {k: as_struct(v) for k, v in inputs.items()}
    model = Model(graph, dict(constants or {}))
    return jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x), structs)


def _signature(tree: Any) -> Any:
    return jax.tree.map(lambda a: (tuple(jnp.shape(a)), jnp.result_type(a)), tree)


def matches(parent: Any, child: Any) -> bool:
    """Same tree structure, shapes and dtypes."""
    return (jax.tree.structure(parent) == jax.tree.structure(child)
            and _signature(parent) == _signature(child))


def _fresh(graph: Graph, collection: str, name: str, abstract: Any, seed: int) -> Any:
    op = graph.op(name)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    values = []
    for path, leaf in leaves:
        keys = [getattr(p, "key", str(p)) for p in path]
        leaf_name = keys[-1] if keys else "param"
        if len(keys) > 1:
            raise LookupError(f"op {name!r}: nested variables need the jax initializer")
        values.append(init_leaf(op, leaf_name, leaf.shape, leaf.dtype, seed, collection))
    return jax.tree_util.tree_unflatten(jax.tree.structure(abstract), values)


def build_variables(
    graph: Graph,
    constants: Mapping[str, Any] | None,
    inputs: Mapping[str, Any],
    parent_variables: Mapping[str, Any] | None,
    seed: int = 0,
    abstract: Mapping[str, Any] | None = None,
) -> ChildVariables:
    """Variables for `graph`: inherited from `parent_variables` where they fit, else fresh.

    `inputs` may hold arrays or `ShapeDtypeStruct`s; `abstract` (from `abstract_variables`)
    can be passed to skip the abstract pass.
    """
    if abstract is None:
        abstract = abstract_variables(graph, constants, inputs)
    parent_variables = parent_variables or {}
    out: dict[str, dict[str, Any]] = {}
    inherited: set[str] = set()
    new: set[str] = set()
    fallback: dict[str, Any] | None = None
    for collection, entries in abstract.items():
        parent_entries = parent_variables.get(collection) or {}
        out[collection] = {}
        for name, shapes in entries.items():
            old = parent_entries.get(name)
            if old is not None and matches(old, shapes):
                out[collection][name] = old
                if collection == "params":
                    inherited.add(name)
                continue
            if collection == "params":
                new.add(name)
            try:
                out[collection][name] = _fresh(graph, collection, name, shapes, seed)
            except LookupError:
                if fallback is None:  # rare: an op type without a host initializer
                    zeros = {k: jnp.zeros(v.shape, v.dtype)
                             for k, v in ((k, as_struct(v)) for k, v in inputs.items())}
                    fallback = Model(graph, dict(constants or {})).init(
                        jax.random.PRNGKey(seed), zeros)
                out[collection][name] = fallback[collection][name]
    return ChildVariables(out, inherited, new)
