"""A batch norm choosing its statistics at run time: the running averages give flax's
evaluation output bit for bit, the batch's give flax's training output and statistics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nas.graph import Model, new_graph, new_op
from nas.graph.batch_norm import COLLECTION, sown_statistics

KWARGS = [{}, {"use_scale": False, "use_bias": False, "epsilon": 1e-3},
          {"use_fast_variance": False, "momentum": 0.9}, {"axis": 1}]


def _model(bn_kwargs):
    ops = [new_op("conv", "CONV", ["input"], op_kwargs={"features": 4, "kernel_size": 3}),
           new_op("bn", "BATCH_NORM", ["conv"], op_kwargs=bn_kwargs),
           new_op("frozen", "BATCH_NORM", ["bn"],
                  input_kwargs={"use_running_average": True})]
    model = Model(new_graph(["input"], ["frozen"], ops), {})
    x = np.random.default_rng(0).normal(2.0, 3.0, (6, 5, 5, 3)).astype(np.float32)
    variables = model.init(jax.random.PRNGKey(0), x)
    return model, jax.tree.map(lambda a: a + 0.3, variables), x  # not the initial (0, 1)


@pytest.mark.parametrize("bn_kwargs", KWARGS)
def test_either_statistics_match_flax_in_both_modes(bn_kwargs):
    model, variables, x = _model(bn_kwargs)
    either = jax.jit(lambda v, x, use: model.apply(v, x, training=use, mutable=[COLLECTION]))
    evaluated, _ = either(variables, x, jnp.asarray(False))
    trained, sown = either(variables, x, jnp.asarray(True))
    want_eval = jax.jit(lambda v, x: model.apply(v, x, training=False))(variables, x)
    want_train, updated = jax.jit(lambda v, x: model.apply(
        v, x, training=True, mutable=["batch_stats"]))(variables, x)
    np.testing.assert_array_equal(evaluated, want_eval)
    np.testing.assert_allclose(trained, want_train, rtol=1e-6, atol=1e-6)
    m = bn_kwargs.get("momentum", 0.99)
    stats = sown_statistics(sown)
    assert set(stats) == {"bn"}  # a batch norm fixed to its averages has none
    for k in ("mean", "var"):  # flax's update is m * old + (1 - m) * batch
        old, new = variables["batch_stats"]["bn"][k], updated["batch_stats"]["bn"][k]
        np.testing.assert_allclose(stats["bn"][k], (new - m * old) / (1 - m), rtol=1e-4,
                                   atol=1e-4)


def test_either_keeps_flax_variables_and_moves_no_average():
    model, variables, x = _model({})
    inited = Model(model.graph, {}).init(jax.random.PRNGKey(0), x)
    _, out = model.apply(variables, x, training=jnp.asarray(True),
                         mutable=["batch_stats", COLLECTION])
    assert jax.tree.map(np.shape, dict(out["batch_stats"])) == jax.tree.map(
        np.shape, dict(inited["batch_stats"]))
    jax.tree.map(np.testing.assert_array_equal, dict(out["batch_stats"]),
                 dict(variables["batch_stats"]))
