"""Function-preserving children (Net2Net-style): the child computes exactly what the parent
computed until training moves it.

Instead of replacing the selected subgraph, the new subgraph is added next to it as a
residual branch on each tensor it would have replaced: `T' = T_old + BN0(new(T))`, where
`BN0` is a batch norm whose scale and bias start at zero. The old ops keep their names (so
they inherit the parent's weights), the branch outputs exactly zero at initialization, and
gradients still reach the branch through the BN scale. Property-wise the branch only adds
paths, so a new subgraph that satisfied depth/mixing lower bounds still satisfies them
(verified anyway).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from nas.graph.ops import OpType, new_op
from nas.graph.subgraph import SubgraphNode

ZERO_BN = {"scale_init": "I:zeros", "bias_init": "I:zeros"}


def preserving_spec(
    old_spec: Sequence[SubgraphNode], new_spec: Sequence[SubgraphNode], prefix: str
) -> list[SubgraphNode]:
    """A spec that keeps `old_spec` and adds `new_spec` as zero residuals on its exports.

    `old_spec` is the selected (self-mapping) subgraph of the parent, `new_spec` the
    synthesized replacement whose exported outputs replace the same old tensors.
    """
    spec = [SubgraphNode(copy.deepcopy(node.op), []) for node in old_spec]
    tails = []
    for node in new_spec:
        op = copy.deepcopy(node.op)
        spec.append(SubgraphNode(op, []))
        for idx, old in enumerate(node.output_names):
            if old is not None:
                tails.append((old, op.output_names[idx]))
    for j, (old, new) in enumerate(tails):
        bn = new_op(f"{prefix}residual{j}/bn", OpType.BATCH_NORM, [new], op_kwargs=ZERO_BN)
        add = new_op(f"{prefix}residual{j}/add", OpType.ADD, [old, bn.output_names[0]])
        spec += [SubgraphNode(bn, []), SubgraphNode(add, [old])]
    return spec
