"""Synthesis with the op types added for imported models: the new activations come where a
search space allows them (by default where the replaced ops had one) with the kwargs the
replaced ops used; CONCAT is never built by a chain but kept as a node by graph synthesis."""

import random

import jax
import jax.numpy as jnp
import pytest

from nas.graph import Model, OpType, new_graph, new_op
from nas.graph.subgraph import SubgraphModel, replace_subgraph
from nas.mutation.random_subgraph import exported_spec
from nas.properties.depth import DepthProperty
from nas.properties.shape import ShapeProperty
from nas.synthesis.graph import GraphSynthesizer, decompose
from nas.synthesis.progressive import ProgressiveSequentialSynthesizer
from nas.synthesis.search_space import (
    INHERITED_KWARG_TYPES,
    KWARG_FREE_TYPES,
    PARAMETERIZED_TYPES,
    SKIPPED_TYPES,
    SearchSpace,
    kwarg_defaults,
    op_enumerator,
)
from tests.synthesis.imported_ops import NEW, classifier


def test_reference_vocabulary_has_no_new_activation():
    assert not NEW & {op.type for op in op_enumerator("", {}, full=False)}
    assert OpType.CONCAT not in {op.type for op in op_enumerator("", {}, full=True)}


def test_extra_activations_only_where_the_replaced_ops_had_one_by_default():
    space = SearchSpace()
    assert not NEW & set(space.allowed_types([]))
    replaced = [new_op("a", OpType.HARD_SWISH, ["x"]), new_op("b", OpType.ELU, ["a"])]
    assert set(space.allowed_types(replaced)) & NEW == {OpType.HARD_SWISH, OpType.ELU}
    assert NEW <= set(SearchSpace(extra_activations=True).allowed_types([]))
    named = SearchSpace(op_types=["CONV", "TANH"]).allowed_types([])
    assert named == (OpType.CONV, OpType.TANH)
    with pytest.raises(ValueError, match="search_space.extra_activations: expected True"):
        SearchSpace.from_dict({"extra_activations": "yes"})


def test_concat_is_never_synthesized():
    with pytest.raises(ValueError, match="'CONCAT' is never synthesized"):
        SearchSpace(op_types=["CONCAT"])
    assert OpType.CONCAT not in SearchSpace(inherit_only=[]).allowed_types([])


def test_activations_keep_the_kwargs_the_replaced_ops_used():
    replaced = classifier().ops
    types = tuple(NEW | {OpType.GELU})
    ops = list(op_enumerator("", kwarg_defaults(replaced), full=False, op_types=types))
    kwargs = {op.type: op.input_kwargs for op in ops}
    assert kwargs[OpType.LEAKY_RELU] == {"negative_slope": 0.1}
    assert kwargs[OpType.ELU] == {"alpha": 0.5}
    assert kwargs[OpType.GELU] == {"approximate": False}
    assert kwargs[OpType.RELU6] == kwargs[OpType.TANH] == {}
    bare = {op.type: op.input_kwargs for op in op_enumerator("", {}, full=False,
                                                             op_types=types)}
    assert all(v == {} for v in bare.values()) and set(bare) == set(types)
    for op in ops:  # every enumerated op is a valid op
        new_graph(["inputs"], [op.name], [op])


def test_graph_synthesis_keeps_the_concat_and_rebuilds_its_branches():
    graph = classifier()
    names = ["b1/conv", "b1/relu6", "b2/conv", "b2/lrelu", "cat"]
    spec = exported_spec(graph, [graph.op(n) for n in names])
    graph = replace_subgraph(graph, spec)
    inputs = {"input": jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)}
    model = SubgraphModel(graph, {}, None, inputs, spec)
    props = [ShapeProperty(), DepthProperty()]
    contexts = [(model, [p.infer(model) for p in props])]
    nodes, edges = decompose(model.subgraph)
    assert [n.op.type for n in nodes] == [OpType.CONCAT]
    assert sum(bool(e.ops) for e in edges) == 2
    rng = random.Random(0)
    space = SearchSpace(extra_activations=True)

    def ctor(ctx):
        return ProgressiveSequentialSynthesizer(ctx, 0, rng=rng, max_len=3, space=space)

    synth = GraphSynthesizer(contexts, 0, ctor, rng=rng, p=0.0, max_attempts=6)
    (new,) = synth.synthesize()
    assert synth.verify([new])
    cats = [op for op in new.graph.ops if op.type is OpType.CONCAT]
    assert len(cats) == 1 and len(cats[0].input_names) == 2
    x = jnp.ones((2, 32, 32, 3))
    variables = Model(new.graph).init(jax.random.PRNGKey(0), x)
    assert Model(new.graph).apply(variables, x).shape == (2, 10)


def test_every_op_type_is_built_by_one_rule_or_skipped_with_a_reason():
    rules = [SKIPPED_TYPES, KWARG_FREE_TYPES, set(INHERITED_KWARG_TYPES),
             set(PARAMETERIZED_TYPES)]
    for op_type in OpType:
        assert sum(op_type in rule for rule in rules) == 1, op_type
