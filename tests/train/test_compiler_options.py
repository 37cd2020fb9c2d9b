"""Per-program compiler options: gradient programs compile without XLA:CPU's YNN fusions
(faster there), and compute the same step as with them."""

import jax
import jax.numpy as jnp
import numpy as np

from nas.train import compilation


def test_gradient_options_turn_ynn_off_on_the_cpu_only():
    options = compilation.gradient_options()
    if jax.default_backend() == "cpu":
        assert options == {"xla_cpu_experimental_ynn_fusion_type": ""}
    else:
        assert options == {}


def test_a_gradient_step_compiled_with_them_computes_the_same_step():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8, 8, 3)).astype(np.float32)
    w = (0.1 * rng.standard_normal((3, 3, 3, 5))).astype(np.float32)

    def step(w, x):
        def loss(w):
            y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
            return jnp.mean(jnp.square(y))
        return w - 0.1 * jax.grad(loss)(w)

    plain = jax.jit(step)(w, x)
    tuned = jax.jit(step, compiler_options=compilation.gradient_options())(w, x)
    np.testing.assert_allclose(tuned, plain, rtol=1e-5, atol=1e-6)
