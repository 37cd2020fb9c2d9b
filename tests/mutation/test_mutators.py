"""Subgraph selection: random connected subgraphs and random sequential chains."""

import random

import jax.numpy as jnp
import pytest

from nas.mutation import ModelMutator, RandomMutator, RandomSequentialMutator
from nas.mutation.sequential import check_sequential
from nas.properties.depth import DepthProperty
from nas.properties.shape import ShapeProperty
from nas.zoo import cnn, resnetv1

CONTEXT = [({"out_features": 256, "num_classes": 10}, None, {"input": jnp.ones((1, 32, 32, 3))})]


def test_random_sequential_mutator_returns_one_context_per_instance():
    graph, constants, _ = cnn.CifarNet()
    mutator = RandomSequentialMutator([ShapeProperty(), DepthProperty(p=0.5)], p=0.5,
                                      max_len=3, rng=random.Random(0))
    for _ in range(20):
        out = mutator.select_targets(
            graph, [(constants, None, {"input": jnp.ones((1, 32, 32, 3))})])
        assert len(out) == 1
        model, props = out[0]
        check_sequential(model.subgraph)
        assert 1 <= len(model.subgraph) <= 3 and len(model.input_names) == 1
        assert len(props) == 2


def test_random_mutator_exports_what_is_used_outside():
    graph, _, _ = resnetv1.ResNet18(num_classes=10, input_resolution="small")
    mutator = RandomMutator([ShapeProperty()], p=1.0, max_len=5, rng=random.Random(1))
    for _ in range(10):
        spec = mutator.select_subgraph(graph)
        assert 1 <= len(spec) <= 5
        names = {n.op.name for n in spec}
        inside = {t for n in spec for t in n.op.output_names}
        outside = {t for op in graph.ops if op.name not in names for t in op.input_names}
        exported = {t for n in spec for t in n.output_names if t is not None}
        assert exported == inside & (outside | {"fc/dense:0"})


def test_mutated_context_and_shape_only_contexts():
    graph, constants, _ = cnn.CifarNet()
    ctx = [(constants, None, {"input": jnp.ones((1, 32, 32, 3))})] * 3
    out = RandomSequentialMutator([ShapeProperty(), DepthProperty(p=1.0)], p=0.5, max_len=2,
                                  rng=random.Random(2)).select_targets(graph, ctx)
    assert sorted(len(props) for _, props in out) == [1, 1, 2]


@pytest.mark.parametrize("kwargs, message", [
    ({"p": 1.5}, "p must be"), ({"p": 0.5, "max_len": 2, "max_perc": 0.5}, "at most one"),
])
def test_mutator_argument_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RandomMutator([ShapeProperty()], **kwargs)


def test_redefine_block_renames_and_shares_the_new_definition():
    graph, constants, blocks = cnn.CifarNet()
    mutator = ModelMutator({"block_mutate_prob": 1.0}, random.Random(0))
    spec = [n for n in []]  # an empty spec leaves the definition as is
    new_blocks = mutator.redefine_block(blocks[0], blocks, spec, child_id=7)
    assert [b.name for b in new_blocks] == ["conv_layer/trial7"] * 2
    again = mutator.redefine_block(new_blocks[0], new_blocks, spec, child_id=9)
    assert again[0].name == "conv_layer/trial9"
