"""Dimension pairings: which input dims feed which output dims, and how strongly.

Input dim i and output dim j are paired when every position along i influences some element
of the 1-D output slice along j through the centre; the strength is how many positions along
i one centre output element depends on (one, several, all). Concrete pairings are read from
the sparsity of vector-Jacobian products; abstract pairings compose per-op pairings.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class Mapping_(enum.IntEnum):  # noqa: N801 - exported as `Pairing.Mapping`
    NONE = 0
    ONE_TO_ONE = 1
    MANY_TO_ONE = 2
    ALL_TO_ONE = 3


class Pairing:
    """`mappings[in_dim, out_dim]` of `Pairing.Mapping` values (a small int matrix).

    Built from the matrix, or as in the reference from two dim counts (`Pairing(3, 4)`:
    nothing paired yet, to be filled by `pairing[i, j] = ...`).
    """

    Mapping = Mapping_

    def __init__(self, mappings: Any, out_dims: int | None = None) -> None:
        if out_dims is not None:  # the reference's Pairing(in_dims, out_dims)
            if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                       for n in (mappings, out_dims)):
                raise ValueError(f"Pairing(in_dims, out_dims) takes two dim counts, got "
                                 f"{mappings!r}, {out_dims!r}")
            mappings = np.zeros((mappings, out_dims), np.int8)
        arr = np.asarray(mappings, dtype=np.int8)
        if arr.ndim != 2 or arr.size and (arr.min() < 0 or arr.max() > 3):
            raise ValueError(f"a pairing is a 2-D matrix of values 0..3, got {mappings!r}")
        self.mappings = arr

    @classmethod
    def identity(cls, rank: int) -> Pairing:
        return cls(np.eye(rank, dtype=np.int8) * Mapping_.ONE_TO_ONE)

    @property
    def in_dims(self) -> int:
        return self.mappings.shape[0]

    @property
    def out_dims(self) -> int:
        return self.mappings.shape[1]

    def __getitem__(self, index: Any) -> Any:
        return self.mappings[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        self.mappings[index] = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pairing) and np.array_equal(self.mappings, other.mappings)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Pairing({self.mappings.tolist()})"

    def any(self) -> bool:
        return bool(self.mappings.any())

    def join(self, other: Pairing) -> Pairing:
        """The stronger of two pairings, dim by dim (elementwise max)."""
        if self.mappings.shape != other.mappings.shape:
            raise ValueError(f"cannot join pairings of shapes {self.mappings.shape} and "
                             f"{other.mappings.shape}")
        return Pairing(np.maximum(self.mappings, other.mappings))

    def compose(self, then: Pairing) -> Pairing:
        """A->C from A->B (self) and B->C (then).

        A dim that feeds all of itself into one element of an intermediate dim feeds all of
        itself into every output dim (ALL_TO_ONE). Otherwise a->c is the strongest
        max(a->b, b->c) over intermediate dims b that link both ways.
        """
        if self.out_dims != then.in_dims:
            raise ValueError(f"cannot compose a pairing with {self.out_dims} output dims with "
                             f"one with {then.in_dims} input dims")
        a, b = self.mappings, then.mappings
        if a.shape[1] == 0:
            return Pairing(np.zeros((a.shape[0], b.shape[1]), np.int8))
        linked = (a[:, :, None] > 0) & (b[None, :, :] > 0)
        strongest = np.where(linked, np.maximum(a[:, :, None], b[None, :, :]), 0).max(axis=1)
        strongest[(a == Mapping_.ALL_TO_ONE).any(axis=1), :] = Mapping_.ALL_TO_ONE
        return Pairing(strongest.astype(np.int8))


Pairings = dict[str, dict[str, Pairing]]


def _cotangents(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """(rank + 1) cotangents for one output: for each dim, random positive weights on the
    1-D slice along it through the centre (0 elsewhere); then the centre element alone.

    Random weights (not ones) keep cancellations such as softmax's sum-to-one invisible.
    """
    rank = len(shape)
    centre = tuple(n // 2 for n in shape)
    cots = np.zeros((rank + 1,) + shape, np.float32)
    for j in range(rank):
        index = (j,) + centre[:j] + (slice(None),) + centre[j + 1:]
        cots[index] = rng.uniform(1.0, 2.0, shape[j])
    cots[(rank,) + centre] = 1.0
    return cots


def _cover_masks(fn: Callable, state: Any, inputs: Mapping[str, jax.Array],
                 cotangents: Mapping[str, jax.Array]) -> dict:
    """For each output's cotangents: which positions along each input dim have a nonzero
    gradient (any over the other dims)."""
    outs, vjp = jax.vjp(lambda xs: fn(state, xs), dict(inputs))
    result = {}
    for o, cots in cotangents.items():
        k = cots.shape[0]
        full = {name: cots.astype(v.dtype) if name == o else jnp.zeros((k,) + v.shape, v.dtype)
                for name, v in outs.items()}
        (grads,) = jax.vmap(vjp)(full)
        result[o] = {
            x: [jnp.any(g != 0, axis=tuple(d for d in range(g.ndim) if d not in (0, i + 1)))
                for i in range(g.ndim - 1)]
            for x, g in grads.items()
        }
    return result


def jacobian_pairings(fn: Callable, state: Any, inputs: Mapping[str, jax.Array]) -> Pairings:
    """Concrete pairings of `fn(state, inputs) -> {output name: array}`, by executing it.

    Entries that are NONE everywhere (the output does not depend on that input) are left
    out, matching abstract inference.
    """
    out_specs = jax.eval_shape(fn, state, dict(inputs))
    rng = np.random.default_rng(0)
    cotangents = {k: _cotangents(tuple(v.shape), rng) for k, v in out_specs.items()}
    masks = jax.jit(_cover_masks, static_argnums=0)(fn, state, dict(inputs), cotangents)
    pairings: Pairings = {}
    for o, cots in cotangents.items():
        rank = cots.ndim - 1
        for x, per_dim in masks[o].items():
            per_dim = [np.asarray(m) for m in per_dim]
            mat = np.zeros((len(per_dim), rank), np.int8)
            for i, cover in enumerate(per_dim):
                n = cover.shape[1]
                centre = int(cover[rank].sum())
                strength = (Mapping_.ALL_TO_ONE if centre == n else
                            Mapping_.MANY_TO_ONE if centre > 1 else Mapping_.ONE_TO_ONE)
                for j in range(rank):
                    if cover[j].all():
                        mat[i, j] = strength
            if mat.any():
                pairings.setdefault(o, {})[x] = Pairing(mat)
    return pairings
