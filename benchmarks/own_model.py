"""A search from a model no test was tuned on, and what the user takes home, judged on test.

An untrained Flax model written for this check (GroupNorm, a gated residual add, swish) on
real images (scikit-learn's 8x8 digits, 3 channels, a quarter held out for test), searched
by `nas.run_search` with its defaults. The recommended model and the seed's weights from
the search (`load_candidate(1)`) are then run on the test images here, with the paired
counts: the search must not hand back a model worse than the seed it already had.

    python benchmarks/own_model.py WORKDIR [--max-candidates 8] [--seed 0]
"""

from __future__ import annotations

import argparse

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from sklearn.datasets import load_digits

import nas


class GatedResidual(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.GroupNorm(num_groups=4)(nn.Conv(24, (3, 3))(x))
        h = nn.Conv(24, (3, 3))(nn.swish(x))
        x = x + h * nn.sigmoid(nn.Dense(24)(jnp.mean(h, axis=(1, 2), keepdims=True)))
        x = nn.avg_pool(nn.relu(x), (2, 2), (2, 2))
        x = nn.relu(nn.Conv(48, (3, 3))(x))
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workdir")
    parser.add_argument("--max-candidates", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0, help="search.seed: the proposals' draws")
    args = parser.parse_args()
    digits = load_digits()
    x = np.repeat(np.uint8(digits.images * 255 / 16)[..., None], 3, axis=-1)
    order = np.random.default_rng(7).permutation(len(x))
    x, y = x[order], digits.target[order]
    test = np.arange(len(x)) % 4 == 0
    probe = jnp.zeros((1, 8, 8, 3))
    model = GatedResidual()
    seed = nas.from_flax(model, probe, variables=model.init(jax.random.PRNGKey(3), probe))
    result = nas.run_search(seed, (x[~test], y[~test], x[test], y[test]),
                            workdir=args.workdir, max_candidates=args.max_candidates,
                            overrides={"search.seed": args.seed}, progress=False)
    print(result.summary())
    batch = nas.preprocess(x[test])
    recommended = result.recommended
    right = {name: np.asarray(m(batch)).argmax(-1) == y[test]
             for name, m in (("recommended", recommended), ("seed", result.load_candidate(1)))}
    print(f"test, n={test.sum()}: recommended (candidate {recommended.info['id']}) "
          f"{right['recommended'].mean():.4f}, the search's seed {right['seed'].mean():.4f}; "
          f"right only by the recommended {int((right['recommended'] & ~right['seed']).sum())},"
          f" only by the seed {int((right['seed'] & ~right['recommended']).sum())}")


if __name__ == "__main__":
    main()
