"""The data-parallel train and eval steps, written for one device's share of a batch.

Why a separate file: `train.py` reads top to bottom as the loop; the math of one step lives
here, where tests can build it around any flax module and compare a 2-device step with a
1-device step on the whole batch.

Semantics: each device gets `batch / devices` examples; the steps run under `jax.shard_map`
over the data axis of a mesh (`nas.train.mesh.data_parallel`, `train_program`,
`eval_program`). Gradients are taken per device and averaged over devices with `pmean`:
the parameters are marked device-varying first (`lax.pcast`), because the gradient of a
per-device loss with respect to replicated parameters would already be summed over the
devices, and a mean of that sum is the devices' count times too large (checked numerically
against a single device, tests/train/test_data_parallel.py). BatchNorm uses per-device
batch statistics in the forward pass and the running averages are averaged over devices
after every step, so every device holds the same state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from nas.train import extras, optim, precise_bn
from nas.train import mesh as mesh_lib

AXIS = mesh_lib.AXIS
State = dict[str, Any]
# (logits, integer labels) -> scalar, or (logits, labels, batch) -> scalar (`extras`)
LossFn = Callable[..., jax.Array]
AugmentFn = Callable[[jax.Array, jax.Array], jax.Array]  # (key, images) -> images
_AUGMENT_STREAM = 0x5EED  # folded into a step's key: the augmentation's own draws


def softmax_xent(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Per-example cross-entropy against one-hot (or soft) labels."""
    return -jnp.sum(labels * jax.nn.log_softmax(logits, axis=-1), axis=-1)


def mean_xent(num_classes: int) -> LossFn:
    """The built-in loss: mean cross-entropy of integer labels."""
    return lambda logits, labels: jnp.mean(softmax_xent(logits, jax.nn.one_hot(labels,
                                                                              num_classes)))


def batch_loss(loss_fn: LossFn | None, num_classes: int
               ) -> Callable[[jax.Array, jax.Array, jax.Array, Any], jax.Array]:
    """(logits, labels, images, batch) -> the batch's loss: the user's two-argument loss, or
    their batch-taking one given `extras.loss_batch` (the images as the model saw them and
    the batch's extras), or the built-in mean cross-entropy."""
    if loss_fn is None:
        built_in = mean_xent(num_classes)
        return lambda logits, labels, images, batch: built_in(logits, labels)
    if not extras.takes_batch(loss_fn):
        return lambda logits, labels, images, batch: loss_fn(logits, labels)
    return lambda logits, labels, images, batch: extras.call_loss(
        loss_fn, logits, labels, extras.loss_batch(images, labels, batch))


def example_losses(loss_fn: LossFn | None, num_classes: int
                   ) -> Callable[..., jax.Array]:
    """(logits, labels, images=None, batch=None) -> each example's loss: the user's loss of
    a batch of one (a batch-taking loss sees that example's images and extras)."""
    if loss_fn is None:
        return lambda logits, labels, images=None, batch=None: softmax_xent(
            logits, jax.nn.one_hot(labels, num_classes))
    whole = batch_loss(loss_fn, num_classes)

    def one(lg: jax.Array, lb: jax.Array, im: jax.Array, b: Any) -> jax.Array:
        b = jax.tree.map(lambda x: x[None], b)
        return jnp.reshape(whole(lg[None], lb[None], im[None], b), ())

    def fn(logits: jax.Array, labels: jax.Array, images: jax.Array | None = None,
           batch: Any = None) -> jax.Array:
        if images is None:
            images = jnp.zeros((logits.shape[0], 0), jnp.float32)
        b = {k: batch[k] for k in extras.keys_of(batch)} if batch is not None else {}
        return jax.vmap(one)(logits, labels, images, b)

    return fn


def cast_floats(tree: Any, dtype: Any) -> Any:
    """Floating leaves of `tree` in `dtype` (the compute dtype); others unchanged."""
    if dtype is None or np.dtype(dtype) == np.float32:
        return tree
    return jax.tree.map(
        lambda x: x.astype(dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x, tree)


def _variables(params: Any, frozen: Any, batch_stats: Any,
               compute_dtype: Any = None) -> dict[str, Any]:
    """Model variables; params (not batch statistics, kept f32) cast to the compute dtype."""
    out = {"params": cast_floats({**frozen, **params}, compute_dtype)}
    if batch_stats:
        out["batch_stats"] = batch_stats
    return out


def make_train_step(
    model: Any,
    tx: optax.GradientTransformation,
    num_classes: int,
    *,
    ema_decay: float = 0.0,
    ema_warmup_steps: int = 0,
    return_grads: bool = False,
    compute_dtype: Any = None,
    loss_fn: LossFn | None = None,
    augment_fn: AugmentFn | None = None,
) -> Callable[[State, dict[str, jax.Array], jax.Array], tuple[State, dict[str, jax.Array]]]:
    """(state, batch, rng) -> (state, metrics) of one device's share of the batch, to be
    run over a mesh's data axis `AXIS` (`train_program`).

    The dropout key of step s on device d is fold_in(fold_in(rng, s), d): a resumed run
    draws exactly the keys an uninterrupted one would.

    compute_dtype (e.g. bfloat16): images and a cast of the params enter the model in it, so
    activations and matmuls run in it; params, gradients, optimizer state, batch-norm
    statistics and the loss stay float32.

    loss_fn(logits, labels) -> scalar (integer labels; a user's loss, `nas.train.custom`),
    or loss_fn(logits, labels, batch) (`nas.train.extras`), replaces the mean
    cross-entropy; augment_fn(key, images) -> images runs on each
    device's float32 images first, with a key of its own per step and device.
    """
    objective = batch_loss(loss_fn, num_classes)

    def step_fn(state: State, batch: dict[str, jax.Array], rng: jax.Array):
        step = state["step"]
        key = jax.random.fold_in(jax.random.fold_in(rng, step), jax.lax.axis_index(AXIS))
        images = batch["image"]
        if augment_fn is not None:
            images = augment_fn(jax.random.fold_in(key, _AUGMENT_STREAM), images)

        def loss_of(params):
            logits, new_vars = model.apply(
                _variables(params, state["frozen"], state["batch_stats"], compute_dtype),
                cast_floats(images, compute_dtype),
                deterministic=False,
                training=True,
                rngs={"dropout": key},
                mutable=["batch_stats"],
            )
            loss = jnp.reshape(objective(logits.astype(jnp.float32),
                                         batch["label"].reshape(-1), images, batch), ())
            stats = jax.tree.map(lambda new, old: new.astype(old.dtype),
                                 new_vars.get("batch_stats", {}), state["batch_stats"])
            correct = jnp.mean(jnp.argmax(logits, axis=-1) == batch["label"].reshape(-1))
            return loss, (stats, correct)

        # Per-device gradients, then their mean (see the module docstring).
        local = jax.lax.pcast(state["params"], AXIS, to="varying")
        (loss, (batch_stats, correct)), grads = jax.value_and_grad(loss_of, has_aux=True)(local)
        grads = jax.lax.pmean(grads, AXIS)
        batch_stats = jax.lax.pmean(batch_stats, AXIS)
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(params=state["params"], updates=updates)
        new = dict(state, params=params, opt_state=opt_state, batch_stats=batch_stats,
                   step=step + 1)
        if ema_decay:
            new["ema"] = optim.ema_update(
                state["ema"], {"params": {**state["frozen"], **params},
                               "batch_stats": batch_stats},
                step + 1, ema_decay, ema_warmup_steps,
            )
        metrics = {
            "training_loss": jax.lax.pmean(loss, AXIS),
            # accuracy on the (augmented) training batch: the curve between evaluations
            "training_accuracy": jax.lax.pmean(correct.astype(jnp.float32), AXIS),
            "l2_grads": optax.tree.norm(grads),
            "l2_params": optax.tree.norm(params),
            "l2_updates": optax.tree.norm(updates),
        }
        if return_grads:
            metrics["grads"] = grads
        return new, metrics

    return step_fn


def make_eval_step(model: Any, num_classes: int, compute_dtype: Any = None,
                   statistics_rows: int = 0, loss_fn: LossFn | None = None
                   ) -> Callable[..., dict[str, jax.Array]]:
    """(variables, batch, use_batch_statistics) -> summed correct / loss / count over
    devices, mask-aware, "batch_statistics" of this device (a leading axis of one, so the
    program's output stacks them, one row per device), and "per_example": each of this
    device's rows right (1) or wrong (0), padding rows 0 (the caller drops them by the
    batch's mask), so a search can compare two candidates example by example.

    With `statistics_rows`, a true `use_batch_statistics` (a replicated boolean) makes the
    step compute instead the batch-norm statistics of the first `statistics_rows` images of
    each device's share ({BN op name: {"mean", "var"}}, `precise_bn.batch_statistics`, in
    float32 whatever the compute dtype); otherwise they are the running averages.
    A user's `loss_fn` is summed over the real rows one example at a time, so the mean
    reported is the training loss's own.

    Why one program: a network with batch norms compiled its evaluation and its statistics
    separately; as the two branches of one `lax.cond` a search child compiles one program
    fewer, and each branch runs as fast as it did alone (benchmarks/eval_statistics.py;
    choosing the statistics inside the network instead broke XLA:CPU's fusion of the whole
    evaluated network and doubled an evaluation)."""
    per_example = example_losses(loss_fn, num_classes)

    def per_example_loss(logits: jax.Array, batch: dict[str, jax.Array]) -> jax.Array:
        """A split without the extras a loss reads (the test split) has no loss: NaN."""
        labels = batch["label"].reshape(-1)
        try:
            return per_example(logits, labels, batch["image"], batch)
        except extras.MissingExtra:
            if extras.keys_of(batch):
                raise
            return jnp.full(labels.shape, jnp.nan, jnp.float32)

    momenta = precise_bn.recomputable(model.graph)
    statistics = precise_bn.batch_statistics(model, momenta) if statistics_rows else None

    def running(variables: dict[str, Any]) -> dict[str, Any]:
        stats = variables.get("batch_stats", {})
        return {name: stats[name] for name in precise_bn.present(momenta, stats)}

    def evaluation(variables: dict[str, Any], batch: dict[str, jax.Array]):
        cast = dict(variables, params=cast_floats(variables["params"], compute_dtype))
        logits = model.apply(cast, cast_floats(batch["image"], compute_dtype),
                             deterministic=True, training=False).astype(jnp.float32)
        mask = batch["mask"]
        loss = per_example_loss(logits, batch) * mask
        correct = (jnp.argmax(logits, axis=-1) == batch["label"]).astype(jnp.float32) * mask
        return (jnp.sum(correct), jnp.sum(loss), jnp.sum(mask)), correct.astype(jnp.uint8), \
            running(variables)

    def of_the_batch(variables: dict[str, Any], batch: dict[str, jax.Array]):
        # per-device values, as the other branch's (`lax.cond` needs them typed alike)
        zero, rows = jax.lax.pcast((jnp.zeros((), jnp.float32),
                                    jnp.zeros(batch["label"].shape, jnp.uint8)), AXIS,
                                   to="varying")
        return (zero, zero, zero), rows, statistics(variables,
                                                    batch["image"][:statistics_rows])

    def eval_fn(variables: dict[str, Any], batch: dict[str, jax.Array],
                use_batch_statistics: jax.Array):
        # Both branches give per-device values: the running averages are marked so too.
        variables = jax.lax.pcast(variables, AXIS, to="varying")
        if statistics is None:
            sums, rows, stats = evaluation(variables, batch)
        else:
            sums, rows, stats = jax.lax.cond(use_batch_statistics, of_the_batch, evaluation,
                                             variables, batch)
        correct, loss, count = jax.lax.psum(sums, AXIS)
        return {"correct": correct, "loss": loss, "count": count,
                "batch_statistics": jax.tree.map(lambda a: a[None], stats),
                "per_example": rows}

    return eval_fn


def train_program(step_fn: Callable, mesh: Any, device_data: bool = False) -> Any:
    """A train step (`make_train_step`, or `with_device_data` of one) as one jitted program
    over `mesh`: state and key replicated, the batch (or the device-resident data and the
    step's indices) split along the data axis; the state is donated."""
    rep, shard = mesh_lib.REPLICATED, mesh_lib.SHARDED
    ins = (rep, shard, shard, rep) if device_data else (rep, shard, rep)
    return mesh_lib.data_parallel(step_fn, mesh, ins, (rep, rep), donate_argnums=(0,))


def eval_program(eval_fn: Callable, mesh: Any) -> Any:
    """An eval step (`make_eval_step`) as one jitted program over `mesh`: its sums
    replicated, its per-device statistics and per-example bits split along the data axis."""
    rep, shard = mesh_lib.REPLICATED, mesh_lib.SHARDED
    outs = {"correct": rep, "loss": rep, "count": rep, "batch_statistics": shard,
            "per_example": shard}
    return mesh_lib.data_parallel(eval_fn, mesh, (rep, shard, rep), outs)


def with_device_data(step_fn: Callable, augment: Callable, seed: int) -> Callable:
    """A train step that draws its batch from this device's share of a device-resident
    dataset: (state, share, indices, rng) -> step_fn(state, augment(share, indices, key),
    rng), `indices` positions within the share.

    The augmentation key of step s on device d is fold_in(fold_in(key(seed), s), d).
    """
    base = jax.random.fold_in(jax.random.PRNGKey(seed), 0x5EED)

    def fn(state: State, share: dict[str, jax.Array], idx: jax.Array, rng: jax.Array):
        key = jax.random.fold_in(jax.random.fold_in(base, state["step"]),
                                 jax.lax.axis_index(AXIS))
        return step_fn(state, augment(share, idx, key), rng)

    return fn
