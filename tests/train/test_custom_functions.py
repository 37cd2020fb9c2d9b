"""A user's loss, optimizer and augmentation run inside the compiled train step
(`nas.train.custom`), and a user's costs on the trained candidate
(`nas.search.execution.user_functions`)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nas.graph import Model
from nas.search.execution.user_functions import CostFailed, check_recorded, measure_costs
from nas.train import TrainOptions, steps, train_and_eval
from nas.train import mesh as mesh_lib
from nas.train.custom import refuse_reversible, train_functions
from tests.search._user_functions import OFFSET, offset_loss
from tests.train.helpers import AT_32, tiny_config, tiny_graph


def _state_and_batch(model, tx, seed=0):
    x = jax.random.normal(jax.random.PRNGKey(seed), (8, 8, 8, 3))
    variables = model.init({"params": jax.random.PRNGKey(1)}, x)
    params = variables["params"]
    state = {"params": params, "frozen": {}, "batch_stats": {}, "ema": {},
             "opt_state": tx.init(params), "step": jnp.int32(0)}
    batch = {"image": x, "label": jnp.arange(8) % 10}
    return state, batch


def _step(model, tx, **kw):
    fn = steps.make_train_step(model, tx, 10, **kw)
    return steps.train_program(fn, mesh_lib.build((1,)))


def _one_device(tree):
    """A copy of `tree` on a one-device mesh, replicated (the step donates its state)."""
    return mesh_lib.put_replicated(jax.tree.map(np.asarray, tree), mesh_lib.build((1,)))


def _assert_same_params(a, b, **tolerance):
    for x, y in zip(jax.tree.leaves(a["params"]), jax.tree.leaves(b["params"]), strict=True):
        np.testing.assert_allclose(x, y, **tolerance)


def test_the_users_loss_is_what_the_step_minimizes_and_reports():
    graph, constants = tiny_graph()
    model = Model(graph, constants)
    tx = optax.sgd(0.1)
    state, batch = _state_and_batch(model, tx)
    rng = _one_device(jax.random.PRNGKey(0))
    built_in = _step(model, tx)(_one_device(state), _one_device(batch), rng)
    users = _step(model, tx, loss_fn=offset_loss)(_one_device(state), _one_device(batch), rng)
    # same gradient (the offset is a constant), the user's value reported
    np.testing.assert_allclose(users[1]["training_loss"], built_in[1]["training_loss"] + OFFSET,
                               rtol=1e-6)
    _assert_same_params(users[0], built_in[0], rtol=1e-5, atol=1e-6)


def test_the_augmentation_runs_on_the_images_inside_the_step():
    graph, constants = tiny_graph()
    model = Model(graph, constants)
    tx = optax.sgd(0.1)
    state, batch = _state_and_batch(model, tx)
    rng = _one_device(jax.random.PRNGKey(0))
    seen = []

    def blank(key, images):
        seen.append((key.shape, images.shape, images.dtype))
        return jnp.zeros_like(images)

    augmented = _step(model, tx, augment_fn=blank)(_one_device(state), _one_device(batch), rng)
    zeros = dict(batch, image=jnp.zeros_like(batch["image"]))
    plain = _step(model, tx)(_one_device(state), _one_device(zeros), rng)
    assert seen and seen[0][1] == (8, 8, 8, 3)  # traced on one device's float images
    _assert_same_params(augmented[0], plain[0], rtol=1e-6, atol=1e-7)


def test_the_eval_loss_is_the_mean_of_the_users_loss_over_real_rows():
    graph, constants = tiny_graph()
    model = Model(graph, constants)
    tx = optax.sgd(0.1)
    state, batch = _state_and_batch(model, tx)
    variables = {"params": state["params"]}
    mask = jnp.array([1, 1, 1, 1, 1, 0, 0, 0], jnp.float32)  # 3 padding rows
    eval_fn = steps.eval_program(steps.make_eval_step(model, 10, loss_fn=offset_loss),
                                 mesh_lib.build((1,)))
    out = eval_fn(_one_device(variables), _one_device(dict(batch, mask=mask)),
                  _one_device(jnp.asarray(False)))
    logits = model.apply(variables, batch["image"], deterministic=True, training=False)
    expected = sum(float(offset_loss(logits[i:i + 1], batch["label"][i:i + 1]))
                   for i in range(5))
    np.testing.assert_allclose(float(out["loss"]), expected, rtol=1e-5)
    assert float(out["count"]) == 5.0


def test_the_users_optimizer_replaces_the_built_in_one(tmp_path):
    """sgd at a learning rate of 0 leaves every weight where it started; the schedule it is
    given is the config's lr times its decay."""
    graph, constants = tiny_graph()
    config = tiny_config(str(tmp_path / "data"), total_epochs=0.25,
                         **AT_32)
    schedules = []

    def frozen_sgd(schedule):
        schedules.append(schedule)
        return optax.sgd(0.0)

    start = Model(graph, constants).init(jax.random.PRNGKey(3), jnp.zeros((1, 32, 32, 3)))
    start = jax.tree.map(np.asarray, start)
    metrics, _, state = train_and_eval(config, eval_perf=False,
                                       options=TrainOptions(graph=graph, constants=constants,
                                                            init_variables=start,
                                                            functions={"optimizer": frozen_sgd}))
    _assert_same_params(state, start, rtol=0, atol=0)
    assert schedules and float(schedules[0](0)) == pytest.approx(config.lr, rel=1e-6)


def test_names_in_the_config_are_imported_and_values_given_win():
    config = {"loss": "tests.search._user_functions:offset_loss", "optimizer": "",
              "augment": ""}
    assert train_functions(config) == {"loss": offset_loss}

    def mine(logits, labels):
        return offset_loss(logits, labels)

    assert train_functions(config, {"loss": mine}) == {"loss": mine}
    with pytest.raises(ValueError, match=r"config field 'loss': cannot import "
                                         r"'__main__:gone' here"):
        train_functions(dict(config, loss="__main__:gone"))


def test_the_reversible_trainer_refuses_a_users_functions_in_one_line():
    with pytest.raises(ValueError, match=r"config field 'trainer': the reversible trainer has "
                                         r"its own loss, optimizer and augmentation; the "
                                         r"user's loss apply to the standard trainer only"):
        refuse_reversible({"loss": offset_loss})
    refuse_reversible({})


def _trained():
    graph, constants = tiny_graph()
    variables = Model(graph, constants).init(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 3)))
    train = {"input": {"image_size": 8, "channels": 3}}
    return graph, constants, jax.tree.map(np.asarray, variables), train


def test_a_cost_gets_the_trained_candidate_and_its_value_lands_under_its_name():
    graph, constants, variables, train = _trained()

    def batch_of_two(candidate):
        return float(np.size(candidate(np.zeros((2, *candidate.input_shape), np.float32))))

    got = measure_costs({"costs.logits": batch_of_two}, graph, constants, variables, train,
                        {"accuracy": 0.5})
    assert got == {"logits": 20.0}


@pytest.mark.parametrize("cost, message", [
    (lambda c: 1 / 0, r"cost 'latency' \(.*\) raised ZeroDivisionError: division by zero"),
    (lambda c: "fast", r"cost 'latency' returned str 'fast', expected a number"),
    (lambda c: float("nan"), r"cost 'latency' returned nan, expected a finite number"),
])
def test_a_cost_that_fails_fails_the_candidate_with_its_cause(cost, message):
    graph, constants, variables, train = _trained()
    with pytest.raises(CostFailed, match=message):
        measure_costs({"costs.latency": cost}, graph, constants, variables, train, {})


def test_a_study_resumed_with_another_function_is_one_line():
    recorded = {"loss": {"name": "tests.search._user_functions:offset_loss",
                         "digest": "0" * 16}}
    with pytest.raises(ValueError, match=r"train\.loss: the study in W was run with "
                                         r"tests\.search\._user_functions:offset_loss "
                                         r"\(code 0{16}\), not tests\.search\._user_functions:"
                                         r"offset_loss \(code [0-9a-f]{16}\)"):
        check_recorded(recorded, {"loss": offset_loss}, "W")
    check_recorded(None, {"loss": offset_loss}, "W")  # a new study: nothing to compare
