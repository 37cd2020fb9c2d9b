"""An einsum of an input with a weight, as the `DenseGeneral` it is, when it is one.

Why: linen `nn.Einsum` and NNX `nnx.Einsum` are, in most models (attention projections,
`"btd,dnh->btnh"`), a DenseGeneral whose kernel axes are in another order. The IR has
DENSE_GENERAL as a layer (mutable, trainable as Flax trains it) but no einsum layer, so such
an einsum is imported whole as one DENSE_GENERAL op with its kernel transposed into
DenseGeneral's layout. An einsum that is not one (a label shared by the input, the kernel
and the output, an input axis summed away, an output order DenseGeneral cannot give) is
traced into primitives instead, which computes the same.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class AsDenseGeneral:
    """DenseGeneral's fields and params for an einsum of an input and a kernel."""

    features: tuple[int, ...]
    axis: tuple[int, ...]  # negative: the same for any batch size
    kernel: np.ndarray  # (contracted input axes in input order, *features)
    bias: np.ndarray | None  # shape `features`


def parse(spec: str) -> tuple[str, str, str] | None:
    """`"ab,bc->ac"` -> ("ab", "bc", "ac"); None for an implicit output, an ellipsis, more or
    fewer than two operands, or a label repeated within one operand."""
    spec = spec.replace(" ", "")
    if "->" not in spec or "." in spec:
        return None
    lhs, out = spec.split("->")
    operands = lhs.split(",")
    if len(operands) != 2:
        return None
    x, k = operands
    if any(len(set(s)) != len(s) for s in (x, k, out)):
        return None
    return x, k, out


def as_dense_general(spec: str, input_rank: int, kernel: np.ndarray,
                     bias: np.ndarray | None) -> AsDenseGeneral | None:
    """The DenseGeneral that computes `einsum(spec, x, kernel) + bias` (bias over the
    kernel's output axes, as both Flax Einsum layers add it), or None when there is none."""
    parsed = parse(spec)
    if parsed is None:
        return None
    x, k, out = parsed
    if len(x) != input_rank or len(k) != kernel.ndim or set(out) - set(x + k):
        return None
    contracted = [c for c in x if c in k]
    kept = [c for c in x if c not in k]
    features = [c for c in out if c in k]
    if any(c in out for c in contracted) or not contracted or not features \
            or set(features) != set(k) - set(x) or list(out) != kept + features:
        return None
    order = [k.index(c) for c in contracted + features]
    sizes = tuple(int(kernel.shape[k.index(c)]) for c in features)
    if bias is not None:
        if int(np.size(bias)) != int(np.prod(sizes)):
            return None
        bias = np.asarray(bias).reshape(sizes)
    return AsDenseGeneral(sizes, tuple(x.index(c) - input_rank for c in contracted),
                          np.transpose(np.asarray(kernel), order), bias)
