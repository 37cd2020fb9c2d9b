"""Abstract properties of subgraphs (shape, depth, linear pairing) and graph fingerprints.

    from nas.properties import shape, depth, linear, fingerprint
    shape.ShapeProperty().infer(subgraph_model).output_shapes

A parent graph's tensor shapes are computed once (`tensor_shapes.graph_shapes`) and can be
passed as `shapes=` to every inference on that parent and its candidates.
"""

from nas.properties import base, depth, fingerprint, linear, shape, tensor_shapes
from nas.properties.tensor_shapes import GraphShapes, MaxSizeError, graph_shapes

__all__ = ["GraphShapes", "MaxSizeError", "base", "depth", "fingerprint", "graph_shapes",
           "linear", "shape", "tensor_shapes"]
