"""Precise BN: evaluated batch-norm statistics are those of the final weights, not running
averages that still describe a parent (the cause of children collapsing after a short
fine-tune)."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import AT_32, tiny_config, tiny_graph

from nas.graph import Model, new_graph, new_op
from nas.train import TrainOptions, precise_bn, train_and_eval
from nas.train.compilation import CompileCounter
from nas.train.config import with_defaults


def test_statistics_are_the_batches_own_whatever_the_running_averages():
    ops = [new_op("bn", "BATCH_NORM", ["input"]),
           new_op("frozen_bn", "BATCH_NORM", ["bn"],
                  input_kwargs={"use_running_average": True})]
    model = Model(new_graph(["input"], ["frozen_bn"], ops), {})
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, (4, 5, 5, 3)).astype(np.float32) for _ in range(3)]
    variables = model.init(jax.random.PRNGKey(0), jnp.asarray(batches[0]))
    stale = {name: {"mean": np.full(3, 50.0, np.float32), "var": np.full(3, 9.0, np.float32)}
             for name in ("bn", "frozen_bn")}
    variables = {"params": variables["params"], "batch_stats": stale}
    stats = precise_bn.statistics_fn(model)(variables, batches)
    want_mean = np.mean([b.mean(axis=(0, 1, 2)) for b in batches], axis=0)
    want_var = np.mean([b.var(axis=(0, 1, 2)) for b in batches], axis=0)
    np.testing.assert_allclose(stats["bn"]["mean"], want_mean, rtol=1e-4)
    np.testing.assert_allclose(stats["bn"]["var"], want_var, rtol=1e-3)
    assert precise_bn.recomputable(model.graph) == {"bn": 0.99}  # the other never updates
    np.testing.assert_array_equal(stats["frozen_bn"]["mean"], stale["frozen_bn"]["mean"])


@pytest.fixture(scope="module")
def stale_parent(data_dir):
    """Trained tiny BN model whose running mean is then made absurd (a parent whose
    activations moved away from its statistics)."""
    graph, constants = tiny_graph(with_bn=True)
    trained, _, state = train_and_eval(
        tiny_config(data_dir, total_epochs=1.0, precise_bn_batches=0, **AT_32), eval_perf=False,
        options=TrainOptions(graph=graph, constants=constants))
    stats = {"bn": {"mean": state["batch_stats"]["bn"]["mean"] + 40.0,
                    "var": state["batch_stats"]["bn"]["var"]}}
    return graph, constants, {"params": state["params"], "batch_stats": stats}, trained.acc


@pytest.mark.parametrize("batches", [0, 4])
def test_short_fine_tune_is_evaluated_with_its_own_statistics(stale_parent, data_dir, batches):
    graph, constants, variables, parent_acc = stale_parent
    assert parent_acc > 0.5
    metrics, _, state = train_and_eval(
        tiny_config(data_dir, total_epochs=0.2, lr=0.0, precise_bn_batches=batches,
                    **AT_32),
        eval_perf=False,
        options=TrainOptions(graph=graph, constants=constants, init_variables=variables))
    shifted = state["batch_stats"]["bn"]["mean"] - variables["batch_stats"]["bn"]["mean"]
    if batches:  # the returned statistics are the recomputed ones: children inherit them
        assert metrics.acc > parent_acc - 0.05 and np.all(np.abs(shifted) > 30)
    else:  # 4 steps at momentum 0.99 leave the running mean near the stale one: chance
        # (the weights do not move at lr 0: only the statistics differ between the cases)
        assert metrics.acc < 0.3 and np.all(np.abs(shifted) < 5)


def test_negative_batches_is_one_clear_error():
    config = tiny_config("", precise_bn_batches=-1)
    with pytest.raises(ValueError, match="precise_bn_batches"):
        with_defaults(config)


def test_the_eval_program_computes_the_statistics_precise_bn_averages():
    """The trainer's statistics come from its eval program (one compiled program fewer):
    each device's are those of the image batch in its share, as `statistics_fn` computes
    them; with the flag off it evaluates and hands back the running averages."""
    from nas.train import mesh as mesh_lib
    from nas.train import steps

    ops = [new_op("bn", "BATCH_NORM", ["input"]), new_op("flat", "FLATTEN", ["bn"]),
           new_op("logits", "DENSE", ["flat"], op_kwargs={"features": 3})]
    model = Model(new_graph(["input"], ["logits"], ops), {})
    n = jax.local_device_count()
    rng = np.random.default_rng(1)
    images = [rng.normal(1.0 + i, 3.0, (4, 5, 5, 3)).astype(np.float32) for i in range(n)]
    variables = jax.tree.map(np.asarray, model.init(jax.random.PRNGKey(0), images[0]))
    (batch, shares), = precise_bn.eval_shaped(images, n, 6 * n)  # 6 rows a device: 2 unused
    assert shares == n and batch["image"].shape == (6 * n, 5, 5, 3)
    mesh = mesh_lib.build(devices=jax.local_devices())
    evaluate = steps.eval_program(steps.make_eval_step(model, 3, statistics_rows=4), mesh)
    variables_r = mesh_lib.put_replicated(variables, mesh)
    out = mesh_lib.to_host(evaluate(variables_r, mesh_lib.put_sharded(batch, mesh),
                                    mesh_lib.put_replicated(np.asarray(True), mesh)))
    for d in range(n):
        want = precise_bn.statistics_fn(model)(variables, [images[d]])
        for k in ("mean", "var"):
            np.testing.assert_allclose(out["batch_statistics"]["bn"][k][d], want["bn"][k],
                                       rtol=1e-6)
    assert float(out["count"]) == 0.0  # nothing was evaluated
    labelled = dict(batch, mask=np.ones(6 * n, np.float32))
    out = mesh_lib.to_host(evaluate(variables_r, mesh_lib.put_sharded(labelled, mesh),
                                    mesh_lib.put_replicated(np.asarray(False), mesh)))
    assert float(out["count"]) == 6 * n
    np.testing.assert_array_equal(out["batch_statistics"]["bn"]["mean"][0],
                                  variables["batch_stats"]["bn"]["mean"])


def test_statistics_batches_fill_device_shares_and_say_how_many():
    images = [np.full((3, 2, 2, 3), i + 1.0, np.float32) for i in range(3)]
    batches = precise_bn.eval_shaped(images, devices=2, eval_rows=8)
    assert [shares for _, shares in batches] == [2, 1]
    first = batches[0][0]["image"].reshape(2, 4, 2, 2, 3)
    assert np.all(first[1, :3] == 2.0) and np.all(first[:, 3] == 0.0)
    assert not any(b["mask"].any() for b, _ in batches)  # no example counts as evaluated


def test_a_trainer_compiles_before_its_device_stage_not_in_it(data_dir):
    """The steps and the batch-norm statistics' program are built before the device is
    taken: a pipelined search's next child must not compile while holding the device."""
    graph, constants = tiny_graph(with_bn=True)
    with_stats = tiny_config(data_dir, total_epochs=0.2, precise_bn_batches=2)
    # Once per process, the logged learning rate's eager ops compile in the first run.
    options = TrainOptions(graph=graph, constants=constants)
    train_and_eval(with_stats, eval_perf=False, options=options)
    with CompileCounter() as everything:
        counter = CompileCounter()
        metrics, _, _ = train_and_eval(with_stats, eval_perf=False,
                                       options=replace(options, device_stage=counter))
    assert everything.requests > 0 and counter.requests == 0
    assert 0.0 < metrics.acc <= 1.0
