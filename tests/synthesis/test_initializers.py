"""The host initializers of fresh parameters: flax's distributions, drawn from numpy."""

import jax
import numpy as np
import pytest
from flax.linen import initializers

from nas.synthesis.initializers import _truncated, host_initializer


def whole_array_rejection(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Truncation by its definition: redraw every entry outside [-2, 2] until none is."""
    out = rng.standard_normal(shape)
    bad = np.abs(out) > 2
    while bad.any():
        out[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(out) > 2
    return out


@pytest.mark.parametrize("shape", [(), (1,), (7, 3), (3, 3, 16, 32), (512, 384)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_truncated_normal_draws_what_whole_array_rejection_draws(shape, seed):
    drawn = _truncated(np.random.default_rng(seed), shape)
    assert drawn.shape == shape and np.all(np.abs(drawn) <= 2)
    np.testing.assert_array_equal(drawn, whole_array_rejection(np.random.default_rng(seed),
                                                                shape))


@pytest.mark.parametrize("name, flax_init", [
    ("lecun_normal", initializers.lecun_normal()),
    ("he_normal", initializers.he_normal()),
    ("glorot_uniform", initializers.glorot_uniform()),
])
def test_host_initializers_match_flax_in_mean_and_spread(name, flax_init):
    shape = (3, 3, 32, 64)  # 18,432 values: the std is known to about 1 %
    host = host_initializer(name, {})(np.random.default_rng(0), shape, np.float32)
    ours = np.asarray(flax_init(jax.random.PRNGKey(0), shape, np.float32))
    assert host.dtype == np.float32 and host.shape == shape
    assert abs(host.mean()) < 0.05 * ours.std()
    assert host.std() == pytest.approx(ours.std(), rel=0.05)
    assert np.abs(host).max() <= np.abs(ours).max() * 1.05  # both truncated at 2 std
