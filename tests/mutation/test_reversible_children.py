"""Children of a reversible parent are reversible, inherit across the spec and train."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from nas.graph import reversible
from nas.mutation import propose_child
from nas.mutation.reversible import add_coupling, delete_coupling, mutable_block_indices
from nas.train import config as config_lib
from nas.train.reversible import ReversibleTrainer
from nas.zoo import revnet
from tests.mutation.helpers import check_child, parent_variables

FAST = {"linear_p": None, "time_limit_s": 600.0}  # never binding, even at load


def _children(graph, constants, seeds, config):
    variables = parent_variables(graph, constants)
    out = [propose_child(graph, constants, variables, seed=s, config=config) for s in seeds]
    return variables, out


def test_revnet_children_pass_from_graph_and_inherit():
    graph, constants, _ = revnet.RevNet(num_classes=10)
    variables, children = _children(graph, constants, range(6), FAST)
    kinds = set()
    for child in children:
        spec = reversible.from_graph(child.graph, child.constants)  # no ValueError
        assert spec.to_graph()[0] == child.graph
        check_child(child, graph, constants, variables, forward=False)
        assert child.inherited  # most weights carry over across the spec
        kinds.add(child.kind)
    assert "reversible_block" in kinds


def test_block_mutation_stays_inside_one_block():
    graph, constants, _ = revnet.RevNet(num_classes=10)
    config = dict(FAST, block_add_prob=0.0, block_delete_prob=0.0)
    _, children = _children(graph, constants, range(3), config)
    parent = reversible.from_graph(graph, constants)
    for child in children:
        assert child.kind == "reversible_block"
        spec = reversible.from_graph(child.graph, child.constants)
        changed = [i for i, (a, b) in enumerate(zip(parent.mutable_blocks(),
                                                    spec.mutable_blocks(), strict=True))
                   if a.base_graph != b.base_graph]
        assert len(changed) == 1 and changed[0] in mutable_block_indices(parent)
        assert [len(b.couplings) for b in spec.blocks] == [len(b.couplings)
                                                            for b in parent.blocks]


def test_add_and_delete_coupling_keep_the_spec_valid():
    import random

    graph, constants, _ = revnet.RevNet(depth=3, num_stages=1)
    spec = reversible.from_graph(graph, constants)
    rng = random.Random(0)
    grown, shrunk = add_coupling(spec, rng), delete_coupling(spec, rng)
    assert len(grown.blocks[0].couplings) == 4 and len(shrunk.blocks[0].couplings) == 2
    for s in (grown, shrunk):
        g, c = s.to_graph()
        reversible.from_graph(g, c)
    one = reversible.from_graph(*revnet.RevNet(depth=1, num_stages=1)[:2])
    with pytest.raises(ValueError, match="no stage has a coupling to spare"):
        delete_coupling(one, rng)


def test_children_train_in_the_reversible_trainer():
    graph, constants, _ = revnet.RevNet(num_classes=10, depth=2, width=8)
    config = dict(FAST, input_shape=(1, 16, 16, 3))
    children = [propose_child(graph, constants, None, seed=s, config=config)
                for s in (0, 1)]
    train_cfg = config_lib.with_defaults({"optax_name": "scale_by_adam", "lr": 1e-3,
                                          "num_classes": 10})
    rs = np.random.RandomState(0)
    batch = {"image": rs.randn(4, 16, 16, 3).astype(np.float32),
             "label": rs.randint(0, 10, 4).astype(np.int32)}
    for child in children:
        params = dict(child.variables["params"])
        trainer = ReversibleTrainer(child.graph, child.constants, config=train_cfg,
                                    sched_kw={"total_steps": 2}, image_shape=(16, 16, 3),
                                    params=params)
        losses = [trainer.train_step(batch, jax.random.PRNGKey(0))["training_loss"]
                  for _ in range(2)]
        assert all(np.isfinite(losses))


def test_children_never_hold_batchnorm():
    from nas.graph.ops import OpType

    graph, constants, _ = revnet.RevNet(num_classes=10, depth=2, width=8)
    config = dict(FAST, block_add_prob=0.0, block_delete_prob=0.0)
    _, children = _children(graph, constants, range(8, 14), config)
    for child in children:
        assert not [op for op in child.graph.ops if op.type is OpType.BATCH_NORM]


def test_batchnorm_child_is_refused():
    from nas.graph.ops import OpType, new_graph, new_op
    from nas.mutation.reversible import _check_trainable

    bn = new_graph(["input"], ["bn"], [new_op("bn", OpType.BATCH_NORM, ["input"])])
    with pytest.raises(ValueError, match="BatchNorm"):
        _check_trainable(bn)
