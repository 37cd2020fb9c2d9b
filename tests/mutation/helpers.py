"""Shared checks for mutation tests: every child must be valid, inherit bit-identical arrays
and differ from its parent."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np

from nas.graph import Model, validate
from nas.graph.serialize import graph_to_json
from nas.mutation import fingerprint_at
from nas.properties.fingerprint import fingerprint_graph
from nas.synthesis.variables import build_variables

INPUT = {"input": jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)}


def parent_variables(graph, constants, seed: int = 0, image_size: int = 32):
    """Fresh parent variables (host-side initializers: no compile)."""
    inputs = {"input": jax.ShapeDtypeStruct((1, image_size, image_size, 3), jnp.float32)}
    return build_variables(graph, constants, inputs, None, seed=seed).variables


def check_child(child, graph, constants, variables, num_classes=10, forward=True):
    assert child.inherited or child.new
    params = child.variables["params"]
    assert set(params) == child.inherited | child.new
    assert not child.inherited & child.new
    for name in child.inherited:
        mine = jax.tree.leaves(params[name])
        theirs = jax.tree.leaves(variables["params"][child.renamed.get(name, name)])
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(np.asarray(a), np.asarray(b)), name
    assert fingerprint_graph(child.graph, child.constants, INPUT) != fingerprint_graph(
        graph, constants, INPUT)
    # The record a study stores: fingerprint computed once, JSON-ready fields.
    assert child.fingerprint == fingerprint_graph(child.graph, child.constants, INPUT)
    assert child.fingerprint == fingerprint_at(child.graph, child.constants, (1, 32, 32, 3))
    json.dumps([child.spec_json(), child.properties_json(), child.blocks_json()],
               allow_nan=False)
    assert child.satisfies_properties()
    for prop in child.properties:
        assert prop.verify(child.subgraph_model())
    if forward:
        x = jnp.ones((2, 32, 32, 3))
        out = Model(child.graph, child.constants).apply(child.variables, x)
        assert out.shape == (2, num_classes)
        assert bool(jnp.all(jnp.isfinite(out)))


def same_child(a, b) -> bool:
    if graph_to_json(a.graph, a.constants) != graph_to_json(b.graph, b.constants):
        return False
    la, lb = jax.tree.leaves(a.variables), jax.tree.leaves(b.variables)
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb, strict=True))


def logits(graph, constants, variables, x):
    """The interpreter's inference logits of a graph (as numpy)."""
    return np.asarray(Model(graph, constants).apply(variables, x, deterministic=True,
                                                    training=False))


def check_valid(graph, constants, variables, x):
    """The child is a valid graph whose forward pass gives finite logits, one row per
    image; returns them."""
    validate(graph)
    out = logits(graph, constants, variables, x)
    assert out.shape == (x.shape[0], 10) and np.isfinite(out).all()
    return out


def drawn_child(cand, move: str, input_shape):
    """The child `propose_child` draws from an imported candidate with only `move` in the
    mix, after checking that the same seed draws the same child again and that it records
    the move's kind (none of these moves preserves the function)."""
    from nas.mutation import propose_child

    child, again = (propose_child(cand.graph, {}, cand.variables, seed=0,
                                  config={"moves": {move: 1.0}, "input_shape": input_shape})
                    for _ in range(2))
    assert again.fingerprint == child.fingerprint
    assert child.kind == move and not child.function_preserving
    return child
