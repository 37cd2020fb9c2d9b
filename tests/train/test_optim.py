import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from nas.train import optim
from nas.train.config import base_config

SCHED_KW = dict(total_steps=100, steps_per_epoch=10.0)


def _params():
    return {"a": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)},
            "b": {"kernel": jnp.ones(3)}}


def test_warmup_cosine():
    f = optim.make_schedule({"decay_type": "cosine", "warmup_steps": 10}, **SCHED_KW)
    assert float(f(0)) == pytest.approx(0.1)
    assert float(f(9)) == pytest.approx(1.0)
    assert float(f(55)) == pytest.approx(0.5, abs=1e-6)
    assert float(f(100)) == pytest.approx(0.0, abs=1e-6)


def test_other_decays():
    lin = optim.make_schedule({"decay_type": "linear", "linear_end": 0.0}, **SCHED_KW)
    assert float(lin(50)) == pytest.approx(0.5)
    rs = optim.make_schedule({"decay_type": "rsqrt", "timescale": 10}, **SCHED_KW)
    assert float(rs(30)) == pytest.approx(0.5)
    st = optim.make_schedule({"decay_type": "stair", "boundaries": [0.5, 0.8],
                              "mults": [0.1, 0.01]}, **SCHED_KW)
    assert [round(float(st(s)), 6) for s in (0, 49, 50, 79, 80, 99)] == [1, 1, 0.1, 0.1, 0.01,
                                                                          0.01]
    # The boundary is an integer step whatever the f32 rounding of 0.7 * 100 or 0.3 * 10.
    for frac, total in ((0.7, 100), (0.3, 10), (0.29, 100), (0.57, 100)):
        f = optim.make_schedule({"decay_type": "stair", "boundaries": [frac], "mults": [0.5]},
                                total_steps=total)
        edge = round(frac * total)
        assert float(f(jnp.int32(edge - 1))) == 1.0 and float(f(jnp.int32(edge))) == 0.5
    cd = optim.make_schedule({"decay_type": "constant", "cooldown_epochs": 1}, **SCHED_KW)
    assert float(cd(50)) == 1.0 and float(cd(95)) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="warmup_steps or warmup_epochs, not both"):
        optim.make_schedule({"warmup_steps": 2, "warmup_epochs": 1}, **SCHED_KW)


def test_ramps_longer_than_the_run_are_shortened_to_half_of_it():
    """A warmup sized for a larger dataset is scaled down with the cooldown, by one factor,
    to half the run; the schedule built with the same arguments uses exactly those."""
    assert optim.fitted_ramps({"warmup_steps": 20}, 4) == (2, 0)
    assert optim.fitted_ramps({"warmup_steps": 30, "cooldown_steps": 10}, 9) == (3, 1)
    assert optim.fitted_ramps({"warmup_epochs": 3}, 10, steps_per_epoch=5.0) == (5, 0)
    assert optim.fitted_ramps({"warmup_steps": 5, "cooldown_steps": 5}, 10) == (5, 5)  # fits
    assert optim.fitted_ramps({"warmup_steps": 20}, 1) == (0, 0)
    f = optim.make_schedule({"decay_type": "cosine", "warmup_steps": 20}, total_steps=4)
    assert [round(float(f(s)), 6) for s in range(4)] == [0.5, 1.0, 1.0, 0.5]
    assert optim.shortening_note({"warmup_steps": 20}, 4) == (
        "warmup (20) + cooldown (0) steps exceed the run's 4 steps: shortened to warmup 2 "
        "+ cooldown 0, half the run")
    assert optim.shortening_note({"warmup_steps": 4}, 4) is None


@pytest.mark.parametrize("sched, needle", [({"warmup_steps": -1}, "warmup must be >= 0"),
                                           ({"cooldown_epochs": -2}, "cooldown must be >= 0")])
def test_a_schedule_that_cannot_fit_is_one_line(sched, needle):
    with pytest.raises(ValueError, match=needle):
        optim.make_schedule(sched, **SCHED_KW)


def test_update_formula_weight_decay_on_kernels_only():
    c = base_config()
    c.optax_name, c.lr, c.wd, c.grad_clip_norm = "identity", 0.1, 0.01, 0.0
    c.schedule = {"decay_type": "constant"}
    p = _params()
    tx, _ = optim.make(c, p, SCHED_KW)
    g = jax.tree.map(lambda x: 2 * jnp.ones_like(x), p)
    u, _ = tx.update(g, tx.init(p), p)
    np.testing.assert_allclose(u["a"]["kernel"], -(0.1 * 2 + 0.01 * 1))
    np.testing.assert_allclose(u["a"]["bias"], -(0.1 * 2))


def test_frozen_groups_get_zero_updates_and_no_state():
    c = base_config()
    c.frozen_pattern = r"^b/"
    p = _params()
    tx, _ = optim.make(c, p, SCHED_KW, frozen={"a"})
    state = tx.init(p)
    g = jax.tree.map(jnp.ones_like, p)
    u, _ = tx.update(g, state, p)
    assert all(float(jnp.abs(x).max()) == 0 for x in jax.tree.leaves(u))
    c.frozen_pattern = ""
    tx, _ = optim.make(c, p, SCHED_KW, frozen={"b"})
    u, state = tx.update(g, tx.init(p), p)
    assert float(jnp.abs(u["b"]["kernel"]).max()) == 0
    assert float(jnp.abs(u["a"]["kernel"]).max()) > 0
    assert optim.step_count(state) == 1


def test_frozen_grads_do_not_count_towards_clipping():
    c = base_config()
    c.optax_name, c.lr, c.grad_clip_norm = "identity", 1.0, 1.0
    c.schedule = {"decay_type": "constant"}
    p = {"a": {"kernel": jnp.zeros(1)}, "b": {"kernel": jnp.zeros(1)}}
    tx, _ = optim.make(c, p, SCHED_KW, frozen={"b"})
    g = {"a": {"kernel": jnp.array([0.5])}, "b": {"kernel": jnp.array([100.0])}}
    u, _ = tx.update(g, tx.init(p), p)
    np.testing.assert_allclose(u["a"]["kernel"], [-0.5])  # not clipped by b's 100


def test_schedule_list_with_none_freezes():
    c = base_config()
    c.unlock()
    del c["schedule"]
    c.schedule = [("^a/", {"decay_type": "constant"}), (".*", None)]
    p = _params()
    tx, fns = optim.make(c, p, SCHED_KW)
    assert len(fns) == 1
    u, _ = tx.update(jax.tree.map(jnp.ones_like, p), tx.init(p), p)
    assert float(jnp.abs(u["b"]["kernel"]).max()) == 0
    assert float(jnp.abs(u["a"]["kernel"]).max()) > 0


def test_unknown_optimizer_is_named():
    c = base_config()
    c.optax_name = "scale_by_magic"
    with pytest.raises(ValueError, match="optax_name"):
        optim.make(c, _params(), SCHED_KW)


def test_ema_warmup_and_decay():
    old, new = {"w": jnp.zeros(2)}, {"w": jnp.ones(2)}
    np.testing.assert_allclose(optim.ema_update(old, new, 3, 0.9, 5)["w"], 1.0)  # copies
    # step 1000 after warmup: min(0.9, ~1) = 0.9
    np.testing.assert_allclose(optim.ema_update(old, new, 1000, 0.9, 5)["w"], 0.1, rtol=1e-6)
    assert isinstance(optax.tree.norm(new), jax.Array)


@pytest.mark.parametrize("sched", [
    {"decay_type": "cosine", "warmup_steps": 10, "cooldown_steps": 5},
    {"decay_type": "stair", "boundaries": [0.5, 0.8], "mults": [0.1, 0.01]},
])
def test_runs_of_other_lengths_compile_one_update(sched):
    """A run's step counts are data of the optimizer state, not constants of the compiled
    update: the search's training, each finals fold and the retrain taken home (other step
    counts, the same architecture) lower to the same program, which the persistent
    compilation cache then serves to all of them."""
    config = base_config()
    config.schedule = sched
    params = _params()
    texts, updates = [], []
    for total in (100, 134):
        tx, fns = optim.make(config, params, dict(total_steps=total, steps_per_epoch=10.0))
        state = tx.init(params)
        texts.append(jax.jit(tx.update).lower(params, state, params).as_text())
        updates.append(jax.jit(tx.update)(params, state, params)[0])
        # the learning rate the run logs and the update's own agree
        assert float(fns[0](0)) == pytest.approx(
            float(optim.make_schedule(sched, total_steps=total, steps_per_epoch=10.0)(0)))
    assert texts[0] == texts[1]
    assert optim.step_count(tx.update(params, state, params)[1]) == 1
    # at step 0 both runs' multipliers are the warmup's (or the stair's) first
    np.testing.assert_allclose(updates[0]["a"]["kernel"], updates[1]["a"]["kernel"])


def test_a_schedules_lengths_move_with_the_run():
    short = optim.make_schedule({"decay_type": "stair", "boundaries": [0.5], "mults": [0.1]},
                                total_steps=100)
    long = optim.make_schedule({"decay_type": "stair", "boundaries": [0.5], "mults": [0.1]},
                               total_steps=200)
    assert float(short(60)) == pytest.approx(0.1) and float(long(60)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="unknown decay_type 'cosin'"):
        optim.make_schedule({"decay_type": "cosin"}, total_steps=10)
