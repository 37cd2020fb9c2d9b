"""Where do children of a user's model start, and where do they end?

Each `--model` is searched once, and each child's parent's validation accuracy, its own
before fine-tuning (`start_accuracy`: inherited and fitted weights) and after are shown,
with the ops its mutation made: the share of children within 2 pt of their parent, the
moves proposed and refused, and the cheapest child within 1 pt of the seed on validation.

- `gated`: a user's linen model (conv, GroupNorm, a sigmoid gate, a residual, a
  flatten-dense head); `plain`: `benchmarks/first_try.py`'s CNN; `nnx`: a user's NNX
  residual CNN (BatchNorm, a two-conv residual block); `convnext`: a user's NNX
  ConvNeXt-style net (a depthwise 7x7 conv, LayerNorm, an inverted bottleneck, a
  layer-scale parameter held by the module, a residual, a strided patch conv). Each is
  imported untrained with
  `nas.from_flax` and searched with `nas.run_search`'s defaults on small grey images
  (14x14: Fashion-MNIST with `--fashion DIR`, else scikit-learn's digits).
- `trained`: `gated` trained first by a plain optax loop (Adam, 15 epochs) and imported
  with its weights, as a user who brings a trained model does.
- `python`: the README's "From Python" example as written (its `Net`, digits at 8x8x3, its
  split, loss, cost and overrides; 10 candidates).
- `readme`: the README search (`configs/digits_cnn_search.py`: CifarNet on the bundled
  digits) through the driver, as `nas-search --config=configs/digits_cnn_search.py` runs it.

Then what the user takes home: `result.recommended` evaluated here on the test images
(every model but `readme`), beside the seed the search trained, evaluated the same way.

`--set KEY=VALUE` (a Python literal) goes on top of each model's own overrides. The last
line is `SUMMARY key=value ...` for scripts.

    python benchmarks/child_starts.py --workdir /tmp/cs --model python [--candidates 10]
"""

from __future__ import annotations

import argparse
import ast
import os
import runpy
import shutil
import time
from collections import Counter
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

import nas

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ("gated", "plain", "nnx", "convnext", "trained", "python", "readme")
README_PYTHON_CANDIDATES = 10  # the README's From Python example; others 8 (readme: its config's)


class GatedNet(nn.Module):
    """Conv, GroupNorm, a sigmoid gate and a residual, then a flatten-dense head."""

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.GroupNorm(num_groups=4)(nn.Conv(16, (3, 3))(x)))
        gate = nn.sigmoid(nn.Conv(16, (1, 1))(x))
        x = x + x * gate
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = nn.max_pool(x, (2, 2), (2, 2))
        x = x.reshape((x.shape[0], -1))
        x = nn.relu(nn.Dense(64)(x))
        return nn.Dense(10)(x)


class ResidualNnx(nnx.Module):
    """A user's NNX residual CNN: conv + BatchNorm, a block of two 3x3 convs with a skip
    add, a max pool, a wider conv, a global mean pool and a linear head."""

    def __init__(self, rngs: nnx.Rngs):
        self.stem = nnx.Conv(1, 16, (3, 3), rngs=rngs)
        self.bn = nnx.BatchNorm(16, rngs=rngs)
        self.block_a = nnx.Conv(16, 16, (3, 3), rngs=rngs)
        self.block_b = nnx.Conv(16, 16, (3, 3), rngs=rngs)
        self.wide = nnx.Conv(16, 32, (3, 3), rngs=rngs)
        self.head = nnx.Linear(32, 10, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn(self.stem(x)))
        x = nnx.relu(x + self.block_b(nnx.relu(self.block_a(x))))
        x = nnx.max_pool(x, (2, 2), (2, 2))
        x = nnx.relu(self.wide(x))
        return self.head(jnp.mean(x, axis=(1, 2)))


class ConvNeXtNnx(nnx.Module):
    """A user's ConvNeXt-style NNX net: a conv stem, one block (depthwise 7x7, LayerNorm,
    4x inverted bottleneck, GELU, a layer scale, a residual), a 2x2 patch conv at stride
    2, a mean pool, LayerNorm and a linear head."""

    def __init__(self, rngs: nnx.Rngs, width: int = 24):
        self.stem = nnx.Conv(1, width, (3, 3), rngs=rngs)
        self.depthwise = nnx.Conv(width, width, (7, 7), feature_group_count=width,
                                  rngs=rngs)
        self.norm = nnx.LayerNorm(width, rngs=rngs)
        self.expand = nnx.Linear(width, 4 * width, rngs=rngs)
        self.project = nnx.Linear(4 * width, width, rngs=rngs)
        self.scale = nnx.Param(jnp.full((width,), 0.1))
        self.down = nnx.Conv(width, 2 * width, (2, 2), strides=(2, 2), rngs=rngs)
        self.head_norm = nnx.LayerNorm(2 * width, rngs=rngs)
        self.head = nnx.Linear(2 * width, 10, rngs=rngs)

    def __call__(self, x):
        x = self.stem(x)
        y = self.project(nnx.gelu(self.expand(self.norm(self.depthwise(x)))))
        x = self.down(x + self.scale * y)
        return self.head(self.head_norm(jnp.mean(x, axis=(1, 2))))


# The README's "From Python" example, as written there (module level: workers import it;
# two lines keep the README's length).
class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(32, (3, 3))(nn.max_pool(nn.relu(nn.Conv(16, (3, 3))(x)), (2, 2), (2, 2))))  # noqa: E501
        return nn.Dense(10)(x.reshape((x.shape[0], -1)))


def smoothed_loss(logits, labels):  # runs inside the compiled train step
    return optax.softmax_cross_entropy(logits, optax.smooth_labels(jax.nn.one_hot(labels, 10), 0.1)).mean()  # noqa: E501


def kilo_params(candidate):  # a cost of your own, lower is better
    return sum(np.size(p) for p in jax.tree.leaves(candidate.variables["params"])) / 1e3


def python_search(workdir: str, candidates: int, overrides: dict[str, Any]
                  ) -> tuple[Any, tuple[np.ndarray, np.ndarray]]:
    """The README's "From Python" search, its overrides under `overrides`; (study, its
    test images and labels)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = np.repeat(np.uint8(d.images * 255 / 16)[..., None], 3, axis=-1)  # (1797, 8, 8, 3)
    test = np.arange(len(x)) % 5 == 0
    probe = jnp.zeros((1, 8, 8, 3))
    seed = nas.from_flax(Net(), probe, variables=Net().init(jax.random.PRNGKey(0), probe))
    readme = {"search.seed_epochs": 20.0, "search.selection.min_acc": 0.0,
              "search.selection.costs": ("flops", "kilo_params")}
    result = nas.run_search(seed, (x[~test], d.target[~test], x[test], d.target[test]),
                            workdir=workdir, max_candidates=candidates, loss=smoothed_loss,
                            costs={"kilo_params": kilo_params},
                            overrides={**readme, **overrides}, progress=False)
    return result.study, (x[test], d.target[test])


def readme_search(workdir: str, candidates: int | None, overrides: dict[str, Any]) -> Any:
    """The README search (`configs/digits_cnn_search.py`) through the driver, as
    `nas-search` runs it; `candidates` None keeps the config's max_candidates."""
    from nas.search.execution.driver import Driver
    from nas.search.inputs import apply_overrides

    config = runpy.run_path(os.path.join(ROOT, "configs", "digits_cnn_search.py"))[
        "get_config"]()
    apply_overrides(config, overrides)
    if candidates is not None:
        config.search.max_candidates = candidates
    return Driver(config, workdir).run(progress=False)


def plain_trained(module: nn.Module, x: np.ndarray, y: np.ndarray, epochs: int = 15
                  ) -> Any:
    """`module`'s variables after a user's own optax loop: Adam 1e-3, batches of 64."""
    images = np.asarray(nas.preprocess(x))
    variables = module.init(jax.random.PRNGKey(0), images[:1])
    tx = optax.adam(1e-3)
    state = tx.init(variables["params"])

    @jax.jit
    def step(params, state, xb, yb):
        def loss(p):
            logits = module.apply({"params": p}, xb)
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

        grads = jax.grad(loss)(params)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    params = variables["params"]
    rng = np.random.default_rng(0)
    for _ in range(epochs):
        order = rng.permutation(len(images))
        for i in range(0, len(order) - 63, 64):
            batch = order[i:i + 64]
            params, state = step(params, state, images[batch], y[batch])
    return {"params": params}


def user_search(model: str, fashion: str, workdir: str, candidates: int,
                overrides: dict[str, Any]) -> tuple[Any, str, tuple[np.ndarray, np.ndarray]]:
    """A user's model imported with `nas.from_flax` (untrained, or trained by a plain
    optax loop) and searched with `nas.run_search`'s defaults on 14x14 grey images;
    (study, data name, its test images and labels)."""
    first_try = runpy.run_path(os.path.join(HERE, "first_try.py"))
    n = 4000 if fashion else 1797
    images, labels, name = first_try["load_images"](fashion, n, 14)
    cut = n * 9 // 10
    data = (images[:cut], labels[:cut], images[cut:], labels[cut:])
    probe = jnp.zeros((1, 14, 14, 1), jnp.float32)
    if model in ("nnx", "convnext"):
        module = (ResidualNnx if model == "nnx" else ConvNeXtNnx)(nnx.Rngs(0))
        module.eval()  # BatchNorm reads its running statistics when imported
    else:
        module = GatedNet() if model in ("gated", "trained") else first_try["UserCNN"]()
    variables = (plain_trained(module, data[0][..., None], data[1]) if model == "trained"
                 else None)
    seed = nas.from_flax(module, probe, variables=variables)
    if variables is not None:
        print(f"the user's own loop: test {test_accuracy(seed, data[2], data[3]):.4f}")
    result = nas.run_search(seed, data, workdir=workdir, max_candidates=candidates,
                            overrides=overrides, progress=False)
    return result.study, name, (data[2], data[3])


def test_accuracy(model: Any, images: np.ndarray, labels: np.ndarray) -> float:
    """`model` (anything called on a batch, as `nas.load_candidate` gives) on uint8
    `images`, preprocessed as the search's evaluation sees them."""
    x = np.asarray(nas.preprocess(images if images.ndim == 4 else images[..., None]))
    right = sum(int(np.sum(np.asarray(model(x[i:i + 256])).argmax(-1) == labels[i:i + 256]))
                for i in range(0, len(x), 256))
    return right / len(x)


def take_home(study: Any, test: tuple[np.ndarray, np.ndarray] | None) -> str:
    """What `result.recommended` is, and its test accuracy evaluated here beside the
    search's seed's (`key=value` words for the SUMMARY line)."""
    from nas.search.result import SearchResult
    from nas.search.store.finals import answer

    result = SearchResult(study)
    found = answer(study)
    chosen, kept = found.recommendation, found.take_home
    ratio = chosen.cost_ratio if chosen.cost_ratio is not None else 1.0
    source = kept.source if kept is not None else "search"
    seed_id = chosen.seed.id if chosen.seed is not None else 1
    if test is None:
        home = kept.metrics.get("test_accuracy") if kept is not None else None
        seed = chosen.seed.metrics.get("test_accuracy") if chosen.seed is not None else None
    else:
        home = test_accuracy(result.recommended, *test)
        seed = test_accuracy(result.load_candidate(seed_id), *test)
    finals = found.table.wall_s if found.table is not None else 0.0
    print(f"taken home: candidate {chosen.candidate.id} at {ratio:.3f}x the seed's FLOPs "
          f"({source}), test {home}; the search's seed (candidate {seed_id}) test {seed}; "
          f"finals {finals or 0:.0f} s")
    return (f"home_id={chosen.candidate.id} home_flops={ratio:.3f} home_source={source} "
            f"home_test={home} seed_test={seed} finals_s={finals or 0:.0f}")


def report(study: Any, model: str, name: str, seconds: float,
           test: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """The per-child markdown table and what is taken home, then one `SUMMARY` line."""
    done = {c.id: c for c in study.candidates("done")}
    seed_row = min((c for c in done.values() if c.parent_id is None), key=lambda c: c.id)
    print(f"{name}, {model}: seed {seed_row.accuracy:.3f} after "
          f"{seed_row.metrics.get('epochs')} epochs in {seed_row.metrics.get('rounds', 1)} "
          f"round(s) ({seed_row.metrics.get('round_accuracies')})")
    print("| child | parent | parent acc | start acc | final acc | within 2 pt | FLOPs x seed "
          "| kind | new ops |")
    print("|---|---|---|---|---|---|---|---|---|")
    children = [c for c in done.values() if c.parent_id is not None and c.parent_id in done]
    within = starts_within = 0
    near_seed: list[tuple[float, int]] = []  # (FLOPs ratio, id) within 1 pt of the seed
    for c in children:
        parent = done[c.parent_id]
        start = c.metrics.get("start_accuracy")
        ok = c.accuracy >= parent.accuracy - 0.02
        within += ok
        starts_within += start is not None and start >= parent.accuracy - 0.02
        ratio = c.flops / seed_row.flops if c.flops and seed_row.flops else None
        if ratio is not None and c.accuracy >= seed_row.accuracy - 0.01:
            near_seed.append((ratio, c.id))
        new = [node["op"]["type"] for node in (study.get(c.id).spec or [])]
        print(f"| {c.id} | {c.parent_id} | {parent.accuracy:.3f} | "
              f"{'' if start is None else f'{start:.3f}'} | {c.accuracy:.3f} | "
              f"{'yes' if ok else 'no'} | {'' if ratio is None else f'{ratio:.3f}'} | "
              f"{c.inheritance.get('kind')} | {', '.join(new)} |")
    cheap = sorted(i for r, i in near_seed if r <= 0.8)
    failed = study.counts().get("failed", 0)
    print(f"within 2 pt of their parent: {within} of {len(children)}; at <= 0.8x the seed's "
          f"FLOPs within 1 pt of it: {cheap or 'none'}; failed: {failed}")
    proposed = Counter(str(c.inheritance.get("kind")) for c in children)
    refused = Counter(str(r.kind) for r in study.refusals())
    print(f"moves trained: {dict(sorted(proposed.items()))}; refused: "
          f"{dict(sorted(refused.items())) or 'none'}")
    print(study.workdir)
    home = take_home(study, test)
    share = within / len(children) if children else 0.0
    cheapest = f"{min(near_seed)[0]:.3f}" if near_seed else "none"
    print(f"SUMMARY model={model} children={len(children)} within2={within} share={share:.2f} "
          f"starts_within2={starts_within} cheap=[{','.join(map(str, cheap))}] "
          f"cheapest_within1={cheapest} failed={failed} seed_acc={seed_row.accuracy:.3f} "
          f"seconds={seconds:.0f} {home}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--fashion", default="")
    parser.add_argument("--model", default="gated", choices=MODELS)
    parser.add_argument("--candidates", type=int, default=None,
                        help="max_candidates, the seed included (default: python 10, readme "
                             "its config's, else 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[],
                        help="an override KEY=VALUE (python literal), e.g. "
                             "search.mutation.net2net_p=0.5")
    args = parser.parse_args()
    overrides: dict[str, Any] = {"search.seed": args.seed}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set {item!r}: expected KEY=VALUE")
        overrides[key] = ast.literal_eval(value)
    shutil.rmtree(args.workdir, ignore_errors=True)
    start = time.perf_counter()
    name, test = "digits", None
    if args.model == "readme":
        study = readme_search(args.workdir, args.candidates, overrides)
    elif args.model == "python":
        candidates = args.candidates or README_PYTHON_CANDIDATES
        study, test = python_search(args.workdir, candidates, overrides)
        name = "digits 8x8x3"
    else:
        study, name, test = user_search(args.model, args.fashion, args.workdir,
                                        args.candidates or 8, overrides)
    report(study, args.model, name, time.perf_counter() - start, test)


if __name__ == "__main__":
    main()
