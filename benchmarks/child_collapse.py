"""Why do children fall to chance? Measured on the children of a finished study.

For each child of a study this prints its parent's accuracy, the child's accuracy with the
weights it starts from (inherited + fresh, before a single step), its accuracy after the
study's fine-tuning, and, retrained side by side from the same start with one change each:
  new_lr     fresh parameters train at `train.lr` (inherited ones at `search.child_lr`)
  bn_recal   as the study trained it, then batch-norm statistics re-estimated on train data
so the cause (the splice itself, the fresh layers' learning rate, stale normalization
statistics) can be read off the columns.

    python benchmarks/child_collapse.py --workdir runs/digits [--limit 8]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile

import jax
import ml_collections
import numpy as np

from nas.graph import Model
from nas.graph.serialize import load
from nas.search.execution.task import Task
from nas.search.execution.worker import train_candidate
from nas.search.store.study import Study
from nas.train import data as data_lib
from nas.train.checkpoint import load_variables


def evaluate(graph, constants, variables, config) -> float:
    """Test accuracy of `variables` (no training)."""
    inp = config.input
    data = data_lib.make_eval_data(inp.data.name, config.eval.data.split,
                                   data_lib.resolve_data_dir(inp.data_dir or None),
                                   inp.image_size, config.eval.batch_size, 1)
    model = Model(graph, constants)
    apply = jax.jit(lambda v, x: model.apply(v, x, deterministic=True, training=False))
    correct = count = 0.0
    for batch in data:
        logits = np.asarray(apply(variables, batch["image"]))
        labels = batch["label"] if batch["label"].ndim == 1 else batch["label"].argmax(-1)
        correct += float(((logits.argmax(-1) == labels) * batch["mask"]).sum())
        count += float(batch["mask"].sum())
    return correct / max(count, 1.0)


def recalibrate(graph, constants, variables, config, batches: int = 8) -> dict:
    """Batch-norm running statistics re-estimated as plain means over `batches` batches."""
    if not variables.get("batch_stats"):
        return variables
    inp = config.input
    source = data_lib.open_source(inp.data.name, inp.data.split,
                                  data_lib.resolve_data_dir(inp.data_dir or None))
    ds = data_lib.make_train_dataset(
        source, data_lib.make_preprocess(inp.data.name, False, inp.image_size, False),
        local_batch_size=inp.batch_size, seed=0, shuffle=True, num_threads=1, prefetch=1)
    model = Model(graph, constants)

    @jax.jit
    def stats(v, x):
        _, upd = model.apply(v, x, deterministic=True, training=True, mutable=["batch_stats"])
        return upd["batch_stats"]

    it = iter(ds)
    acc = None
    for _ in range(batches):
        s = stats(variables, next(it)["image"])
        acc = s if acc is None else jax.tree.map(np.add, acc, s)
    mean = jax.tree.map(lambda a: np.asarray(a) / batches, acc)
    # flax BN with momentum m stores m*old + (1-m)*batch; undo that to get batch means
    mom = 0.99
    fresh = jax.tree.map(lambda new, old: (np.asarray(new) - mom * np.asarray(old)) / (1 - mom),
                         mean, variables["batch_stats"])
    return {**variables, "batch_stats": fresh}


def new_lr_schedule(train: dict, search: dict, new_ops: list[str]) -> list:
    base = dict(train["schedule"])
    boost = dict(base, base=float(train["lr"]) / float(search["child_lr"]))
    regex = "^(" + "|".join(__import__("re").escape(n) for n in new_ops) + ")/"
    return [(regex, boost), (".*", base)] if new_ops else [(".*", base)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--limit", type=int, default=8)
    args = parser.parse_args()
    study = Study.load(args.workdir)
    cfg = ml_collections.ConfigDict(study.config)
    train = cfg.train.to_dict()
    search = cfg.search.to_dict()
    children = [c for c in study.candidates() if c.parent_id is not None
                and c.status == "done"][: args.limit]
    print("| id | parent acc | start acc | study acc | new_lr acc | bn_recal acc | new ops |")
    print("|---|---|---|---|---|---|---|")
    for c in children:
        parent = study.get(c.parent_id)
        graph, constants = load(c.graph_json)
        init = load_variables(os.path.join(args.workdir, "candidates", str(c.id), "init"))
        start = evaluate(graph, constants, init, cfg.train)
        new = (c.inheritance or {}).get("new", [])
        tc = dict(train, lr=float(search["child_lr"]),
                  schedule=new_lr_schedule(train, search, new))
        with tempfile.TemporaryDirectory() as tmp:
            metrics, _ = train_candidate(Task(c.id, tc, c.graph_json, init, workdir=tmp))
        final = load_variables(c.checkpoint_path)
        recal = evaluate(graph, constants, recalibrate(graph, constants, final, cfg.train),
                         cfg.train) if final.get("batch_stats") else float("nan")
        kinds = [s["op"]["type"] for s in (c.spec or []) if isinstance(s, dict)
                 and "op" in s]
        print(f"| {c.id} | {parent.accuracy:.3f} | {start:.3f} | {c.accuracy:.3f} | "
              f"{metrics['accuracy']:.3f} | {recal:.3f} | {json.dumps(kinds)} |", flush=True)


if __name__ == "__main__":
    main()
