"""Net2Net moves: a widened layer or an inserted identity layer leaves
the child's logits equal to its parent's before training (within 1e-5)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Model
from nas.mutation import net2net, propose_child
from nas.zoo import cnn
from tests.train.helpers import tiny_graph

SHAPE = (1, 32, 32, 3)


def _parent(graph, constants, seed=0):
    variables = Model(graph, constants).init(jax.random.PRNGKey(seed), jnp.zeros(SHAPE))
    variables = jax.tree.map(np.asarray, variables)
    rng = np.random.default_rng(seed)
    for stats in variables.get("batch_stats", {}).values():  # as if trained
        stats["mean"] = rng.normal(size=stats["mean"].shape).astype(np.float32)
        stats["var"] = rng.uniform(0.5, 2, size=stats["var"].shape).astype(np.float32)
    for params in variables["params"].values():
        if "scale" in params:
            params["scale"] = rng.uniform(0.5, 1.5, params["scale"].shape).astype(np.float32)
    return variables


def _logits(graph, constants, variables):
    x = jnp.asarray(np.random.default_rng(1).normal(size=(4, *SHAPE[1:])), jnp.float32)
    return np.asarray(Model(graph, constants).apply(variables, x, deterministic=True,
                                                    training=False))


CIFARNET = cnn.CifarNet()[:2]
TINY_BN = tiny_graph(with_bn=True)


@pytest.mark.parametrize("graph, constants", [CIFARNET, TINY_BN], ids=["cifarnet", "bn"])
def test_widening_each_layer_keeps_the_parents_logits(graph, constants):
    variables = _parent(graph, constants)
    before = _logits(graph, constants, variables)
    names = net2net.widenable(graph)
    assert names  # CifarNet: proj, both convs and the hidden dense (through the flatten)
    for name in names:
        old = variables["params"][name]["kernel"].shape[-1]
        child, consts, values = net2net.widen(graph, constants, variables, name, 2 * old - 1,
                                              np.random.default_rng(0), SHAPE)
        assert values["params"][name]["kernel"].shape[-1] == 2 * old - 1
        np.testing.assert_allclose(_logits(child, consts, values), before, atol=1e-5)


@pytest.mark.parametrize("graph, constants", [CIFARNET, TINY_BN], ids=["cifarnet", "bn"])
def test_an_identity_layer_anywhere_keeps_the_parents_logits(graph, constants):
    variables = _parent(graph, constants)
    before = _logits(graph, constants, variables)
    places = net2net.deepenable(graph) + ["flatten"]
    for after in places:
        child, consts, values = net2net.deepen(graph, constants, variables, after, "c9/",
                                               SHAPE)
        assert len(child.ops) > len(graph.ops)
        np.testing.assert_allclose(_logits(child, consts, values), before, atol=1e-5)


def test_net2net_children_of_propose_child_start_at_their_parent():
    graph, constants = CIFARNET
    variables = _parent(graph, constants)
    before = _logits(graph, constants, variables)
    kinds = set()
    for seed in range(4):
        child = propose_child(graph, constants, variables, seed=seed,
                              config={"net2net_p": 1.0, "input_shape": SHAPE})
        again = propose_child(graph, constants, variables, seed=seed,
                              config={"net2net_p": 1.0, "input_shape": SHAPE})
        assert child.fingerprint == again.fingerprint  # the same seed, the same child
        assert child.function_preserving and child.kind in ("widen", "deepen")
        kinds.add(child.kind)
        np.testing.assert_allclose(_logits(child.graph, child.constants, child.variables),
                                   before, atol=1e-5)
    assert kinds == {"widen", "deepen"}


def test_moves_that_do_not_apply_say_where():
    graph, constants = CIFARNET
    variables = _parent(graph, constants)
    with pytest.raises(ValueError, match="widen: 'flatten' is not a CONV or DENSE"):
        net2net.widen(graph, constants, variables, "flatten", 10, np.random.default_rng(0),
                      SHAPE)
    with pytest.raises(ValueError, match="fc/logits:0 is a graph output"):
        net2net.widen(graph, constants, variables, "fc/logits", 20, np.random.default_rng(0),
                      SHAPE)
    with pytest.raises(ValueError, match="has 256 units, asked for 100"):
        net2net.widen(graph, constants, variables, "fc/dense", 100, np.random.default_rng(0),
                      SHAPE)
    with pytest.raises(ValueError, match="deepen: no op 'nope'"):
        net2net.deepen(graph, constants, variables, "nope", "c/", SHAPE)


def test_narrowing_keeps_the_largest_units_and_all_of_them_keep_the_function():
    """A narrowing is a cheap child in one large step that inherits the units that matter."""
    graph, constants = TINY_BN
    variables = _parent(graph, constants)
    before = _logits(graph, constants, variables)
    child, consts, values = net2net.narrow(graph, constants, variables, "conv", 8, SHAPE)
    np.testing.assert_allclose(_logits(child, consts, values), before, atol=1e-6)
    kernel = variables["params"]["conv"]["kernel"]
    norms = np.linalg.norm(kernel.reshape(-1, 8), axis=0)
    child, consts, values = net2net.narrow(graph, constants, variables, "conv", 2, SHAPE)
    kept = np.sort(np.argsort(-norms)[:2])
    np.testing.assert_array_equal(values["params"]["conv"]["kernel"], kernel[..., kept])
    np.testing.assert_array_equal(values["batch_stats"]["bn"]["mean"],
                                  variables["batch_stats"]["bn"]["mean"][kept])
    assert _logits(child, consts, values).shape == before.shape


def test_shrinking_the_whole_network_by_a_quarter_and_through_propose_child():
    from nas.train.perf import count_params

    graph, constants = CIFARNET
    variables = _parent(graph, constants)
    names = net2net.widenable(graph)
    child, consts, values = net2net.scale_widths(graph, constants, variables, names, 0.25,
                                                 SHAPE)
    for name in names:
        assert values["params"][name]["kernel"].shape[-1] == \
            variables["params"][name]["kernel"].shape[-1] // 4
    assert count_params(values["params"]) < count_params(variables["params"]) / 4
    assert np.isfinite(_logits(child, consts, values)).all()
    kids = [propose_child(graph, constants, variables, seed=s,
                          config={"shrink_p": 1.0, "input_shape": SHAPE}) for s in range(3)]
    for kid in kids:
        assert kid.kind == "shrink" and not kid.function_preserving
        assert count_params(kid.variables["params"]) < count_params(variables["params"])
    again = propose_child(graph, constants, variables, seed=0,
                          config={"shrink_p": 1.0, "input_shape": SHAPE})
    assert again.fingerprint == kids[0].fingerprint
    with pytest.raises(ValueError, match="narrow: fc/dense has 256 units, asked for 300"):
        net2net.narrow(graph, constants, variables, "fc/dense", 300, SHAPE)
