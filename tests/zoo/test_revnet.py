"""Reversible zoo models and the IR marking they carry."""

from __future__ import annotations

import copy

import pytest

from nas.graph import reversible
from nas.graph.ops import OpType, new_op
from nas.graph.serialize import graph_to_json, load
from nas.zoo import builder, revnet


@pytest.mark.parametrize("fn", [revnet.RevNet, revnet.RevTransformer])
def test_marking_round_trips_through_json(fn):
    graph, constants, blocks = fn(num_classes=10, depth=2)
    g2, c2 = load(graph_to_json(graph, constants))
    spec = reversible.from_graph(g2, c2)
    assert spec.to_graph() == (graph, constants)
    assert reversible.ReversibleSpec.from_json(spec.to_json()).to_graph()[0] == graph
    kinds = [layer.kind for layer in spec.layers()]
    assert kinds.count("coupling") == 2 and kinds[-1] == "head"
    rebuilt = fn(num_classes=10, depth=2, blocks=blocks)
    assert rebuilt[0] == graph


def test_mutated_f_block_keeps_reversibility():
    graph, constants, blocks = revnet.RevNet(depth=2, num_stages=1)
    f = blocks[1]
    base = copy.deepcopy(f.base_graph)
    base.ops.insert(2, new_op("relu2", OpType.RELU, ["relu"]))
    base.ops[3].input_names = ["relu2:0"]
    blocks[1] = type(f)(f.name, base)
    new_graph, new_consts, _ = revnet.RevNet(depth=2, num_stages=1, blocks=blocks)
    assert any(op.name == "block0/rev0/f/relu2" for op in new_graph.ops)
    spec = reversible.from_graph(new_graph, new_consts)
    assert len(spec.blocks[0].couplings[0].f.base_graph.ops) == 4


def test_edited_graph_without_marking_is_rejected():
    graph, constants, _ = revnet.RevNet(depth=2)
    graph.ops[0].op_kwargs["features"] = 3
    with pytest.raises(ValueError, match="edited without its reversible marking"):
        reversible.from_graph(graph, constants)


def test_spec_checks_arity_and_depth_args():
    graph, constants, blocks = revnet.RevNet(depth=2)
    with pytest.raises(ValueError, match="needs 7 blocks"):
        revnet.RevNet(depth=2, blocks=blocks[:-1])
    with pytest.raises(ValueError, match="must be positive"):
        revnet.RevNet(depth=0)
    stem_one_output = revnet.residual_fn_block("stem")
    with pytest.raises(ValueError, match="has couplings but the stream has 1"):
        reversible.ReversibleSpec([reversible.RevBlock(stem_one_output, [
            reversible.Coupling(blocks[1], blocks[2])])], blocks[-1])


def test_zoo_builder_names_revnet():
    graph, constants, _ = builder("revnet", num_classes=5, image_size=32)()
    assert reversible.is_reversible(constants)
    assert constants["head/num_classes"] == 5


@pytest.mark.parametrize("head, pool_type, features", [("mean", OpType.MEAN, 32),
                                                      ("flatten", OpType.FLATTEN, 8 * 8 * 32)])
def test_head_pools_or_flattens_and_stays_reversible(head, pool_type, features):
    import jax
    import jax.numpy as jnp

    from nas.graph import Model

    graph, constants, _ = revnet.RevNet(num_classes=10, depth=2, width=16, head=head)
    assert reversible.from_graph(graph, constants) is not None
    assert next(op for op in graph.ops if op.name == "head/pool").type is pool_type
    shapes = jax.eval_shape(lambda: Model(graph, constants).init(
        jax.random.PRNGKey(0), jnp.ones((1, 16, 16, 3))))
    assert shapes["params"]["head/logits"]["kernel"].shape == (features, 10)
    with pytest.raises(ValueError, match="head 'max': expected one of mean, flatten"):
        revnet.RevNet(head="max")


@pytest.mark.parametrize("kwargs, name", [
    ({"depth": 2.5}, "depth"), ({"width": 0}, "width"), ({"num_classes": 0}, "num_classes"),
])
def test_revnet_sizes_are_positive_ints(kwargs, name):
    with pytest.raises(ValueError, match=f"{name} must be positive"):
        revnet.RevNet(**kwargs)


@pytest.mark.parametrize("kwargs, name", [
    ({"patch_size": 0}, "patch_size"), ({"num_heads": 0}, "num_heads"),
])
def test_rev_transformer_sizes_are_positive_ints(kwargs, name):
    with pytest.raises(ValueError, match=f"{name} must be positive"):
        revnet.RevTransformer(**kwargs)
