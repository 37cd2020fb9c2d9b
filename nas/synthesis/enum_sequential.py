"""Enumerative sequential synthesis: try chains in order of length until one satisfies the
properties, then randomize its kwargs within what still satisfies them.

The search itself uses the cheap TEST kwarg values (few candidates per op type); the found
chain is then given random FULL values (strides, kernel sizes, groups, dilations, windows)
one kwarg at a time, each change kept only if the chain still verifies.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from typing import Any

from nas.graph.ops import Op, OpType
from nas.graph.subgraph import SubgraphModel
from nas.synthesis.base import SynthesisError, SynthesisTimeout
from nas.synthesis.linear_output import linear_output_property
from nas.synthesis.search_space import (
    all_kwargs_for_op_type,
    hashable,
    kwargs_for_op_to_product,
    make_default_kwargs,
    op_enumerator,
    sequence_generator,
)
from nas.synthesis.sequential import AbstractSequentialSynthesizer

# (kwarg, preferred values, probability that a preferred current value is kept as is)
PREFERENCES: tuple[tuple[str, tuple[Any, ...], float], ...] = (
    ("features", (), 1.0),
    ("kernel_size", (1,), 0.5),
    ("feature_group_count", (1,), 0.5),
    ("kernel_dilation", (1,), 0.5),
    ("window_shape", (0,), 1.0),
)
RANDOMIZED_TYPES = (OpType.DENSE, OpType.CONV, OpType.GROUP_NORM, OpType.AVG_POOL,
                    OpType.MAX_POOL, OpType.MEAN)


def _spec_key(ops: Sequence[Op]) -> str:
    """A cheap identity for a candidate chain, to skip duplicates."""
    return repr([(op.type.value, sorted(op.op_kwargs.items(), key=str),
                  sorted(op.input_kwargs.items(), key=str)) for op in ops])


class EnumerativeSequentialSynthesizer(AbstractSequentialSynthesizer):
    """Shortest-first enumeration. Length bounds: `max_len` / `min_len` absolute, or
    `max_delta` / `min_delta` relative to the length of the replaced chain.

    The search space's functions are reachable here too, where the reference has them.
    """

    make_default_kwargs = staticmethod(make_default_kwargs)
    all_kwargs_for_op_type = staticmethod(all_kwargs_for_op_type)
    kwargs_for_op_to_product = staticmethod(kwargs_for_op_to_product)
    op_enumerator = staticmethod(op_enumerator)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """`AbstractSequentialSynthesizer`'s arguments (`max_len`, `max_delta`, `min_len`,
        `min_delta`, `space` among them); at most one of max_len and max_delta is set."""
        if kwargs.get("max_len", -1) >= 0 and kwargs.get("max_delta", -1) >= 0:
            raise ValueError("set at most one of max_len and max_delta")
        super().__init__(*args, **kwargs)
        if self.space is not None and self.space.linear_outputs:
            for model, props in self.subgraphs_and_props:
                constraint = linear_output_property(model)
                if constraint is not None:
                    props.append(constraint)

    def length_bounds(self) -> tuple[int, int]:
        """(min, max) chain length; max < 0 means unbounded."""
        max_len = self.num_ops + self.max_delta if self.max_delta > 0 else self.max_len
        min_len = max(0, self.num_ops - self.min_delta) if self.min_delta > 0 else self.min_len
        return min_len, max_len

    def subg_enumerator(self, max_len: int, min_len: int) -> Iterator[list[Op]]:
        gen = lambda: op_enumerator(self.prefix, self.kwarg_defaults, full=False,
                                    op_types=self.op_types, space=self.space)
        return sequence_generator(gen, max_len, min_len)

    def try_ops(self, ops: Sequence[Op], adjust_features: bool) -> bool:
        """Whether the chain `ops` builds and satisfies every property."""
        try:
            return self.verify(self.candidate_models(self.make_subgraph_spec(ops,
                                                                             adjust_features)))
        except ValueError:
            return False

    def synthesize(self) -> list[SubgraphModel]:
        min_len, max_len = self.length_bounds()
        seen: set[str] = set()
        for ops in self.subg_enumerator(max_len, min_len):
            self.check_deadline()
            spec = self.make_subgraph_spec(ops, adjust_features=True)
            key = _spec_key([node.op for node in spec])
            if key in seen:
                continue
            seen.add(key)
            if self.try_ops(ops, adjust_features=True):
                return self.randomize_subgraph([node.op for node in spec])
        raise SynthesisError(f"no chain of length {min_len}..{max_len} satisfies the "
                             f"properties")

    def randomize_subgraph(self, ops: Sequence[Op], full: bool = True) -> list[SubgraphModel]:
        """Random FULL kwargs for each op of a satisfying chain, keeping it satisfying."""
        ops = [copy.deepcopy(op) for op in ops]
        if not self.try_ops(ops, adjust_features=False):
            raise SynthesisError("the chain to randomize does not satisfy the properties")
        for index, op in enumerate(ops):
            if op.type not in RANDOMIZED_TYPES:
                continue
            op_choices, in_choices = all_kwargs_for_op_type(self.kwarg_defaults, full, op.type,
                                                             self.space)
            choices = [(k, v, "op") for k, v in op_choices.items()]
            choices += [(k, v, "in") for k, v in in_choices.items()]
            pinned = set()
            for key, preferred, keep in PREFERENCES:
                current = op.op_kwargs.get(key, op.input_kwargs.get(key))
                if (not preferred or hashable(current) in preferred) and \
                        self.rng.random() < keep:
                    pinned.add(key)
            choices = [c for c in choices if c[0] not in pinned and len(c[1]) > 1]
            self.rng.shuffle(choices)
            for key, values, where in choices:
                values = sorted(values, key=lambda v: (type(v).__name__, repr(v)))
                self.rng.shuffle(values)
                for value in values:
                    try:
                        self.check_deadline()
                    except SynthesisTimeout:
                        return self.make_subgraph_models(self.make_subgraph_spec(ops))
                    trial = [copy.deepcopy(o) for o in ops]
                    target = trial[index].op_kwargs if where == "op" else trial[index].input_kwargs
                    if hashable(target.get(key)) == hashable(value):
                        break  # keeping the current value is an accepted choice
                    target[key] = value
                    if self.try_ops(trial, adjust_features=False):
                        ops = trial
                        break
        return self.make_subgraph_models(self.make_subgraph_spec(ops))
