"""The graph IR and its Flax interpreter. Imports no other `nas` package."""

from nas.graph import subgraph
from nas.graph.model import Model
from nas.graph.ops import Graph, Op, OpType, canonical_name, new_graph, new_op
from nas.graph.validate import validate

__all__ = [
    "Graph", "Model", "Op", "OpType", "canonical_name", "new_graph", "new_op", "subgraph",
    "validate",
]
