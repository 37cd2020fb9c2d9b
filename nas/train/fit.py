"""Fit a child's new subgraph to the subgraph it replaced, before the child trains.

The driver records which tensors to fit (`replaced_tensors`, kept in the candidate's
inheritance as `fit_pairs`); the worker that trains the child fits them first
(`fit_for_task`), on its own device, while the child's train and eval steps compile
(`TrainOptions.refit` of `train_and_eval`).

Why (measured with benchmarks/child_collapse.py on the README search): a child starts with
freshly initialized ops in the middle of a trained network, so before its first step it
computes nothing like its parent (test accuracy 0.01-0.11 against the parent's 0.98), and one
epoch of fine-tuning does not always bring it back (0.35, 0.09, 0.09 after it). Here the new
ops are first trained alone, inherited ops untouched, to reproduce the parent's tensors at
the points the new subgraph feeds (mean squared error on a few training batches). A new
subgraph that can express the old function (same width, or a wider/narrower chain of convs)
then starts close to it; one that cannot (say, a pool that halves the resolution) starts at
its closest fit. Afterwards the running statistics of new batch-norm ops are set to the
statistics of those batches, so evaluation does not use their initial (0, 1). A new
subgraph whose output is the same for every image (say, a layer norm over the three equal
channels of a grey image) raises `ConstantOutputError`: that child could not learn anything.
The driver checks this at the child's starting weights (`check_varies`) and proposes another
child instead; a fit that ends constant fails the candidate with that message.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from nas.train.fit_config import FitConfig


def task(
    parent_graph_json: str, parent_variables: Mapping[str, Any], new: Sequence[str],
    pairs: Sequence[Sequence[str]], train_input: Any, config: FitConfig, seed: int,
) -> dict[str, Any]:
    """The plain data a worker needs to fit a child's new ops (`fit_for_task`); every
    child of a search is fitted on the same batches (read once per process)."""
    from nas.train import data as data_lib

    return {"parent_graph_json": parent_graph_json, "parent_variables": parent_variables,
            "new": list(new), "pairs": [list(p) for p in pairs],
            "images": data_lib.plain_batches(train_input, config.batches,
                                             config.images_per_batch, seed),
            "config": dataclasses.asdict(config)}


def fit_for_task(fit: Mapping[str, Any], graph: Any, constants: Any,
                 variables: Mapping[str, Any], built: Callable[[], None] = lambda: None
                 ) -> tuple[dict[str, Any], dict[str, float]]:
    """The child's starting variables with its new ops fitted, and the metrics of the fit
    (`fit_mse_before`, `fit_mse_after`, `fit_seconds`); `fit` is from `task`. `built()` is
    called once the fit's programs are built (`TrainOptions.refit`'s protocol).

    A replaced tensor the child no longer has (or another mismatch the fit cannot use)
    leaves the variables unfitted, with a log line; `ConstantOutputError` propagates."""
    from absl import logging

    from nas.graph.serialize import load

    start = time.perf_counter()
    p_graph, p_consts = load(fit["parent_graph_json"])
    try:
        out, errors = fit_new_ops(
            (p_graph, p_consts, fit["parent_variables"]), (graph, constants, variables),
            fit["new"], [tuple(p) for p in fit["pairs"]], fit["images"],
            FitConfig(**fit["config"]), built)
    except (ValueError, KeyError) as e:
        logging.info("new ops not fitted: %s", e)
        out, errors = dict(variables), {}
    metrics = {f"fit_{k}": float(v) for k, v in errors.items()}
    limit = float(fit["config"].get("max_error", 0.0) or 0.0)
    if limit and metrics.get("fit_mse_after", 0.0) > limit:
        raise PoorFitError(f"its new ops fit the parent's tensors they replace with error "
                           f"{metrics['fit_mse_after']:.3g} > search.fit.max_error="
                           f"{limit:g}: it cannot start near its parent")
    return out, {**metrics, "fit_seconds": time.perf_counter() - start}


class PoorFitError(ValueError):
    """A child's fitted new ops stay far from the parent's tensors (`search.fit.max_error`):
    it would start far below its parent, so it is not trained."""


def replaced_tensors(spec: Sequence[Mapping[str, Any]] | Sequence[Any]) -> list[tuple[str, str]]:
    """(child tensor, parent tensor) pairs: each new output and the old tensor it replaces."""
    pairs = []
    for node in spec:
        if isinstance(node, Mapping):  # Child.spec_json() form
            op_name, outs = node["op"]["name"], node["output_names"]
        else:  # SubgraphNode
            op_name, outs = node.op.name, node.output_names
        for idx, old in enumerate(outs):
            if old is not None:
                pairs.append((f"{op_name}:{idx}", old if ":" in old else f"{old}:0"))
    return pairs


def resized_in_place(new_ops: Iterable[str]) -> list[tuple[str, str]]:
    """(child tensor, parent tensor) pairs of the ops a shrink move resized: each keeps its
    name, so each output is fitted to its parent's (the fit skips pairs whose widths now
    differ). Why: the layer after a narrowed one then learns to do without the dropped
    units before training, where it lost 38 points at its start."""
    return [(f"{name}:0", f"{name}:0") for name in sorted(new_ops)]


class ConstantOutputError(Exception):
    """A child's new subgraph computes the same tensor for every input."""


# A new output varying over the batch less than this fraction of what it replaces is
# taken as constant.
CONSTANT_RATIO = 1e-3
# Images the driver's check before the fit looks at: enough to see a varying output; its
# time is mostly running the parent and the child up to the new ops on them.
CHECK_IMAGES = 8


def _spread(x: Any) -> Any:
    """How much `x` varies over the batch: the mean over elements of the std over axis 0."""
    import jax.numpy as jnp

    return jnp.mean(jnp.std(jnp.asarray(x, jnp.float32), axis=0))


def _refuse_constant(pairs: Sequence[tuple[str, str]], mine: Sequence[Any],
                     theirs: Sequence[Any]) -> None:
    """Raises ConstantOutputError when every new output varies over the batch less than
    `CONSTANT_RATIO` of the tensor it replaces (`mine`, `theirs`: their `_spread`s)."""
    if all(float(m) < CONSTANT_RATIO * float(t) for m, t in zip(mine, theirs, strict=True)):
        raise ConstantOutputError(
            f"the new subgraph gives the same output for every image (at "
            f"{', '.join(old for _, old in pairs)}), e.g. a layer norm over identical "
            f"channels: the child could not learn")


def check_varies(parent: tuple[Any, Any, Mapping[str, Any]],
                 child: tuple[Any, Any, Mapping[str, Any]],
                 pairs: Sequence[tuple[str, str]], images: np.ndarray) -> None:
    """Raises ConstantOutputError when the child's new outputs, at its starting weights,
    are the same for every image of the first `CHECK_IMAGES` of the batch `images` (see
    `fit_new_ops`).

    Why before the fit: a new subgraph that is constant by construction (a layer norm over
    a grey image's three equal channels) stays constant whatever weights it gets, so the
    driver proposes another child instead of spending a fit and a candidate on it. A fit
    that ends constant is still refused by `fit_new_ops`, in the worker."""
    import jax

    (p_graph, p_consts, p_vars), (c_graph, c_consts, c_vars) = parent, child
    theirs_of = _inference(p_graph, p_consts, [old for _, old in pairs])
    mine_of = _inference(c_graph, c_consts, [mine for mine, _ in pairs])

    @jax.jit
    def spreads(p_vars, c_vars, x):
        """{pair index: (spread of the new output, of the old one)} for the pairs whose
        shapes agree (shapes are static here, so one trace decides and computes)."""
        theirs, mine = theirs_of(p_vars, x), mine_of(c_vars, x)
        return {i: (_spread(mine[m]), _spread(theirs[old])) for i, (m, old) in enumerate(pairs)
                if mine[m].shape == theirs[old].shape}

    usable = spreads(p_vars, c_vars, images[:CHECK_IMAGES])
    if usable:
        _refuse_constant([pairs[i] for i in usable], [m for m, _ in usable.values()],
                         [t for _, t in usable.values()])


def _inference(graph: Any, constants: Any, outputs: Sequence[str]) -> Any:
    """(variables, images) -> {tensor: value} for `outputs` of `graph` in inference mode,
    interpreting only the ops they depend on (`_with_outputs`)."""
    from nas.graph import Model

    model = Model(_with_outputs(graph, outputs), constants)
    name = graph.input_names[0]
    return lambda variables, x: model.apply(variables, {name: x}, deterministic=True,
                                            training=False)


def _with_outputs(graph: Any, outputs: Sequence[str], keep: Iterable[str] = ()) -> Any:
    """`graph` returning `outputs`, with only the ops those (and the ops `keep`) depend on.

    Why: the models here stop at the replaced tensors, mid-network; interpreting the rest
    (the classifier head, later stages) would be wasted work on every batch (`jax.jit`
    would drop it, but tracing and the eager shape probe would not)."""
    from nas.graph.ops import canonical_name

    producer = {n: op for op in graph.ops for n in op.output_names}
    wanted = [canonical_name(n) for n in outputs]
    keep = set(keep)
    wanted += [n for op in graph.ops if op.name in keep for n in op.output_names]
    needed: set[str] = set()
    while wanted:
        op = producer.get(wanted.pop())
        if op is None or op.name in needed:
            continue
        needed.add(op.name)
        wanted += _reads(op)
    ops = [op for op in graph.ops if op.name in needed]
    return dataclasses.replace(graph, ops=ops, output_names=list(outputs))


def _reads(op: Any) -> list[str]:
    """Tensors `op` reads: its inputs and the tensors its symbolic kwargs refer to."""
    from nas.graph import symbolic

    return list(op.input_names) + [
        ref.tensor for kwargs in (op.op_kwargs, op.input_kwargs) for v in kwargs.values()
        for ref in symbolic.references(v) if getattr(ref, "tensor", None)]


def _fitted_part(graph: Any, new_ops: set[str]) -> tuple[Any, list[str]]:
    """(`graph` cut to the new ops and every op that depends on one, the tensors that cut
    reads from the rest of the graph).

    Why: the rest depends only on frozen, inherited weights, so its tensors are computed
    once per batch; each fitting step then runs the new ops alone, not the network before
    them (most of the fitting time, measured in benchmarks/search.py --time-split)."""
    cut, made = [], set()
    for op in graph.ops:  # topological order
        if op.name in new_ops or any(t in made for t in _reads(op)):
            cut.append(op)
            made.update(op.output_names)
    boundary = list(dict.fromkeys(t for op in cut for t in _reads(op) if t not in made))
    return dataclasses.replace(graph, ops=cut, input_names=boundary), boundary


def _normalizes_over_batch_only(graph: Any, constants: Any, variables: Mapping[str, Any],
                                norms: Sequence[str], x: np.ndarray) -> bool:
    """Whether one of the batch norms `norms` normalizes features without spatial positions:
    its statistics then come from the batch's images alone, and a small batch makes them
    noisy (over a feature map they also average over every position)."""
    import jax

    inputs = [op.input_names[0] for op in graph.ops if op.name in set(norms)]
    if not inputs:
        return False
    shapes = jax.eval_shape(_inference(graph, constants, inputs), variables, x)
    return any(len(s.shape) <= 2 for s in shapes.values())


def fit_new_ops(
    parent: tuple[Any, Any, Mapping[str, Any]],
    child: tuple[Any, Any, Mapping[str, Any]],
    new_ops: Iterable[str],
    pairs: Sequence[tuple[str, str]],
    images: Sequence[np.ndarray],
    config: FitConfig,
    built: Callable[[], None] = lambda: None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Child variables with `new_ops` fitted; and {"mse_before", "mse_after", "steps"}.
    `built()` is called once the fit's programs are built, before it runs most of them.

    `parent` and `child` are (graph, constants, variables). Pairs whose shapes differ are
    skipped; with no usable pair or no new parameter the variables come back unchanged.
    The fit is two compiled programs (`_evaluation`, the step of `_descend`): a child whose
    shapes repeat an earlier child's finds them in the persistent compilation cache.
    """
    import jax

    from nas.graph import Model

    p_graph, p_consts, p_vars = parent
    c_graph, c_consts, c_vars = child
    c_vars = {k: dict(v) for k, v in c_vars.items()}
    new_ops = set(new_ops)
    new = sorted(set(new_ops) & set(c_vars.get("params", {})))
    new_bn = sorted(set(new_ops) & set(c_vars.get("batch_stats", {})))
    if not pairs or not images or (not new and not new_bn):
        return c_vars, {}
    flat = _normalizes_over_batch_only(c_graph, c_consts, c_vars, new_bn, images[0][:1])
    xs = np.stack([x[:config.bn_batch_size if flat else config.batch_size] for x in images])
    c_graph = _with_outputs(c_graph, [mine for mine, _ in pairs], new_ops)
    part_graph, boundary = _fitted_part(c_graph, new_ops)
    theirs_of = _inference(p_graph, p_consts, [old for _, old in pairs])
    rest_of = _inference(c_graph, c_consts, boundary)
    part = Model(part_graph, c_consts)
    probe = jax.eval_shape(lambda x: part.apply(c_vars, rest_of(c_vars, x), deterministic=True,
                                                training=False), xs[0])
    theirs = jax.eval_shape(theirs_of, p_vars, xs[0])
    usable = [i for i, (mine, old) in enumerate(pairs)
              if np.shape(probe[mine]) == np.shape(theirs[old])]
    if not usable:
        return c_vars, {}
    frozen = {k: v for k, v in c_vars["params"].items() if k not in new}
    trainable = {k: c_vars["params"][k] for k in new}
    stats = c_vars.get("batch_stats", {})
    evaluate = _evaluation(theirs_of, rest_of, part, [pairs[i] for i in usable], new_bn,
                           _equal_to_parent(p_vars, {"params": frozen, "batch_stats": stats}))
    start = evaluate(p_vars, frozen, trainable, stats, xs)
    params, steps, end = trainable, 0, start
    if new and config.steps:
        params, stats, steps = _descend(part, [pairs[i] for i in usable], new_bn, frozen,
                                        (trainable, stats), start, config, built)
        if steps:
            end = evaluate(p_vars, frozen, params, stats, xs)
        if float(end["error"]) > float(start["error"]):  # e.g. a too-large rate: keep the start
            params, end = trainable, start
    _refuse_constant([pairs[i] for i in usable], end["mine_spreads"], end["their_spreads"])
    c_vars["params"] = {**frozen, **jax.device_get(params)}
    if stats:
        c_vars["batch_stats"] = jax.device_get(end["batch_stats"])
    return c_vars, {"mse_before": float(start["error"]), "mse_after": float(end["error"]),
                    "steps": steps}


def _error(out: Mapping[str, Any], target: Mapping[str, Any],
           pairs: Sequence[tuple[str, str]]) -> Any:
    """Mean over `pairs` of the squared error of each new output against the tensor it
    replaces, relative to that tensor's mean square."""
    import jax.numpy as jnp

    terms = []
    for mine, old in pairs:
        scale = jnp.mean(jnp.square(target[old])) + 1e-6
        terms.append(jnp.mean(jnp.square(out[mine] - target[old])) / scale)
    return sum(terms) / len(terms)


def _part_outputs(part: Any, frozen: Mapping[str, Any], params: Mapping[str, Any],
                  batch_stats: Mapping[str, Any], x: Any, train_bn: bool) -> tuple[Any, Any]:
    """(outputs of the fitted part, its batch statistics: updated in training mode)."""
    variables: dict[str, Any] = {"params": {**frozen, **params}}
    if batch_stats:
        variables["batch_stats"] = batch_stats
    if train_bn and batch_stats:
        out, upd = part.apply(variables, x, deterministic=True, training=True,
                              mutable=["batch_stats"])
        return out, upd["batch_stats"]
    return part.apply(variables, x, deterministic=True, training=False), batch_stats


def _equal_to_parent(p_vars: Mapping[str, Any], c_vars: Mapping[str, Any]
                     ) -> dict[str, frozenset[str]]:
    """{collection: names of the child's ops whose variables there equal the parent's (same
    op name, structure, shapes, dtypes and values)}."""
    same = {}
    for collection, ops in c_vars.items():
        theirs = p_vars.get(collection) or {}
        same[collection] = frozenset(name for name, mine in ops.items()
                                     if name in theirs and _equal_trees(mine, theirs[name]))
    return same


def _equal_trees(a: Any, b: Any) -> bool:
    """Same structure, and leaves of the same shapes, dtypes and values."""
    import jax

    (la, ta), (lb, tb) = jax.tree.flatten(a), jax.tree.flatten(b)
    return str(ta) == str(tb) and all(
        np.shape(x) == np.shape(y) and np.asarray(x).dtype == np.asarray(y).dtype
        and np.array_equal(x, y) for x, y in zip(la, lb, strict=True))


def _evaluation(theirs_of: Any, rest_of: Any, part: Any, pairs: Sequence[tuple[str, str]],
                new_bn: Sequence[str], same: Mapping[str, frozenset[str]]) -> Any:
    """One jitted program (parent vars, frozen params, trainable params, batch stats,
    stacked image batches) -> {"targets", "inputs": per batch, the parent's tensors and the
    fitted part's inputs; "batch_stats": `stats` with the new batch norms' statistics of
    these weights (averaged over the batches); "error": the fit error over all batches with
    them; "mine_spreads", "their_spreads": for the constant-output check}.

    Why one program: before and after the fit the same work is needed, and as separate
    programs and eager ops the fit compiled up to eight programs per child. The child's
    ops whose variables equal the parent's (`same`, by collection) read the parent's
    arrays, so the child's frozen prefix and the parent's network up to the replaced
    tensors are the same computation and XLA computes it once (it took half the time)."""
    import jax

    from nas.train import precise_bn

    bn_stats = precise_bn.batch_statistics(part, sorted(new_bn))

    @jax.jit
    def run(p_vars, frozen, params, stats, xs):
        batches = xs.shape[0]

        def per_batch(tree):  # inference mode: computed per image, on all images at once
            return [jax.tree.map(lambda a, i=i: a.reshape(batches, -1, *a.shape[1:])[i], tree)
                    for i in range(batches)]

        images = xs.reshape(-1, *xs.shape[2:])
        frozen = _aliased(frozen, p_vars.get("params", {}), same.get("params", ()))
        stats = _aliased(stats, p_vars.get("batch_stats", {}), same.get("batch_stats", ()))
        variables = {"params": {**frozen, **params}}
        if stats:
            variables["batch_stats"] = stats
        flat_inputs = rest_of(variables, images)
        inputs = per_batch(flat_inputs)
        targets = per_batch(theirs_of(p_vars, images))
        if new_bn:  # each batch's statistics, averaged (one trace of the part, vmapped)
            stacked = jax.tree.map(lambda a: a.reshape(batches, -1, *a.shape[1:]), flat_inputs)
            each = jax.vmap(bn_stats, in_axes=(None, 0))(variables, stacked)
            stats = {**stats, **jax.tree.map(lambda a: a.mean(axis=0), each)}
        outs = per_batch(_part_outputs(part, frozen, params, stats, flat_inputs, False)[0])
        errors = [_error(o, t, pairs) for o, t in zip(outs, targets, strict=True)]
        return {"targets": targets, "inputs": inputs, "batch_stats": stats,
                "error": sum(errors) / len(errors),
                "mine_spreads": [_spread(outs[0][m]) for m, _ in pairs],
                "their_spreads": [_spread(targets[0][old]) for _, old in pairs]}

    return run


def _aliased(mine: Mapping[str, Any], theirs: Mapping[str, Any], names: Iterable[str]
             ) -> dict[str, Any]:
    """`mine` with the entries `names` taken from `theirs` (equal values: see `same`)."""
    names = set(names)
    return {k: (theirs[k] if k in names else v) for k, v in mine.items()}


def _descend(part: Any, pairs: Sequence[tuple[str, str]], new_bn: Sequence[str],
             frozen: Mapping[str, Any], start: tuple[Any, Any], evaluated: Mapping[str, Any],
             config: FitConfig, built: Callable[[], None]) -> tuple[Any, Any, int]:
    """(params, batch stats, steps taken): Adam steps on the new ops, one batch each,
    cycled, until `config.steps` or until `config.patience` steps have not lowered a round's
    mean loss (a round: one step per batch) by the fraction `config.min_improvement`
    (counts: the same fit on any machine). The host reads the losses once per round."""
    import jax
    import optax

    from nas.train import compilation, optim

    tx = optax.adam(config.lr)
    new_bn_names = set(new_bn)

    def loss_fn(params, batch_stats, x, target):
        out, new_stats = _part_outputs(part, frozen, params, batch_stats, x, True)
        return _error(out, target, pairs), new_stats

    @functools.partial(jax.jit, compiler_options=compilation.gradient_options())
    def step(params, opt_state, batch_stats, x, target):
        (loss, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            params, batch_stats, x, target)
        updates, opt_state = tx.update(grads, opt_state, params)
        # inherited BN statistics stay the parent's; only new ones follow the batches
        kept = {k: (new_stats[k] if k in new_bn_names else batch_stats[k]) for k in batch_stats}
        return optax.apply_updates(params, updates), opt_state, kept, loss

    inputs, targets = evaluated["inputs"], evaluated["targets"]
    params, stats = start
    opt = optim.init_state(tx, params)  # no eager op: nothing compiled per shape
    best, since, taken = float("inf"), 0, 0
    while taken < config.steps and since < config.patience:
        losses = []
        for j in range(min(len(inputs), config.steps - taken)):
            params, opt, stats, loss = step(params, opt, stats, inputs[j], targets[j])
            if not taken:
                built()  # the step is compiled (the evaluation already ran): both built
            losses.append(loss)
            taken += 1
        mean = float(np.mean(jax.device_get(losses)))
        since = 0 if mean < best * (1.0 - config.min_improvement) else since + len(losses)
        best = min(best, mean)
    return params, stats, taken
