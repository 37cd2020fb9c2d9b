"""The per-layer pieces of the reversible trainer: layer models, their compiled step
functions (cached by layer structure) and each layer's own optimizer.

Why a separate module: `reversible.py` is the driver that moves weights between host and
device and walks the layers; the math of one layer (forward, reconstruct-and-backprop,
update) lives here, written for the global batch (see "functions" below); how it is packed,
placed and compiled is `revprograms`.

Layers with the same structure (same base graph, constants, optimizer grouping) share one
compiled function per input shape: parameters are passed keyed by their *base* op names
(`conv`, not `block3/rev1/f/conv`), and each layer maps its base names to the full ones.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import optax

from nas.graph import Model
from nas.graph.ops import OpType
from nas.graph.reversible import LayerRef
from nas.graph.serialize import graph_to_json
from nas.train import optim, steps

Tree = Any


def _run(model: Model, w: Tree, inputs: Sequence[jax.Array], key: jax.Array,
         deterministic: bool) -> tuple[jax.Array, ...]:
    """Apply a layer model to positional inputs; its outputs as a tuple in graph order."""
    graph = model.graph
    feed = dict(zip(graph.input_names, inputs, strict=True))
    out = model.apply({"params": w}, feed, deterministic=deterministic, training=False,
                      rngs={"dropout": key})
    return tuple(out[n] for n in graph.output_names)


def _update(tx: optax.GradientTransformation, grads: Tree, opt: Tree, w: Tree):
    updates, opt = tx.update(grads, opt, w)
    return optax.apply_updates(w, updates), opt


# --------------------------------------------------------------------------- optimizer
class _Cfg(dict):
    """Attribute access over a dict, the shape `optim.make` reads a config in."""

    __getattr__ = dict.__getitem__


def _exact(paths: Sequence[str]) -> str:
    return "^(?:" + "|".join(re.escape(p) for p in sorted(paths)) + ")$" if paths else ""


def layer_optimizer_config(config: Any, full_of_base: Mapping[str, str],
                           frozen: Sequence[str]) -> _Cfg:
    """`config` rewritten for one layer so that `optim.make` on its base-named params
    treats every parameter exactly as the full-model optimizer would (same group,
    schedule, weight decay, freezing), with patterns that name base paths only."""
    sched_cfg = config.schedule
    if isinstance(sched_cfg, Mapping) or hasattr(sched_cfg, "to_dict"):
        schedules: list[tuple[str, Any]] = [(".*", dict(sched_cfg))]
    else:
        schedules = [(str(r), None if s is None else dict(s)) for r, s in sched_cfg]
    full_tree = {full: 0 for full in full_of_base.values()}
    labels = optim.param_labels(full_tree, schedules, config.get("frozen_pattern", ""), frozen)
    base_of_full = {v: k for k, v in full_of_base.items()}
    frozen_paths = [base_of_full[p] for p, lab in labels.items() if lab == optim.FROZEN]
    groups = []
    for i, (_, sched) in enumerate(schedules):
        members = [base_of_full[p] for p, lab in labels.items() if lab == str(i)]
        if members and sched is not None:
            groups.append((_exact(members), sched))
    wd_pattern = config.get("wd_pattern", r"(^|/)kernel$")
    wd = [b for b, f in full_of_base.items() if re.search(wd_pattern, f)]
    return _Cfg(
        schedule=groups, frozen_pattern=_exact(frozen_paths),
        wd_pattern=_exact(wd) or "(?!)", optax_name=config.optax_name,
        optax=dict(config.get("optax", {})), lr=config.lr, wd=config.wd,
        grad_clip_norm=config.grad_clip_norm,
    )


def opt_signature_of(cfg: _Cfg) -> str:
    """A short stable digest of a layer's optimizer settings (layers alike share it)."""
    text = json.dumps(cfg, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- layers
@dataclass
class Layer:
    """One layer: its models (base graphs), base -> full parameter names, its optimizer."""

    ref: LayerRef
    index: int
    models: tuple[Model, ...]
    full_names: tuple[dict[str, str], ...]  # per model: base op name -> full op name
    structure: str  # cache key of the compiled functions
    tx: optax.GradientTransformation | None = None
    opt_signature: str = ""

    @property
    def kind(self) -> str:
        return self.ref.kind

    def base_params(self, full: Mapping[str, Any]) -> Tree:
        """This layer's slice of the flat full-name params, keyed by base names."""
        parts = [{b: full[f] for b, f in names.items() if f in full}
                 for names in self.full_names]
        return {"f": parts[0], "g": parts[1]} if self.kind == "coupling" else parts[0]

    def full_params(self, base: Tree) -> dict[str, Any]:
        parts = [base["f"], base["g"]] if self.kind == "coupling" else [base]
        return {names[b]: v for names, part in zip(self.full_names, parts, strict=True)
                for b, v in part.items()}

    def param_paths(self, base: Tree) -> dict[str, str]:
        """"op/param" base path -> full path, for every leaf of `base`."""
        base_paths = jax.tree.leaves(optim.param_paths(base))
        full = jax.tree.leaves(optim.param_paths(self.full_params(base)))
        return dict(zip(base_paths, full, strict=True))


def make_layers(spec: Any) -> list[Layer]:
    """`Layer`s of a `ReversibleSpec` in forward order; rejects mutable state (BatchNorm)."""
    layers = []
    for index, ref in enumerate(spec.layers()):
        models, names, keys = [], [], []
        subs = ("f/", "g/") if ref.kind == "coupling" else ("",)
        for block, sub in zip(ref.blocks, subs, strict=True):
            graph, consts = block.base_graph, block.base_constants
            for op in graph.ops:
                if op.type is OpType.BATCH_NORM:
                    raise ValueError(f"op {ref.prefix + sub + op.name!r}: BatchNorm keeps "
                                     f"running statistics, which the reversible trainer "
                                     f"does not support; use LAYER_NORM or GROUP_NORM")
            models.append(Model(graph, consts))
            names.append({op.name: ref.prefix + sub + op.name for op in graph.ops})
            keys.append(graph_to_json(graph, consts))
        digest = hashlib.sha256("|".join(keys).encode()).hexdigest()[:16]
        layers.append(Layer(ref, index, tuple(models), tuple(names), f"{ref.kind}:{digest}"))
    return layers


# --------------------------------------------------------------------------- functions
# Every function below is written for the *global* batch: the driver compiles it with the
# activations sharded over the devices' batch axis and the weights replicated, and XLA
# inserts the cross-device sums. The loss is the mean over the global batch, so weight
# gradients are those of the standard data-parallel step.
def standard_forward(layer: Layer) -> Callable:
    model = layer.models[0]

    def fn(w, xs, key):
        return _run(model, w, xs, key, deterministic=False)

    return fn


def standard_backward(layer: Layer) -> Callable:
    """Recompute forward from the kept inputs with vjp, then update the layer."""
    model, tx = layer.models[0], layer.tx

    def fn(w, opt, xs, cts, key):
        _, vjp = jax.vjp(lambda w, xs: _run(model, w, xs, key, False), w, xs)
        gw, cxs = vjp(tuple(cts))
        w, opt = _update(tx, gw, opt, w)
        return cxs, w, opt

    return fn


def coupling_forward(layer: Layer) -> Callable:
    f, g = layer.models

    def fn(w, xs, key):
        x1, x2 = xs
        y1 = x1 + _run(f, w["f"], (x2,), jax.random.fold_in(key, 0), False)[0]
        y2 = x2 + _run(g, w["g"], (y1,), jax.random.fold_in(key, 1), False)[0]
        return y1, y2

    return fn


def coupling_backward(layer: Layer) -> Callable:
    """Reconstruct (x1, x2) from (y1, y2), backprop through both halves, update.

    x2 = y2 - g(y1), x1 = y1 - f(x2); the vjps taken while reconstructing are the ones the
    backward pass needs, so the price is one extra forward of f and g, no more.
    """
    f, g = layer.models
    tx = layer.tx

    def fn(w, opt, ys, cts, key):
        y1, y2 = ys
        c1, c2 = cts
        gy1, vjp_g = jax.vjp(lambda wg, y: _run(g, wg, (y,), jax.random.fold_in(key, 1),
                                                False)[0], w["g"], y1)
        x2 = y2 - gy1
        fx2, vjp_f = jax.vjp(lambda wf, x: _run(f, wf, (x,), jax.random.fold_in(key, 0),
                                                False)[0], w["f"], x2)
        x1 = y1 - fx2
        dwg, dy1 = vjp_g(c2)
        c_y1 = c1 + dy1
        dwf, dx2 = vjp_f(c_y1)
        w, opt = _update(tx, {"f": dwf, "g": dwg}, opt, w)
        return (x1, x2), (c_y1, c2 + dx2), w, opt

    return fn


def coupling_reverse(layer: Layer) -> Callable:
    """Inputs from outputs only (tests check the reconstruction against the forward)."""
    f, g = layer.models

    def fn(w, ys):
        y1, y2 = ys
        k = jax.random.PRNGKey(0)
        x2 = y2 - _run(g, w["g"], (y1,), k, True)[0]
        x1 = y1 - _run(f, w["f"], (x2,), k, True)[0]
        return x1, x2

    return fn


def head_step(layer: Layer, num_classes: int) -> Callable:
    """Forward, loss, backward and update of the loss layer; input cotangents out."""
    model, tx = layer.models[0], layer.tx

    def fn(w, opt, xs, labels, key):
        onehot = jax.nn.one_hot(labels, num_classes)

        def loss_fn(w, xs):
            logits = _run(model, w, xs, key, False)[0]
            return jnp.mean(steps.softmax_xent(logits, onehot))

        loss, (gw, cxs) = jax.value_and_grad(loss_fn, argnums=(0, 1))(w, xs)
        w, opt = _update(tx, gw, opt, w)
        return loss, cxs, w, opt

    return fn


def head_logits(layer: Layer) -> Callable:
    model = layer.models[0]

    def fn(w, xs):
        return _run(model, w, xs, jax.random.PRNGKey(0), True)[0]

    return fn


def eval_forward(layer: Layer) -> Callable:
    """Deterministic forward of a standard or coupling layer (evaluation, prediction)."""
    if layer.kind == "coupling":
        f, g = layer.models

        def rev(w, xs):
            x1, x2 = xs
            k = jax.random.PRNGKey(0)
            y1 = x1 + _run(f, w["f"], (x2,), k, True)[0]
            return y1, x2 + _run(g, w["g"], (y1,), k, True)[0]

        return rev
    model = layer.models[0]
    return lambda w, xs: _run(model, w, xs, jax.random.PRNGKey(0), True)
