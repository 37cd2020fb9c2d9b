"""The op search space and sequence enumerators."""

import random

from nas.graph import OpType
from nas.synthesis.search_space import (
    combine_factor,
    kwargs_for_op_to_product,
    num_in_base,
    op_enumerator,
    random_sequence_generator,
    sequence_generator,
)


def test_sequence_generator_order():
    seqs = list(sequence_generator(lambda: [0, 1, 2], max_len=3))
    assert len(seqs) == 39
    assert seqs[:3] == [[0], [1], [2]]
    for a in range(3):
        for b in range(3):
            assert seqs[3 + 3 * a + b] == [a, b]
            for c in range(3):
                assert seqs[12 + 9 * a + 3 * b + c] == [a, b, c]
    assert [len(s) for s in sequence_generator(lambda: [0, 1], 3, min_len=2)] == [2] * 4 + [3] * 8


def test_kwargs_product():
    op_kw = {"a": {1, 2, 3}, "b": {1, 2}, "c": {4, 5}}
    in_kw = {"d": {1}, "e": {1, 2}, "f": {2, 3}}
    combos = kwargs_for_op_to_product(op_kw, in_kw)
    assert len(combos) == 48
    assert ({"a": 2, "b": 2, "c": 5}, {"d": 1, "e": 2, "f": 3}) in combos


def test_num_in_base():
    assert num_in_base(14, 2) == [1, 1, 1, 0]
    assert num_in_base(0, 5) == [0]


def test_random_sequence_generator_is_a_seeded_permutation():
    seqs = list(random_sequence_generator(lambda: [0, 1, 2], 2, random.Random(0)))
    assert len(seqs) == 12 and sorted(map(tuple, seqs[:3])) == [(0,), (1,), (2,)]
    assert sorted(map(tuple, seqs[3:])) == [(a, b) for a in range(3) for b in range(3)]
    again = list(random_sequence_generator(lambda: [0, 1, 2], 2, random.Random(0)))
    assert seqs == again
    assert list(random_sequence_generator(lambda: [0, 1], 0, random.Random(0))) == []


def test_combine_factor_reduces():
    assert combine_factor("S:-1*2", "%2") == "S:-1"
    assert combine_factor("S:-1%2", "%2") == "S:-1%4"
    assert combine_factor("S:-1*4", "%2") == "S:-1*2"
    assert combine_factor(64, "%4") == 16
    assert combine_factor(6, "%4") is None


def test_op_enumerator_order_and_types():
    ops = list(op_enumerator("gen0/", {}, full=False))
    types = [op.type for op in ops]
    assert types[0] is OpType.DENSE and OpType.MEAN not in types
    order = [OpType.DENSE, OpType.CONV, OpType.SCALAR_MUL, OpType.RELU, OpType.GELU,
             OpType.SWISH, OpType.SIGMOID, OpType.SOFTMAX, OpType.BATCH_NORM,
             OpType.LAYER_NORM, OpType.DROPOUT, OpType.AVG_POOL, OpType.MAX_POOL]
    assert list(dict.fromkeys(types)) == order
    assert all(op.name.startswith("gen0/") and op.input_names == ["inputs:0"] for op in ops)
