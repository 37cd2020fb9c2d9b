"""Which fitting settings reproduce the replaced tensors best? Measured on a study's children.

For the first children of a finished study, rebuilds each child's starting weights (its
parent's weights where they fit, fresh ones elsewhere), fits its new ops with each setting
(`nas.train.fit`) and prints the fit error left on held-out training images (normalized
mean squared error against the parent's replaced tensors; lower is better) and the seconds
the fit took (after an untimed one-step fit that compiled its programs, as a search's
workers find them in the persistent compilation cache). A child whose fit fails prints the
error type.

    python benchmarks/fit_settings.py --workdir /tmp/arms_0/evolution0 [--limit 6]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import runpy
import time

import jax
import numpy as np

from nas.graph import Model
from nas.graph.serialize import load
from nas.graph.subgraph import inherit_params
from nas.search.store.study import Study
from nas.train import compilation, fit
from nas.train import data as data_lib
from nas.train.checkpoint import load_variables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = {  # name: (steps, Adam lr, distinct batches cycled, images per step,
    #                 images per step when a new batch norm normalizes flat features)
    "120 @ 3e-3, 4 x 32": (120, 3e-3, 4, 32, 32),
    "120 @ 3e-3, 4 x 16, 32 for a flat BN": (120, 3e-3, 4, 16, 32),
    "120 @ 3e-3, 4 x 16": (120, 3e-3, 4, 16, 16),
    "240 @ 3e-3, 4 x 32": (240, 3e-3, 4, 32, 32),
    "120 @ 3e-3, 16 x 32": (120, 3e-3, 16, 32, 32),
    "120 @ 3e-3, 16 x 16": (120, 3e-3, 16, 16, 16),
}
HELD_OUT_BATCHES = 4  # of 32 images, none of them among the fitting images


def starting_variables(child, parent_variables: dict, images: list) -> dict:
    """The child's weights before fitting: its parent's where they fit (`inherit_params`),
    fresh (seeded by the child's id) for its new ops."""
    graph, constants = load(child.graph_json)
    fresh = jax.tree.map(np.asarray, dict(Model(graph, constants).init(
        jax.random.PRNGKey(child.id), images[0][:1])))
    new = set(child.inheritance.get("new") or [])
    start = {}
    for col, values in fresh.items():
        old = {k: v for k, v in parent_variables.get(col, {}).items() if k not in new}
        inherited, fresh_ops = inherit_params(values, old)
        start[col] = {**fresh_ops, **inherited}
    return start


def held_out_error(parent: tuple, child: tuple, pairs: list, images: list) -> float:
    """The fit's error measure (normalized mean squared error, averaged over the replaced
    tensors) on images the fit did not see: a setting that overfits its few batches loses."""
    p_graph, p_consts, p_vars = parent
    c_graph, c_consts, c_vars = child
    old = jax.jit(fit._inference(p_graph, p_consts, [o for _, o in pairs]))
    mine = jax.jit(fit._inference(c_graph, c_consts, [m for m, _ in pairs]))
    errors = []
    for x in images:
        target, out = old(p_vars, x), mine(c_vars, x)
        for m, o in pairs:
            if np.shape(out[m]) == np.shape(target[o]):
                scale = float(np.mean(np.square(target[o]))) + 1e-6
                errors.append(float(np.mean(np.square(out[m] - target[o]))) / scale)
    return float(np.mean(errors)) if errors else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a finished study's directory")
    parser.add_argument("--limit", type=int, default=6, help="children to fit")
    parser.add_argument("--ids", type=int, nargs="*", help="these children only")
    parser.add_argument("--settings", nargs="*", choices=list(SETTINGS), default=list(SETTINGS),
                        help="the settings to compare (default: all)")
    args = parser.parse_args()
    compilation.enable_cache(compilation.default_cache_dir())
    config = runpy.run_path(os.path.join(ROOT, "configs", "digits_cnn_search.py"))["get_config"]()
    most = max(batches for _, _, batches, _, _ in SETTINGS.values())  # same held-out images
    shuffled = data_lib.plain_batches(config.train.input, most + HELD_OUT_BATCHES, 32, 0)
    held_out = shuffled[most:]
    study = Study.load(args.workdir)
    children = [c for c in study.candidates("done")
                if c.parent_id is not None and (c.inheritance or {}).get("new")
                and (not args.ids or c.id in args.ids)][:args.limit]
    settings = {name: SETTINGS[name] for name in args.settings}
    print(f"held-out fit error (seconds of fitting) on {HELD_OUT_BATCHES} batches of 32; "
          "steps @ Adam lr, batches x images")
    print("| child | parent | " + " | ".join(settings) + " |")
    print("|---|---|" + "---:|" * len(settings))
    totals = {name: [0.0, 0.0, 0.0] for name in settings}  # held-out, fit batches, seconds
    for child in children:
        parent = study.get(child.parent_id)
        p_graph, p_consts = load(parent.graph_json)
        p_vars = load_variables(parent.checkpoint_path)
        c_graph, c_consts = load(child.graph_json)
        c_vars = starting_variables(child, p_vars, shuffled)
        pairs = fit.replaced_tensors(child.spec)
        cells = []
        for name, (steps, lr, batches, batch, bn_batch) in settings.items():
            images = shuffled[:batches]
            run = functools.partial(
                fit.fit_new_ops, (p_graph, p_consts, p_vars), (c_graph, c_consts, c_vars),
                child.inheritance["new"], pairs, images)
            try:
                config = fit.FitConfig(steps=steps, batches=batches, batch_size=batch,
                                       bn_batch_size=bn_batch, lr=lr)
                run(dataclasses.replace(config, steps=1))
                start = time.perf_counter()  # after a warm-up fit that compiled
                fitted, info = run(config)
                seconds = time.perf_counter() - start
            except Exception as e:  # a child this setting cannot fit: say which error
                cells.append(type(e).__name__)
                continue
            error = held_out_error((p_graph, p_consts, p_vars), (c_graph, c_consts, fitted),
                                   pairs, held_out)
            for i, value in enumerate((error, info.get("mse_after", float("nan")), seconds)):
                totals[name][i] += value
            cells.append(f"{error:.3f} ({seconds:.1f} s)")
        print(f"| {child.id} | {parent.id} | " + " | ".join(cells) + " |", flush=True)
    print("| sum | | " + " | ".join(f"{h:.3f} ({t:.1f} s)" for h, _, t in totals.values())
          + " |")
    print("| sum on the fitting batches | | "
          + " | ".join(f"{f:.3f}" for _, f, _ in totals.values()) + " |")


if __name__ == "__main__":
    main()
