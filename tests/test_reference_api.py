"""The reference's (alphaNAS) public names, called as its users call them.

Users arrive with code written against the reference: every class, method, argument and
return type listed here (at the module paths where the reference's users import it) must
exist AND do what the reference documents. Where we have a clearer name, the reference's
name is a thin alias of it; the tests check both give the same result.

Not kept (reference interpreter internals that this design replaced: there is no Model
subclass per property, shapes and pairings flow op by op from per-op caches):
`ShapeModel`, `PairingModel`, `OpPairings`, `GraphPairings`, `AbstractGraphProperty`,
`fingerprint.get_full_kwargs`, `synthesis.graph.SynthesisNode`, and the zoo's internal
helpers `resnet_layer`, `mbconv_layer`, `encoder_block`, `encoder`. Known differences:
`tensor_shapes.GraphShapes` is our all-tensor shape table, not the reference's
(input_shapes, output_shapes) pair; `fingerprint_graph` returns a stable hex digest, not
a per-process int (the reference's bug 10.1.12); `ShapeProperty`/`LinopProperty.infer` take
`abstract` as their second positional argument (keywords match the reference, except that
`LinopProperty.infer` has no `max_size`/`intermediates`).
"""

import inspect
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Graph, Model, Op, OpType, new_graph, new_op, subgraph, validate
from nas.graph.block import Block
from nas.graph.ops import canonicalize_tensor_name
from nas.graph.subgraph import SubgraphModel, SubgraphNode, inherit_params, replace_subgraph
from nas.mutation import AbstractMutator, ModelMutator, RandomMutator, RandomSequentialMutator
from nas.properties import depth, fingerprint, linear, shape
from nas.synthesis.enum_sequential import EnumerativeSequentialSynthesizer, sequence_generator
from nas.synthesis.graph import GraphSynthesizer
from nas.synthesis.progressive import Mode, ProgressiveSequentialSynthesizer
from nas.synthesis.random_enum_sequential import (
    RandomEnumerativeSequentialSynthesizer,
    num_in_base,
    random_sequence_generator,
)
from nas.train import Metrics, train_and_eval
from nas.zoo import cnn, efficientnet, resnetv1, vit

ONES = {"input": jnp.ones((1, 32, 32, 3))}


@pytest.fixture(scope="module")
def cifarnet():
    graph, constants, blocks = cnn.CifarNet()
    return graph, constants, blocks


def test_ir_names_and_arguments():
    assert Op.OpType is OpType  # the reference's nested enum
    assert [t.value for t in list(OpType)[:5]] == [0, 1, 2, 3, 4]
    assert canonicalize_tensor_name("conv") == "conv:0"
    assert canonicalize_tensor_name("conv:1") == "conv:1"
    op = new_op(
        op_name="dense",
        op_type=OpType.DENSE,
        input_names=["input"],
        input_kwargs=None,
        op_kwargs={"features": 4},
        num_outputs=1,
    )
    assert isinstance(op, Op) and op.input_names == ["input:0"] and op.type is OpType.DENSE
    graph = new_graph(input_names=["input"], output_names=["dense"], ops=[op])
    assert isinstance(graph, Graph) and validate(graph) is graph
    with pytest.raises(ValueError, match="dense2"):
        new_graph(["input"], ["dense2"], [op])
    with pytest.raises(ValueError, match="reserved"):
        new_op("a:b", OpType.RELU, ["input"])
    # Tensor in, tensor out for a one-input, one-output graph; a dict of outputs otherwise.
    model = Model(graph, constants=None)
    variables = model.init(jax.random.PRNGKey(0), jnp.ones((2, 3)))
    assert model.apply(variables, jnp.ones((2, 3))).shape == (2, 4)
    assert set(model.apply(variables, {"input": jnp.ones((2, 3))})) == {"dense"}


def test_subgraph_replace_model_and_inheritance(cifarnet):
    graph, constants, _ = cifarnet
    conv = new_op(
        "conv_layer1/conv/1",
        OpType.CONV,
        ["conv_layer0/avg_pool"],
        op_kwargs={"features": 64, "kernel_size": [1, 1]},
    )
    gelu = new_op("conv_layer1/gelu/1", OpType.GELU, ["conv_layer1/conv/1"])
    spec = [SubgraphNode(op=conv), SubgraphNode(op=gelu, output_names=["conv_layer1/relu"])]
    new = replace_subgraph(graph=graph, subgraph=spec)
    assert subgraph.replace_subgraph is replace_subgraph
    names = [op.name for op in new.ops]
    assert "conv_layer1/conv" not in names and "conv_layer1/relu" not in names
    sm = SubgraphModel(new, constants, None, ONES, spec)
    assert sm.input_names == ["conv_layer0/avg_pool:0"]
    assert sm.output_names == ["conv_layer1/gelu/1:0"]
    x = jnp.ones((1, 32, 32, 3))
    key = jax.random.PRNGKey(0)
    old_params = jax.eval_shape(Model(graph, constants).init, key, x)["params"]
    new_params = jax.eval_shape(Model(new, constants).init, key, x)["params"]
    inherited, trainable = inherit_params(new_params=new_params, old_params=old_params)
    assert {"conv_layer0/conv", "fc/logits"} <= set(inherited)
    assert set(trainable) >= {"conv_layer1/conv/1"}
    assert len(new_params) == len(inherited) + len(trainable)


def test_block_instantiate():
    base = new_graph(["x"], ["relu"], [new_op("relu", OpType.RELU, ["x"])])
    block = Block("act", base)
    instance = block.instantiate(input_names=["input"], instance_id=3, constants=None)
    assert isinstance(instance, Block) and instance.name == "act"
    assert [op.name for op in instance.graph.ops] == ["act3/relu"]
    assert instance.graph.ops[0].input_names == ["input:0"]


def test_properties_protocol(cifarnet):
    graph, constants, _ = cifarnet
    sm = SubgraphModel(graph, constants, None, {"input": jnp.ones((5, 32, 32, 3))})
    shapes = shape.ShapeProperty(p=0.0, safety_only=False, input_values=None).infer(
        subgraph_model=sm, abstract=True
    )
    assert shapes.input_shapes == {"input": (5, 32, 32, 3)}
    assert shapes.output_shapes == {"fc/logits": (5, 10)}
    prop = depth.DepthProperty(depth_map=None, p=1.0, delta_max=5, safety_only=False)
    inferred = prop.infer(sm)
    assert inferred.depth_map == {"input:0": {"fc/logits:0": 7}}
    mutated = inferred.mutate()
    assert isinstance(mutated, depth.DepthProperty)
    assert mutated.depth_map["input:0"]["fc/logits:0"] in (2, 12)
    assert isinstance(inferred.distance_from(inferred), float)
    assert inferred.is_satisfied_by(inferred) is True
    assert inferred.verify(sm, abstract=True) is True
    assert depth.is_nonlinear(new_op("r", OpType.RELU, ["x"])) is True
    assert depth.is_nonlinear(new_op("c", OpType.SCALAR_MUL, ["x"])) is False
    assert depth.is_nonlinear(new_op("i", OpType.IDENTITY, ["x"])) is None


def test_linear_property_and_pairing():
    op = new_op("output", OpType.SOFTMAX, ["input"], input_kwargs={"axis": -1})
    sm = SubgraphModel(
        new_graph(["input"], ["output"], [op]), {}, None, {"input": jnp.ones((5, 5, 5))}
    )
    prop = linear.LinopProperty(pairings=None, p=0.0, safety_only=False).infer(sm)
    pairing = prop.pairings["output"]["input"]
    assert isinstance(pairing, linear.Pairing)
    assert (pairing.in_dims, pairing.out_dims) == (3, 3)
    mapping = linear.Pairing.Mapping
    assert mapping.NONE < mapping.ONE_TO_ONE < mapping.MANY_TO_ONE < mapping.ALL_TO_ONE
    assert pairing[2, 0] == mapping.ALL_TO_ONE and pairing[0, 0] == mapping.ONE_TO_ONE
    empty = linear.Pairing(3, 3)  # the reference's Pairing(in_dims, out_dims)
    assert (empty.in_dims, empty.out_dims) == (3, 3) and not empty.any()
    empty[1, 2] = mapping.MANY_TO_ONE
    assert empty.join(pairing)[1, 2] == mapping.MANY_TO_ONE
    assert empty.join(pairing)[2, 0] == mapping.ALL_TO_ONE
    with pytest.raises(ValueError, match="shapes"):
        empty.join(linear.Pairing(2, 3))
    with pytest.raises(ValueError, match="dim counts"):
        linear.Pairing(3, -1)


def test_fingerprint_graph_reference_arguments(cifarnet):
    graph, constants, _ = cifarnet
    first = fingerprint.fingerprint_graph(graph, constants, ONES, None)
    again = fingerprint.fingerprint_graph(
        graph=graph, constants=constants, input_values=ONES, state={"params": {}}
    )
    assert first == again
    other, other_constants, _ = cnn.CifarNet(num_classes=5)
    assert fingerprint.fingerprint_graph(other, other_constants, ONES) != first


def test_enumeration_helpers_where_the_reference_has_them():
    cls = EnumerativeSequentialSynthesizer
    combos = cls.kwargs_for_op_to_product(
        {"a": {1, 2, 3}, "b": {1, 2}, "c": {4, 5}}, {"d": {1}, "e": {1, 2}, "f": {2, 3}}
    )
    assert len(combos) == 48
    assert ({"a": 2, "b": 2, "c": 5}, {"d": 1, "e": 2, "f": 3}) in combos
    seqs = list(sequence_generator(lambda: iter([0, 1, 2]), max_len=3))
    assert len(seqs) == 39 and seqs[:3] == [[0], [1], [2]]
    assert seqs[3 + 3 * 1 + 2] == [1, 2] and seqs[12 + 9 * 2 + 3 * 0 + 1] == [2, 0, 1]
    assert num_in_base(14, 2) == [1, 1, 1, 0] and num_in_base(0, 7) == [0]
    ops = list(
        cls.op_enumerator(
            prefix=None, kwarg_defaults=None, full=False, op_types=[OpType.RELU, OpType.SOFTMAX]
        )
    )
    assert [(op.name, op.type) for op in ops] == [
        ("relu", OpType.RELU),
        ("softmax", OpType.SOFTMAX),
    ]
    op_kw, in_kw = cls.all_kwargs_for_op_type(kwarg_defaults={}, full=False, op_type=OpType.DENSE)
    assert in_kw == {} and {"S:-1", "S:-1*2", "S:-1%4"} <= op_kw["features"]
    assert cls.all_kwargs_for_op_type({}, False, OpType.RELU) == ({}, {})
    assert {1, 3} <= cls.make_default_kwargs(kwarg_defaults=None, full=False)["kernel_size"]
    rng = random.Random(0)
    shuffled = list(random_sequence_generator(lambda: iter("ab"), 2, rng, min_len=2))
    assert sorted(map(tuple, shuffled)) == [tuple(p) for p in ("aa", "ab", "ba", "bb")]
    assert [m.value for m in Mode] == [1, 2, 3] and Mode["WEIGHTED"] is Mode.WEIGHTED


def test_synthesizer_construction_and_distance(cifarnet):
    graph, constants, _ = cifarnet
    conv = graph.ops[4]  # conv_layer1/conv, 64 -> 128 channels
    spec = [SubgraphNode(conv, output_names=[conv.output_names[0]])]
    sm = SubgraphModel(replace_subgraph(graph, spec), constants, None, ONES, spec)
    props = [shape.ShapeProperty().infer(sm), depth.DepthProperty().infer(sm)]
    for cls in (
        EnumerativeSequentialSynthesizer,
        RandomEnumerativeSequentialSynthesizer,
        ProgressiveSequentialSynthesizer,
    ):
        synth = cls([(sm, props)], 0, abstract=True, max_len=3)
        assert (synth.output_features_mul, synth.output_features_div) == (2, 1)
        assert synth.get_subg_distance([sm]) == synth.subg_distance([sm]) == 0.0
    graph_synth = GraphSynthesizer([(sm, props)], 0, ProgressiveSequentialSynthesizer, True, 0.5)
    assert graph_synth.p == 0.5  # the reference's fifth positional argument


def test_mutator_mutate_is_select_targets(cifarnet):
    graph, constants, _ = cifarnet
    contexts = [(constants, None, ONES)]
    for cls, kwargs in ((RandomSequentialMutator, {"max_len": 3}), (RandomMutator, {})):
        props = [shape.ShapeProperty(), depth.DepthProperty(p=0.5)]
        via_reference = cls(props, 0.5, rng=random.Random(3), **kwargs)
        via_ours = cls(props, 0.5, rng=random.Random(3), **kwargs)
        assert isinstance(via_reference, AbstractMutator)
        for _ in range(3):
            out = via_reference.mutate(graph, contexts, abstract=True)
            ours = via_ours.select_targets(graph, contexts, abstract=True)
            assert len(out) == 1
            model, props_out = out[0]
            assert isinstance(model, SubgraphModel) and model.state is None
            assert [type(p) for p in props_out] == [shape.ShapeProperty, depth.DepthProperty]
            assert model.subgraph == ours[0][0].subgraph and props_out == ours[0][1]


def test_model_mutator_reference_call(cifarnet):
    graph, constants, blocks = cifarnet
    mutator = ModelMutator({"linear_p": None}, random.Random(0))
    new_graph_, new_constants, new_blocks, sm = mutator.mutate(
        graph, constants, blocks, cnn.CifarNet, child_id=7
    )
    assert isinstance(new_graph_, Graph) and new_graph_ != graph
    assert new_constants == constants
    assert [b.name for b in new_blocks] == ["model7"] and new_blocks[0].graph == new_graph_
    assert isinstance(sm, SubgraphModel) and sm.subgraph
    assert all(node.op.name.startswith("gen7/") for node in sm.subgraph)
    failing = ModelMutator({"linear_p": None, "max_steps": 1}, random.Random(0))
    assert failing.mutate(graph, constants, blocks, cnn.CifarNet, 8) == (None,) * 4


def test_model_mutator_mutate_block_is_redefine_block():
    blocks = list(cnn.CifarNet()[2])
    block = blocks[0]
    spec = [SubgraphNode(new_op("relu", OpType.GELU, ["conv"]), ["relu"])]
    ours = ModelMutator({"block_mutate_prob": 0.0}, random.Random(1)).redefine_block(
        block, blocks, spec, 4
    )
    reference = ModelMutator({"block_mutate_prob": 0.0}, random.Random(1)).mutate_block(
        block_to_mutate=block, parent_blocks=blocks, subgraph=spec, child_id=4
    )
    assert [b.name for b in reference] == [b.name for b in ours]
    assert "conv_layer/trial4" in [b.name for b in reference]
    renamed = next(b for b in reference if b.name == "conv_layer/trial4")
    assert OpType.GELU in [op.type for op in renamed.base_graph.ops]


def test_training_entry_point_signature_and_metrics():
    # Training itself is covered in tests/train; here the reference's call shape.
    params = list(inspect.signature(train_and_eval).parameters.values())
    assert [p.name for p in params[:3]] == ["config", "eval_perf", "callback"]
    assert params[1].default is True and params[2].default is None
    metrics = Metrics(
        loss=0.5, acc=0.9, num_params=3, flops=4, im_sec_core_train=1.0, im_sec_core_infer=2.0
    )
    assert (metrics.acc, metrics.num_params) == (0.9, 3)


def test_zoo_builders_return_graph_constants_blocks():
    graph, constants, blocks = cnn.CifarNet()
    assert len(graph.ops) == 11 and constants == {"out_features": 256, "num_classes": 10}
    assert [b.name for b in blocks] == ["conv_layer", "conv_layer"]
    graph, constants, _ = resnetv1.ResNet18(num_classes=10, input_resolution="small")
    assert len(graph.ops) == 69 and constants == {}
    config = efficientnet.MODEL_CONFIGS["b0"]
    assert efficientnet.efficietnet is efficientnet.efficientnet
    assert len(efficientnet.create_efficietnet_blocks(config)) == 16
    graph, _, _ = efficientnet.EfficientNetB0(num_classes=10)
    assert graph.output_names == ["head/out"]
    graph, _, _ = vit.ViT_Ti16(num_classes=10, image_size=32)
    assert graph.output_names == ["head"]
    np.testing.assert_equal(len(vit.ViT_S16(num_classes=10, image_size=32)[2]), 24)
