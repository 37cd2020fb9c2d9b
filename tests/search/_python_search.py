"""A notebook user's search, run as a script so that its loss, cost and callback live in
`__main__` (they reach the worker processes by value, not by import).

    python tests/search/_python_search.py WORKDIR OUT.json

A Flax model imported with `nas.from_flax`, the digits held in memory as arrays (8x8x3, so a
candidate trains in seconds), a loss that sees the batch and adds the mean of a per-example
extra `offset` (OFFSET for every example: the reported losses must show it, so the extra
reached the worker processes), a cost of the user's, 2 worker processes. Four calls: the
first stops itself from a callback once 2 candidates are done; the second is interrupted
(SIGINT, as a notebook's interrupt or Ctrl-C) when the third finishes, and raises
`nas.SearchInterrupted` with one line; the third resumes to 4, saying so in one line; the
fourth trains nothing.
"""

import contextlib
import io
import json
import os
import signal
import sys
import traceback

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import psutil
from sklearn.datasets import load_digits

import nas

OFFSET = 100.0


class Net(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.relu(nn.Conv(8, (3, 3))(x))
        x = nn.relu(nn.Conv(16, (3, 3))(x))
        return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))


def offset_loss(logits, labels, batch):
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    return ce + jnp.mean(batch["offset"])


def kilo_params(candidate):
    return sum(np.size(a) for a in jax.tree.leaves(candidate.variables["params"])) / 1e3


def digits():
    d = load_digits()
    x = np.repeat(np.uint8(d.images * 255 / 16)[..., None], 3, axis=-1)  # (N, 8, 8, 3)
    test = np.arange(len(x)) % 5 == 0
    return x[~test], d.target[~test], x[test], d.target[test]


OVERRIDES = {
    "train.total_epochs": 0.5, "search.seed_epochs": 1.0,
    "search.seed_max_epochs": 0.0, "search.min_child_steps": 0, "train.ckpt_steps": 0,
    "search.workers": 2, "search.selection.min_acc": 0.0, "search.finals": {"k": 0},
    "search.selection.costs": ("kilo_params", "flops"),
    "search.fit": {"steps": 3, "batches": 1, "batch_size": 8, "bn_batch_size": 16},
}


def worker_processes():
    """This process's children that are worker processes (multiprocessing's own resource
    tracker lives as long as this process, and is not one)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "resource_tracker" not in " ".join(p.cmdline()):
                out.append(" ".join(p.cmdline())[:200])
        except psutil.NoSuchProcess:  # ended while we looked: not left behind
            pass
    return out


def rows(result):
    return [{"id": c.id, "status": c.status, "parent": c.parent_id, "loss": c.loss,
             "kilo_params": c.metrics.get("kilo_params"), "fingerprint": c.fingerprint,
             "finished_at": c.finished_at, "error": c.error} for c in result.candidates()]


def main(workdir, out):
    # Python's own Ctrl-C handler, as in a terminal or a notebook: started from a job in the
    # background (a CI script under nohup), this process inherits SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    x = jnp.zeros((1, 8, 8, 3))
    model = Net()
    seed = nas.from_flax(model, x, variables=model.init(jax.random.PRNGKey(0), x), train=False)
    data = digits()
    finished = []

    def stop_at_two(candidate):
        finished.append(candidate.id)
        if len(finished) == 2:
            raise nas.StopSearch

    def search(**kw):
        return nas.run_search(seed, data, workdir=workdir, max_candidates=4, loss=offset_loss,
                              costs={"kilo_params": kilo_params}, overrides=OVERRIDES,
                              progress=False, extras={"offset": np.full(len(data[0]), OFFSET)},
                              **kw)

    def interrupt(candidate):
        os.kill(os.getpid(), signal.SIGINT)

    stopped = search(callbacks=[stop_at_two])
    report = {"stopped": {"counts": stopped.study.counts(), "told": finished,
                          "report": os.path.isfile(os.path.join(workdir, "report",
                                                                "report.html"))}}
    try:
        search(callbacks=[interrupt])
        report["interrupted"] = None
    except KeyboardInterrupt as e:
        report["interrupted"] = {
            "counts": nas.SearchResult.load(workdir).study.counts(),
            "workers": worker_processes(), "type": type(e).__name__, "message": str(e),
            "frames": [f"{f.filename}:{f.name}" for f in traceback.extract_tb(e.__traceback__)],
            "context": e.__context__ is not None and not e.__suppress_context__}
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        done = search()
    report["resumed_output"] = said.getvalue()
    recommended = done.recommended
    batch = np.zeros((3, *recommended.input_shape), np.float32)
    report["done"] = {
        "rows": rows(done), "recommended": recommended.info["id"],
        "recommended_metrics": recommended.metrics,
        "logits_shape": list(np.shape(recommended(batch))),
        "front_kilo_params": [c.id for c in done.front("kilo_params")],
        "summary": done.summary(),
    }
    again = search()
    report["again"] = {"rows": rows(again), "recommended": again.recommended.info["id"]}
    with open(out, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
