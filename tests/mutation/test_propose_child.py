"""propose_child on zoo models: a valid child or a clear reason, deterministic per seed."""

import json

import jax
import numpy as np
import pytest

from nas.graph.block import Block
from nas.mutation import Child, MutationConfig, NoChildFound, propose_child
from nas.zoo import builder, cnn, resnetv1, vit
from tests.mutation.helpers import check_child, parent_variables, same_child

FAST = {"linear_p": None}  # linear pairings compile per op kind


def _mutate_many(graph, constants, seeds, config, forward_every=1):
    variables = parent_variables(graph, constants)
    children, failures = 0, 0
    for i, seed in enumerate(seeds):
        try:
            child = propose_child(graph, constants, variables, seed=seed, config=config)
        except NoChildFound as e:
            assert "no child found" in str(e) and len(str(e)) > 40
            failures += 1
            continue
        assert isinstance(child, Child)
        check_child(child, graph, constants, variables, forward=i % forward_every == 0)
        children += 1
    return children, failures


@pytest.mark.slow
def test_cifarnet_many_seeds():
    graph, constants, _ = cnn.CifarNet()
    # seeds 0-9 (seed 10 synthesizes for 13 s alone: the slow suite's 20 seeds cover it)
    children, _ = _mutate_many(graph, constants, range(10), FAST, forward_every=3)
    assert children >= 8


@pytest.mark.slow  # cold linear pairings compile one Jacobian per op kind (~0.3 s each)
def test_cifarnet_with_linear_property():
    graph, constants, _ = cnn.CifarNet()
    children, _ = _mutate_many(graph, constants, [6, 8], {})
    assert children >= 1


def test_resnet18_seeds():
    graph, constants, _ = resnetv1.ResNet18(num_classes=10, input_resolution="small")
    children, _ = _mutate_many(graph, constants, range(5), FAST, forward_every=5)
    assert children >= 3


def test_small_vit_seeds():
    graph, constants, _ = vit.base_vit(16, 32, 2, 64, 2, image_size=32, num_classes=10)
    children, _ = _mutate_many(graph, constants, range(5), FAST, forward_every=2)
    assert children >= 3


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cnn", "resnet18", "ti/16"])
def test_zoo_many_seeds_full_properties(name):
    graph, constants, _ = builder(name, 10, 32)()
    children, _ = _mutate_many(graph, constants, range(20), {},
                               forward_every=4)
    assert children >= 10


def test_same_seed_same_child():
    graph, constants, _ = cnn.CifarNet()
    variables = parent_variables(graph, constants)
    a = propose_child(graph, constants, variables, seed=3, config=FAST)
    b = propose_child(graph, constants, variables, seed=3, config=FAST)
    assert same_child(a, b)
    assert a.spec_json() == b.spec_json()
    assert json.loads(json.dumps(a.spec_json())) == a.spec_json()
    c = propose_child(graph, constants, variables, seed=4, config=FAST)
    assert not same_child(a, c)


def test_sequential_mutator_and_other_synthesizers():
    graph, constants, _ = cnn.CifarNet()
    variables = parent_variables(graph, constants)
    for synthesizer in ("progressive", "enum", "random_enum", "primer"):
        config = {**FAST, "mutator": "random_sequential", "synthesizer": synthesizer}
        found = 0
        for seed in range(4):
            try:
                child = propose_child(graph, constants, variables, seed=seed, config=config)
            except NoChildFound:
                continue
            check_child(child, graph, constants, variables, forward=False)
            found += 1
            break  # one valid child per synthesizer is the claim
        assert found >= 1, synthesizer


def test_block_level_mutation():
    build = builder("cnn", 10, 32)
    graph, constants, blocks = build()
    variables = parent_variables(graph, constants)
    config = {**FAST, "mutate_by_block": True, "block_add_prob": 0.3, "block_delete_prob": 0.3}
    kinds = set()
    for seed in range(8):
        child = propose_child(graph, constants, variables, seed=seed, config=config,
                              blocks=blocks, builder=build)
        kinds.add(child.kind)
        assert child.blocks and all(isinstance(b, Block) for b in child.blocks)
        if child.kind == "block_mutate":
            assert any("/trial" in b.name for b in child.blocks)
        check_child(child, graph, constants, variables, forward=seed % 3 == 0)
    assert {"block_add", "block_delete", "block_mutate"} <= kinds


def test_a_redefined_block_keeps_the_weights_of_its_unchanged_ops():
    """A redefined block is renamed (`conv_layer/trial<id>`), and so are its instances' ops:
    each op its old definition also had takes the old instance's weights where the shapes
    agree. Blocks as a study stores them (definitions only) give the same child, synthesized
    for each instance's real input (not the model's)."""
    from nas.graph.serialize import blocks_from_list, blocks_to_list

    build = builder("cnn", 10, 32)
    graph, constants, blocks = build()
    variables = parent_variables(graph, constants)
    config = {**FAST, "mutate_by_block": True, "block_add_prob": 0.0, "block_delete_prob": 0.0,
              "block_mutate_prob": 1.0}
    stored = blocks_from_list(blocks_to_list(blocks))
    kept = 0
    for seed in range(6):  # seed 5 keeps the block's conv, 0-4 replace it
        child = propose_child(graph, constants, variables, seed=seed, config=config,
                              blocks=blocks, builder=build)
        again = propose_child(graph, constants, variables, seed=seed, config=config,
                              blocks=stored, builder=build)
        assert child.kind == again.kind == "block_mutate"
        assert child.graph_json() == again.graph_json()
        assert child.host_inputs["input"].shape in {(1, 32, 32, 32), (1, 16, 16, 64)}
        for mine, theirs in zip(child.blocks, blocks, strict=True):
            old_ops = {base.name: op.name for base, op in zip(
                theirs.base_graph.ops, theirs.graph.ops, strict=True)}
            for base, op in zip(mine.base_graph.ops, mine.graph.ops, strict=True):
                if op.name not in child.variables["params"] or base.name not in old_ops:
                    continue
                old = variables["params"][old_ops[base.name]]
                new = child.variables["params"][op.name]
                if jax.tree.map(np.shape, old) == jax.tree.map(np.shape, new):
                    assert op.name in child.inherited
                    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, old, new)))
                    kept += 1
    assert kept  # at least one op of a redefined block kept its weights


def test_no_child_found_is_a_value_error_with_a_reason():
    graph, constants, _ = cnn.CifarNet()
    config = {**FAST, "max_steps": 1}
    with pytest.raises(NoChildFound, match="no child found") as info:
        propose_child(graph, constants, None, seed=0, config=config)
    assert isinstance(info.value, ValueError)
    assert "budget of 1 steps" in str(info.value)
    assert "safety net" not in str(info.value)


def test_child_without_parent_variables_is_all_new():
    graph, constants, _ = cnn.CifarNet()
    child = propose_child(graph, constants, None, seed=2, config=FAST)
    assert not child.inherited and child.new == set(child.variables["params"])


@pytest.mark.parametrize("bad, field", [
    ({"max_len": -1}, "max_len"), ({"p": 2.0}, "p"), ({"input_shape": (32,)}, "input_shape"),
    ({"synthesizer": "magic"}, "synthesizer"), ({"colour": 1}, "colour"),
])
def test_config_errors(bad, field):
    with pytest.raises(ValueError, match=field):
        MutationConfig.from_dict(bad)


def test_flat_params_are_refused_rather_than_inheriting_nothing():
    graph, constants, _ = cnn.CifarNet()
    variables = parent_variables(graph, constants)
    with pytest.raises(ValueError, match="variables must be flax variables.*'params'"):
        propose_child(graph, constants, variables["params"], seed=0, config=FAST)
