"""Time `nas.from_flax` on a ResNet-50-sized linen model (bottleneck blocks 3-4-6-3, batch
norm, 25.6 M parameters at 1000 classes) on this CPU.

    PYTHONPATH=. python benchmarks/import_flax.py [--image=224] [--repeats=3]

Prints the import's wall time (`from_flax`: tracing + translation), the first call in the
process and warm medians over `repeats`, then `check_import` (the module and the imported
graph each compiled once and compared on the example: what `nas-search import` adds), and
the parameter count as a check of size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nas.interop import check, importer


class Bottleneck(nn.Module):
    features: int
    strides: int = 1

    @nn.compact
    def __call__(self, x):
        y = nn.relu(nn.BatchNorm(use_running_average=True)(
            nn.Conv(self.features, (1, 1), use_bias=False)(x)))
        y = nn.relu(nn.BatchNorm(use_running_average=True)(
            nn.Conv(self.features, (3, 3), self.strides, use_bias=False)(y)))
        y = nn.BatchNorm(use_running_average=True)(
            nn.Conv(4 * self.features, (1, 1), use_bias=False)(y))
        if x.shape != y.shape:
            x = nn.BatchNorm(use_running_average=True)(
                nn.Conv(4 * self.features, (1, 1), self.strides, use_bias=False)(x))
        return nn.relu(x + y)


class ResNet50(nn.Module):
    num_classes: int = 1000

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(64, (7, 7), (2, 2), padding=((3, 3), (3, 3)), use_bias=False)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=True)(x))
        x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
        for stage, blocks in enumerate((3, 4, 6, 3)):
            for b in range(blocks):
                x = Bottleneck(64 * 2 ** stage, 2 if stage and not b else 1)(x)
        return nn.Dense(self.num_classes)(jnp.mean(x, axis=(1, 2)))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = ResNet50()
    x = jax.random.normal(jax.random.PRNGKey(0), (2, args.image, args.image, 3))
    variables = jax.jit(model.init)(jax.random.PRNGKey(1), x)
    params = sum(a.size for a in jax.tree.leaves(variables["params"]))
    cold = timed(lambda: importer.from_flax(model, x, variables=variables))
    warm = [timed(lambda: importer.from_flax(model, x, variables=variables))
            for _ in range(args.repeats)]
    candidate = importer.from_flax(model, x, variables=variables)
    checks = [timed(lambda: check.check_import(candidate, model, x, variables=variables))
              for _ in range(args.repeats)]
    diff = check.check_import(candidate, model, x, variables=variables)
    load = os.getloadavg()
    print(f"ResNet-50 (linen), input (2, {args.image}, {args.image}, 3), "
          f"{params / 1e6:.1f} M params, {len(candidate.graph.ops)} IR ops; load average "
          f"{load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {os.cpu_count()} CPUs")
    print("| step | seconds |")
    print("|---|---|")
    print(f"| from_flax: trace + translate, first call in the process | {cold:.2f} |")
    print(f"| from_flax (warm median) | {statistics.median(warm):.2f} |")
    print(f"| check_import: both compiled and compared (warm median) | "
          f"{statistics.median(checks):.2f} |")
    print(f"largest difference / largest output: {diff:.1e}")
    assert np.isfinite(params)


if __name__ == "__main__":
    main()
