"""Synthesizers on CifarNet and ResNet18 subgraphs: results satisfy the properties."""

import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Model
from nas.graph.subgraph import SubgraphModel, SubgraphNode, replace_subgraph
from nas.mutation.random_subgraph import exported_spec
from nas.properties.depth import DepthProperty
from nas.properties.fingerprint import fingerprint_graph
from nas.properties.linear import LinopProperty
from nas.properties.shape import ShapeProperty
from nas.synthesis.enum_sequential import EnumerativeSequentialSynthesizer
from nas.synthesis.graph import GraphSynthesizer, decompose
from nas.synthesis.primer import PrimerSequentialSynthesizer
from nas.synthesis.progressive import ProgressiveSequentialSynthesizer
from nas.synthesis.random_enum_sequential import RandomEnumerativeSequentialSynthesizer
from nas.synthesis.variables import build_variables
from nas.zoo import cnn, resnetv1

X = {"input": jnp.ones((5, 32, 32, 3))}


def _cifar_context(end, props):
    graph, constants, _ = cnn.CifarNet()
    ops = graph.ops[4:end]
    consumer = graph.ops[end]
    spec = [SubgraphNode(op, []) for op in ops[:-1]]
    spec.append(SubgraphNode(ops[-1], [consumer.input_names[0]]))
    graph = replace_subgraph(graph, spec)
    model = SubgraphModel(graph, constants, None, X, spec)
    return graph, constants, [(model, [p.infer(model) for p in props])]


CASES = [
    (5, [ShapeProperty(), DepthProperty()]),
    (6, [ShapeProperty(), DepthProperty(), LinopProperty()]),
    (7, [ShapeProperty(), DepthProperty()]),
]


@pytest.mark.parametrize("end, props", CASES)
@pytest.mark.parametrize("cls, kwargs", [
    (EnumerativeSequentialSynthesizer, {"max_len": 3}),
    (RandomEnumerativeSequentialSynthesizer, {"max_len": 3}),
    (ProgressiveSequentialSynthesizer, {"max_len": 3, "mode": "weighted"}),
])
def test_sequential_synthesis_satisfies_properties(end, props, cls, kwargs):
    graph, constants, contexts = _cifar_context(end, props)
    synth = cls(contexts, 0, rng=random.Random(end), **kwargs)
    (model,) = synth.synthesize()
    assert synth.verify([model])
    assert all(n.op.name.startswith("gen0/") for n in model.subgraph)
    old = build_variables(graph, constants, X, None).variables
    new = build_variables(model.graph, constants, X, old, seed=1).variables
    y_old = Model(graph, constants).apply(old, X["input"])
    y_new = Model(model.graph, constants).apply(new, X["input"])
    assert y_new.shape == y_old.shape == (5, 10)
    assert not np.allclose(y_new, y_old)


def test_concrete_mode_keeps_the_params_level_and_inherits():
    graph, constants, contexts = _cifar_context(6, [ShapeProperty(), DepthProperty()])
    state = build_variables(graph, constants, X, None).variables
    model, props = contexts[0]
    contexts = [(SubgraphModel(graph, constants, state, X, model.subgraph), props)]
    synth = EnumerativeSequentialSynthesizer(contexts, 0, abstract=False, max_len=2)
    (new,) = synth.synthesize()
    assert set(new.state) == {"params"}
    assert new.state["params"]["proj"] is state["params"]["proj"]


def test_primer_makes_one_edit():
    _, _, contexts = _cifar_context(7, [ShapeProperty()])
    (model,) = PrimerSequentialSynthesizer(contexts, 3, rng=random.Random(1)).synthesize()
    assert all(n.op.name.startswith("gen3/") for n in model.subgraph)


def _resnet_context(indices, linear):
    graph, constants, _ = resnetv1.ResNet18(num_classes=10, input_resolution="small")
    spec = exported_spec(graph, [graph.ops[i] for i in indices])
    graph = replace_subgraph(graph, spec)
    inputs = {"input": jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)}
    model = SubgraphModel(graph, constants, None, inputs, spec)
    props = [ShapeProperty(), DepthProperty()] + ([LinopProperty()] if linear else [])
    return graph, constants, inputs, [(model, [p.infer(model) for p in props])]


@pytest.mark.parametrize("indices, linear", [([4, 9, 10], True),
                                             ([3, 4, 8, 9, 10, 11], False)])
def test_graph_synthesizer_multi_input(indices, linear):
    graph, constants, inputs, contexts = _resnet_context(indices, linear)
    nodes, edges = decompose(contexts[0][0].subgraph)
    assert any(n.op.type.name == "ADD" for n in nodes) and any(e.ops for e in edges)
    rng = random.Random(0)

    def ctor(ctx):
        return ProgressiveSequentialSynthesizer(ctx, 0, rng=rng, max_len=3)

    synth = GraphSynthesizer(contexts, 0, ctor, rng=rng, p=0.0, max_attempts=6)
    (model,) = synth.synthesize()
    assert synth.verify([model])
    assert fingerprint_graph(model.graph, constants, inputs) != fingerprint_graph(
        graph, constants, inputs)
