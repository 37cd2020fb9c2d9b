"""Why does a seed train slower under the search's recipe than in a plain optax loop?

A user's untrained linen CNN, imported with `nas.from_flax`, on 4,000 small grey images
(14x14): Fashion-MNIST when `--fashion DIR` names its idx files (Debian's
dataset-fashion-mnist), else scikit-learn's digits upscaled. Every row starts from the
same weights and trains on the same 3,600 images for the same number of steps, and is
scored on the same 400 held-out ones:

  plain      AdamW (lr 2e-3, optax's default wd), batches of 64, no schedule, no augmentation
  recipe     `nas.train.recipes.small_images` through `train_and_eval`, as the seed of a
             search trains (`search.seed_epochs` 3 of `nas.search.presets.evolution`)
  recipe -X  the same with one part of the recipe changed (X below)

    python benchmarks/first_try.py [--fashion /usr/share/datasets/fashion-mnist] [--epochs 3]
"""

from __future__ import annotations

import argparse
import gzip
import os
import tempfile
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import nas
from nas.graph import Model
from nas.train import TrainOptions, train_and_eval
from nas.train.recipes import small_images


class UserCNN(nn.Module):
    """What a user might write first: two convs, pooling, a flatten-dense head."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(16, (3, 3))(x))
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(64)(x))
        return nn.Dense(10)(x)


def _idx(path: str) -> np.ndarray:
    with gzip.open(path) as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_images(fashion: str, n: int, size: int, seed: int = 0
                ) -> tuple[np.ndarray, np.ndarray, str]:
    """(uint8 images (n, size, size), labels, name): a fixed random subset."""
    import PIL.Image

    if fashion:
        x = _idx(os.path.join(fashion, "train-images-idx3-ubyte.gz"))
        y = _idx(os.path.join(fashion, "train-labels-idx1-ubyte.gz"))
        name = "fashion-mnist"
    else:
        from sklearn.datasets import load_digits

        d = load_digits()
        x = (d.images * (255 / 16)).astype(np.uint8)
        y = d.target
        name = "sklearn digits"
    idx = np.random.default_rng(seed).permutation(len(x))[:n]
    small = np.stack([np.asarray(PIL.Image.fromarray(im).resize((size, size),
                                                                PIL.Image.BILINEAR))
                      for im in x[idx]])
    return small, y[idx].astype(np.int64), name


def plain_loop(graph, constants, variables, x, y, xv, yv, steps: int, seed: int) -> float:
    """AdamW 2e-3, batches of 64 drawn by epochs of a permutation, no schedule."""
    model = Model(graph, constants)
    tx = optax.adamw(2e-3)
    params = variables["params"]
    state = tx.init(params)
    rest = {k: v for k, v in variables.items() if k != "params"}

    def loss(p, xb, yb):
        logits = model.apply({"params": p, **rest}, xb, deterministic=True, training=False)
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    @jax.jit
    def step(p, s, xb, yb):
        g = jax.grad(loss)(p, xb, yb)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s

    rng = np.random.default_rng(seed)
    order: list[int] = []
    for _ in range(steps):
        if len(order) < 64:
            order += list(rng.permutation(len(x)))
        batch, order = order[:64], order[64:]
        params, state = step(params, state, x[batch], y[batch])
    logits = model.apply({"params": params, **rest}, xv, deterministic=True, training=False)
    return float((np.asarray(logits).argmax(-1) == yv).mean())


def recipe_config(npz: str, size: int, epochs: float, changes: str):
    """The recipe with each of `changes` ("+"-joined) applied."""
    c = small_images()
    c.input.data.name = f"npz:{npz}"
    c.input.image_size = size
    c.input.channels = 1
    c.eval.data.split = "test"
    c.eval.batch_size = 400
    c.total_epochs = epochs
    c.num_classes = 10
    c.log_training_steps = 1000
    c.ckpt_steps = 0
    c.precise_bn_batches = 0
    for change in filter(None, changes.split("+")):
        _change(c, change)
    return c


def _change(c, change: str) -> None:
    if change == "no_aug":
        c.input.augment = False
    elif change == "constant":
        c.schedule = dict(decay_type="constant", warmup_steps=20)
    elif change == "no_warmup":
        c.schedule = dict(decay_type="cosine", warmup_steps=0)
    elif change == "min_value":
        c.schedule = dict(decay_type="cosine", warmup_steps=20, min_value=0.1)
    elif change == "no_clip":
        c.grad_clip_norm = 0.0
    elif change == "no_wd":
        c.wd = 0.0
    elif change == "plainlike":  # no aug, constant, no clip, no wd
        c.input.augment = False
        c.schedule = dict(decay_type="constant", warmup_steps=0)
        c.grad_clip_norm = 0.0
        c.wd = 0.0
    else:
        raise ValueError(f"unknown change {change!r}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fashion", default="")
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--size", type=int, default=14)
    parser.add_argument("--changes", default="no_aug,constant,no_warmup,min_value,no_clip,"
                                             "no_wd,plainlike")
    args = parser.parse_args()
    n = 4000 if args.fashion else 1797
    images, labels, name = load_images(args.fashion, n, args.size)
    n_val = n // 10
    x_tr, y_tr, x_val, y_val = images[n_val:], labels[n_val:], images[:n_val], labels[:n_val]
    tmp = tempfile.mkdtemp(prefix="first_try_")
    npz = os.path.join(tmp, "data.npz")
    np.savez(npz, x_train=x_tr[..., None], y_train=y_tr, x_test=x_val[..., None],
             y_test=y_val)
    os.environ.setdefault("NAS_DATA_DIR", os.path.join(tmp, "tfds"))
    x0 = jnp.zeros((1, args.size, args.size, 1), jnp.float32)
    seed = nas.from_flax(UserCNN(), x0)
    steps = int(len(x_tr) / 64 * args.epochs)
    # The recipe's npz preprocessing scales uint8 to [-1, 1]: the plain loop sees the same.
    xf = x_tr[..., None].astype(np.float32) / 127.5 - 1.0
    xvf = x_val[..., None].astype(np.float32) / 127.5 - 1.0
    print(f"{name}: {len(x_tr)} train / {len(x_val)} held out, {args.size}x{args.size} grey, "
          f"{steps} steps ({args.epochs:g} epochs of batches of 64)")
    t = time.perf_counter()
    acc = plain_loop(seed.graph, seed.constants, seed.variables, xf, y_tr, xvf, y_val, steps, 0)
    print(f"| plain AdamW 2e-3, no schedule | {acc:.3f} | {time.perf_counter() - t:.0f} s |")
    for change in [""] + [c for c in args.changes.split(",") if c]:
        config = recipe_config(npz, args.size, args.epochs, change)
        t = time.perf_counter()
        metrics, _, _ = train_and_eval(config, eval_perf=False,
                                       options=TrainOptions(graph=seed.graph,
                                                            constants=seed.constants,
                                                            init_variables=seed.variables,
                                                            progress=False))
        label = "recipe" + (f" -{change}" if change else "")
        print(f"| {label} | {metrics.acc:.3f} | {time.perf_counter() - t:.0f} s | "
              f"{metrics.steps} steps |", flush=True)


if __name__ == "__main__":
    main()
