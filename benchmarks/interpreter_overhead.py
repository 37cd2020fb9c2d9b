"""Does interpreting the IR cost anything after jit?

Times a jitted SGD train step of CifarNet and ResNet18 (small) built from our IR against the
same networks written directly as flax.linen modules, alternating the two in one process so
machine noise hits both alike, and prints the throughput ratio (goal >= 0.98).

    python benchmarks/interpreter_overhead.py [--rounds 7] [--steps 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from nas.graph import Model
from nas.zoo import cnn, resnetv1


class HandCifarNet(nn.Module):
    @nn.compact
    def __call__(self, x, training: bool = False):
        x = nn.Conv(32, (1, 1), name="proj")(x)
        for i, width in enumerate((64, 128)):
            x = nn.Conv(width, (3, 3), name=f"conv_layer{i}/conv")(x)
            x = nn.avg_pool(nn.relu(x), (2, 2), (2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(256, name="fc/dense")(x))
        return nn.Dense(10, name="fc/logits")(x)


class HandResNet18(nn.Module):
    @nn.compact
    def __call__(self, x, training: bool = False):
        conv = lambda f, k, s=1: nn.Conv(f, (k, k), (s, s), use_bias=False)  # noqa: E731
        bn = lambda **kw: nn.BatchNorm(use_running_average=not training, momentum=0.9,  # noqa: E731
                                       epsilon=1e-5, **kw)
        x = nn.relu(bn()(conv(64, 3)(x)))
        x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
        x = conv(64, 1)(x)
        width = 64
        for stage in range(4):
            for layer in range(2):
                stride = 2 if stage > 0 and layer == 0 else 1
                out = 64 * 2**stage
                y = conv(out, 3, stride)(x)
                y = nn.relu(bn()(y))
                y = bn(scale_init=nn.initializers.zeros)(conv(out, 3)(y))
                if stride != 1 or out != width:
                    x = bn()(conv(out, 1, stride)(x))
                x = nn.relu(y + x)
                width = out
        return nn.Dense(10, kernel_init=nn.initializers.zeros)(jnp.mean(x, axis=(1, 2)))


def make_step(module: nn.Module, x: jax.Array):
    variables = module.init(jax.random.PRNGKey(0), x)
    params, state = variables["params"], {k: v for k, v in variables.items() if k != "params"}
    tx = optax.sgd(0.01, momentum=0.9)
    opt_state = tx.init(params)
    labels = jnp.zeros((x.shape[0],), jnp.int32)

    @jax.jit
    def step(params, state, opt_state, x):
        def loss_fn(p):
            logits, new_state = module.apply({"params": p, **state}, x, training=True,
                                             mutable=list(state))
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
            return loss, new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_state, opt_state, loss

    carry = [params, state, opt_state]

    def run(steps: int) -> float:
        start = time.perf_counter()
        for _ in range(steps):
            *new, loss = step(*carry, x)
            carry[:] = new
        loss.block_until_ready()
        return time.perf_counter() - start

    run(1)  # compile
    return run


def count(module: nn.Module, x: jax.Array) -> int:
    shapes = jax.eval_shape(lambda: module.init(jax.random.PRNGKey(0), x))
    return sum(a.size for a in jax.tree.leaves(shapes["params"]))


def compare(name: str, ir: nn.Module, hand: nn.Module, batch: int, rounds: int, steps: int):
    x = jax.random.normal(jax.random.PRNGKey(1), (batch, 32, 32, 3))
    assert count(ir, x) == count(hand, x), "the two networks must be the same size"
    runs = {"ir": make_step(ir, x), "hand": make_step(hand, x)}
    times: dict[str, list[float]] = {"ir": [], "hand": []}
    for r in range(rounds):
        for key in (("ir", "hand") if r % 2 == 0 else ("hand", "ir")):
            times[key].append(runs[key](steps))
    ips = {k: batch * steps / statistics.median(v) for k, v in times.items()}
    print(f"| {name} | {batch} | {ips['hand']:.1f} | {ips['ir']:.1f} | "
          f"{ips['ir'] / ips['hand']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    print(f"jax {jax.__version__}, devices {jax.devices()}")
    print("| model | batch | hand-written img/s | IR img/s | ratio IR/hand |")
    print("|---|---|---|---|---|")
    compare("CifarNet", Model(*cnn.CifarNet()[:2]), HandCifarNet(), 128, args.rounds, args.steps)
    graph, constants, _ = resnetv1.ResNet18(num_classes=10, input_resolution="small")
    compare("ResNet18 (small)", Model(graph, constants), HandResNet18(), 32, args.rounds,
            args.steps)


if __name__ == "__main__":
    main()
