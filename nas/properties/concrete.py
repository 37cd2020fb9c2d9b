"""What concrete (executing) inference needs: real input arrays and a variables dict.

Abstract inference never comes here. Concrete inference runs the subgraph for real, so an
abstract SubgraphModel (no state) gets variables initialised from PRNGKey(0) and inputs that
are only shapes become arrays of ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

from nas.graph.model import Model
from nas.graph.subgraph import SubgraphModel
from nas.properties.tensor_shapes import as_spec


def concrete_inputs(inputs: Mapping[str, Any]) -> dict[str, jax.Array]:
    """Arrays stay; shapes and ShapeDtypeStructs become ones of that shape and dtype."""
    out = {}
    for name, value in inputs.items():
        if isinstance(value, jax.Array) or hasattr(value, "__array__"):
            out[name] = jnp.asarray(value)
        else:
            spec = as_spec(value)
            out[name] = jnp.ones(spec.shape, spec.dtype)
    return out


def concrete_state(subgraph_model: SubgraphModel, inputs: Mapping[str, Any]) -> Any:
    """The model's state, or freshly initialised variables of its whole graph."""
    if subgraph_model.state:
        return subgraph_model.state
    model = Model(subgraph_model.graph, subgraph_model.constants)
    return model.init(jax.random.PRNGKey(0), dict(inputs))


def all_tensors(subgraph_model: SubgraphModel, state: Any,
                inputs: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """Every tensor of the whole graph, computed for real (inputs included)."""
    graph = subgraph_model.graph
    full = Model(type(graph)(list(graph.input_names), [], list(graph.ops)),
                 subgraph_model.constants)
    values = full.apply(state, dict(inputs))
    return {**{k if ":" in k else f"{k}:0": v for k, v in inputs.items()}, **values}
