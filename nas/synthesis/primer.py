"""Primer-style sequential synthesis: one random local edit of the chain, no property search.

An edit is a deletion, an insertion of a random op, a change of one kwarg, a deletion
followed by an insertion, or a swap of two ops (optionally also a fresh random chain, as in
AutoML-Zero). Properties are not checked here (the caller verifies the child), but the
last width op is still adjusted so the chain ends at the width the host graph expects.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from nas.graph.ops import Op, OpType, new_op
from nas.graph.subgraph import SubgraphModel
from nas.synthesis.base import SynthesisError
from nas.synthesis.search_space import (
    all_kwargs_for_op_type,
    op_enumerator,
    random_sequence_generator,
)
from nas.synthesis.sequential import AbstractSequentialSynthesizer

_FIELD_TYPES = (OpType.DENSE, OpType.CONV, OpType.GROUP_NORM, OpType.AVG_POOL, OpType.MAX_POOL)


class PrimerSequentialSynthesizer(AbstractSequentialSynthesizer):
    def __init__(self, *args: Any, use_automl_zero: bool = False, **kwargs: Any) -> None:
        """`AbstractSequentialSynthesizer`'s arguments; `use_automl_zero`: a fresh random
        chain is one of the edits."""
        super().__init__(*args, **kwargs)
        # Widths were read from the shape properties above; nothing else is checked.
        self.subgraphs_and_props = [(m, []) for m, _ in self.subgraphs_and_props]
        self.use_automl_zero = use_automl_zero

    def _random_op(self) -> Op:
        ops = list(op_enumerator("", self.kwarg_defaults, full=True, op_types=self.op_types,
                                    space=self.space))
        return self.rng.choice(ops)

    def delete(self, ops: list[Op]) -> list[Op] | None:
        if not ops:
            return None
        ops.pop(self.rng.randrange(len(ops)))
        return ops

    def insert(self, ops: list[Op]) -> list[Op] | None:
        ops.insert(self.rng.randrange(len(ops) + 1), self._random_op())
        return ops

    def mutate_field(self, ops: list[Op]) -> list[Op] | None:
        options = []
        for index, op in enumerate(ops):
            if op.type not in _FIELD_TYPES:
                continue
            op_kw, in_kw = all_kwargs_for_op_type(self.kwarg_defaults, True, op.type, self.space)
            options += [(index, k, sorted(v, key=repr), "op") for k, v in op_kw.items()
                        if len(v) > 1]
            options += [(index, k, sorted(v, key=repr), "in") for k, v in in_kw.items()
                        if len(v) > 1]
        if not options:
            return None
        index, key, values, where = self.rng.choice(options)
        target = ops[index].op_kwargs if where == "op" else ops[index].input_kwargs
        target[key] = self.rng.choice(values)
        return ops

    def delete_insert(self, ops: list[Op]) -> list[Op] | None:
        ops = self.delete(ops)
        return None if ops is None else self.insert(ops)

    def swap(self, ops: list[Op]) -> list[Op] | None:
        if len(ops) < 2:
            return None
        i, j = self.rng.sample(range(len(ops)), 2)
        ops[i], ops[j] = ops[j], ops[i]
        return ops

    def randomize(self, ops: list[Op]) -> list[Op] | None:
        max_len = self.num_ops + self.max_delta if self.max_delta > 0 else self.max_len
        min_len = (max(0, self.num_ops - self.min_delta) if self.min_delta > 0
                   else self.min_len)
        if max_len < 0:
            max_len = self.num_ops + 2
        gen = lambda: op_enumerator("", self.kwarg_defaults, full=True, op_types=self.op_types,
                                    space=self.space)
        return next(random_sequence_generator(gen, max_len, self.rng, min_len), None)

    def synthesize(self) -> list[SubgraphModel]:
        ops = [copy.deepcopy(node.op) for node in self.subgraphs_and_props[0][0].subgraph]
        edits: list[Callable[[list[Op]], list[Op] | None]] = [
            self.delete, self.insert, self.mutate_field, self.delete_insert, self.swap]
        if self.use_automl_zero:
            edits.append(self.randomize)
        self.rng.shuffle(edits)
        for edit in edits:
            result = edit([copy.deepcopy(op) for op in ops])
            if result is not None:
                break
        else:
            raise SynthesisError("primer synthesis failed: no edit applies to the chain")
        if not result:
            result = [new_op("identity", OpType.IDENTITY, ["inputs"])]
        for op in result:
            op.name = f"{self.prefix}{op.type.name.lower()}"
        spec = self.make_subgraph_spec(result, adjust_features=True)
        return self.make_subgraph_models(spec)
