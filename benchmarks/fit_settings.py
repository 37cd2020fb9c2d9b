"""Which fitting settings reproduce the replaced tensors best? Measured on a study's children.

For the first children of a finished study, rebuilds each child's starting weights (its
parent's weights where they fit, fresh ones elsewhere), fits its new ops with each setting
(`nas.search.fit`) and prints the fit error left (normalized mean squared error against the
parent's replaced tensors; lower is better). A child whose fit fails prints the error type.

    python benchmarks/fit_settings.py --workdir /tmp/arms_0/evolution0 [--limit 6]
"""

from __future__ import annotations

import argparse
import os
import runpy

import jax
import numpy as np

from nas.graph import Model
from nas.graph.serialize import load
from nas.graph.subgraph import inherit_params
from nas.search import fit
from nas.search.study import Study
from nas.train import data as data_lib
from nas.train.checkpoint import load_variables

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = {  # name: (steps, lr)
    "60 @ 1e-3": (60, 1e-3),
    "60 @ 3e-3": (60, 3e-3),
    "120 @ 3e-3": (120, 3e-3),
    "60 @ 1e-2": (60, 1e-2),
}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a finished study's directory")
    parser.add_argument("--limit", type=int, default=6, help="children to fit")
    args = parser.parse_args()
    config = runpy.run_path(os.path.join(ROOT, "configs", "digits_cnn_search.py"))["get_config"]()
    base = fit.FitConfig.from_dict(config.search.fit)
    images = data_lib.plain_batches(config.train.input, base.batches, base.batch_size, 0)
    study = Study.load(args.workdir)
    children = [c for c in study.candidates("done")
                if c.parent_id is not None and (c.inheritance or {}).get("new")][:args.limit]
    print(f"fit error after fitting, {base.batches} batches of {base.batch_size}; "
          f"steps @ Adam lr")
    print("| child | parent | " + " | ".join(SETTINGS) + " |")
    print("|---|---|" + "---:|" * len(SETTINGS))
    for child in children:
        parent = study.get(child.parent_id)
        p_graph, p_consts = load(parent.graph_json)
        p_vars = load_variables(parent.checkpoint_path)
        c_graph, c_consts = load(child.graph_json)
        c_vars = starting_variables(child, p_vars, images)
        pairs = fit.replaced_tensors(child.spec)
        cells = []
        for steps, lr in SETTINGS.values():
            setting = fit.FitConfig(steps=steps, batches=base.batches,
                                    batch_size=base.batch_size, lr=lr)
            try:
                _, info = fit.fit_new_ops((p_graph, p_consts, p_vars),
                                          (c_graph, c_consts, c_vars),
                                          child.inheritance["new"], pairs, images, setting)
                cells.append(f"{info.get('mse_after', float('nan')):.3f}")
            except Exception as e:  # a child this setting cannot fit: say which error
                cells.append(type(e).__name__)
        print(f"| {child.id} | {parent.id} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
