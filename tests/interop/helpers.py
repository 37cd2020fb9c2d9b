"""Shared by the interop tests: random variables for a graph, built on the host."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from nas.graph.ops import Graph
from nas.synthesis.variables import abstract_variables


def random_variables(graph: Graph, constants: Mapping[str, Any], input_shape: Sequence[int],
                     seed: int = 0) -> dict[str, Any]:
    """Random variables, none zero (a zero-initialised head would hide every difference):
    params ~ N(0, 0.2^2), batch-norm means ~ N(0, 0.1^2), variances in [0.5, 1.5]. Host
    side, so nothing compiles."""
    rng = np.random.default_rng(seed)
    spec = jax.ShapeDtypeStruct((2, *input_shape), np.float32)
    shapes = abstract_variables(graph, constants, {graph.input_names[0]: spec})

    def fill(path: Any, leaf: Any) -> np.ndarray:
        if "var" in jax.tree_util.keystr(path[-1:]):
            return rng.uniform(0.5, 1.5, leaf.shape).astype(leaf.dtype)
        scale = 0.1 if path[0].key == "batch_stats" else 0.2
        return (scale * rng.normal(size=leaf.shape)).astype(leaf.dtype)

    return jax.tree_util.tree_map_with_path(fill, shapes)
