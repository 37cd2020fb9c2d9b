"""New ops that start from the weights of the op they replace, where they have its shape.

Why: synthesis names its ops afresh, so a new CONV that replaces a CONV of the same kernel
and widths started from a random initialization, and the 40 fitting steps did not bring it
back (a user's imported CNN, a child whose one new CONV replaced one of the same
shape started at 0.72 against its parent's 0.85, fit error 1.27 -> 0.22). A new op of the
same type whose output replaces an old op's output, with every parameter (and statistic)
of the same shape, now starts from that op's values; fitting then starts from there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from nas.graph.ops import Graph, canonical_name


def copy_replaced(parent: Graph, spec: Sequence[Any], parent_variables: Mapping[str, Any],
                  child_variables: dict[str, dict[str, Any]]) -> list[str]:
    """Copies, in `child_variables`, each new op's values from the parent op whose output
    it replaces (same type, same shapes); returns the names of the ops it copied."""
    producers = {canonical_name(name): op for op in parent.ops for name in op.output_names}
    copied = []
    for node in spec:
        replaced = [n for n in node.output_names if n is not None]
        old = producers.get(canonical_name(replaced[0])) if replaced else None
        if old is None or old.type is not node.op.type or old.name == node.op.name:
            continue
        pairs = [(collection, entries) for collection, entries in child_variables.items()
                 if node.op.name in entries]
        if not pairs or not all(_same_shapes(entries[node.op.name],
                                             (parent_variables.get(collection) or {})
                                             .get(old.name)) for collection, entries in pairs):
            continue
        for collection, entries in pairs:
            source = parent_variables[collection][old.name]
            entries[node.op.name] = {k: np.array(v) for k, v in source.items()}
        copied.append(node.op.name)
    return copied


def _same_shapes(mine: Any, theirs: Any) -> bool:
    """Whether two ops' params have the same names, shapes and dtypes (an array an op holds
    directly, a PARAM op's, is never copied: synthesis makes no such op)."""
    if not isinstance(mine, Mapping) or not isinstance(theirs, Mapping):
        return False
    if not mine or not theirs or set(mine) != set(theirs):
        return False
    return all(np.shape(mine[k]) == np.shape(theirs[k]) and
               np.asarray(mine[k]).dtype == np.asarray(theirs[k]).dtype for k in mine)
