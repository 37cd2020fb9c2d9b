"""What a Ray cluster whose nodes share no disk costs a search, measured on this machine.

1. Per candidate, the object-store transfers against training: the weights sent to a task
   and back (CifarNet, the README child, and ResNet-50 at 32x32), measured as the round trip
   of a task that returns its argument minus that of an empty one; the dataset put once and
   fetched once by a node (the digits npz and a CIFAR-10-sized one); a jitted train step of
   each model in this process, so each transfer also reads as a number of train steps.
2. Candidates per hour of the README search (configs/digits_cnn_search.py) on a local
   cluster of a head with no task slots and 1, then 2, worker nodes of 1 CPU each (nodes in
   their own mount namespaces, seeing no workdir or data: tests/search/ray_nodes.py), in
   one run, with the per-candidate times each task measured (data, training).

    python benchmarks/ray_cluster.py [--candidates 6] [--rounds 3] [--skip-search]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "search"))
from ray_nodes import LocalCluster, unshare_refusal  # noqa: E402

CONFIG = os.path.join(HERE, "..", "configs", "digits_cnn_search.py")


def echo(x):
    return x


def fetch_dataset(shipped):
    """On a node: the time to get the shipped dataset into its cache (0 fetches if there)."""
    import ray

    from nas.search.execution.ray_parts import node_train_config

    config = {"input": {"data": {"name": "npz:/driver/only", "split": "train"},
                        "data_dir": ""}}
    start = time.perf_counter()
    node_train_config(config, shipped, ray.get)
    return time.perf_counter() - start


def model_parts(name: str):
    from nas.zoo import cnn, resnetv1

    if name == "CifarNet":
        return cnn.CifarNet()[:2], 128
    graph, constants, _ = resnetv1.ResNet50(num_classes=10, input_resolution="small")
    return (graph, constants), 32


def weights_and_step(name: str, steps: int):
    """(numpy variables, seconds per jitted SGD train step) of model `name` at 32x32."""
    import jax
    import jax.numpy as jnp
    import optax

    from nas.graph import Model

    (graph, constants), batch = model_parts(name)
    module = Model(graph, constants)
    x = jax.random.normal(jax.random.PRNGKey(1), (batch, 32, 32, 3))
    variables = module.init(jax.random.PRNGKey(0), x)
    params, state = variables["params"], {k: v for k, v in variables.items() if k != "params"}
    tx = optax.sgd(0.01, momentum=0.9)
    labels = jnp.zeros((batch,), jnp.int32)

    @jax.jit
    def step(params, state, opt_state):
        def loss_fn(p):
            logits, new_state = module.apply({"params": p, **state}, x, training=True,
                                             mutable=list(state))
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), \
                new_state

        (loss, new_state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_state, opt_state, loss

    carry = [params, state, tx.init(params)]
    *carry, loss = step(*carry)  # compile
    loss.block_until_ready()
    start = time.perf_counter()
    for _ in range(steps):
        *carry, loss = step(*carry)
    loss.block_until_ready()
    return jax.tree.map(np.asarray, variables), (time.perf_counter() - start) / steps


def digits_npz(path: str) -> str:
    from sklearn.datasets import load_digits

    from nas.train import digits

    raw = load_digits()
    images = np.round(raw.images * (255 / 16)).astype(np.uint8)
    arrays = {}
    for split, idx in digits.split_indices().items():
        arrays[f"x_{split}"], arrays[f"y_{split}"] = images[idx], \
            raw.target[idx].astype(np.uint8)
    np.savez(path, **arrays)
    return path


def cifar_sized_npz(path: str) -> str:
    """50,000 + 10,000 random 32x32x3 images: CIFAR-10's size, for the transfer only."""
    rng = np.random.default_rng(0)
    np.savez(path, x_train=rng.integers(0, 256, (50_000, 32, 32, 3), dtype=np.uint8),
             y_train=rng.integers(0, 10, 50_000, dtype=np.uint8),
             x_test=rng.integers(0, 256, (10_000, 32, 32, 3), dtype=np.uint8),
             y_test=rng.integers(0, 10, 10_000, dtype=np.uint8))
    return path


def transfers(rounds: int, steps: int, tmp: str) -> None:
    import ray

    from nas.search.execution.ray_parts import dataset_files, shipment

    models = {name: weights_and_step(name, steps) for name in ("CifarNet", "ResNet-50")}
    data = os.path.join(tmp, "data")
    os.makedirs(data)
    sets = {"digits npz": digits_npz(os.path.join(data, "digits.npz")),
            "CIFAR-10-sized npz": cifar_sized_npz(os.path.join(data, "cifar.npz"))}
    hidden = [data, os.path.join(os.path.expanduser("~"), ".cache", "nas")]
    with LocalCluster(hidden, workers=1) as cluster:
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            remote_echo = ray.remote(num_cpus=1)(echo)
            ray.get(remote_echo.remote(None))  # a worker process started
            empty = statistics.median(_timed(lambda: ray.get(remote_echo.remote(None)))
                                      for _ in range(rounds))
            print("\n| model | weights MB | train step s | weights in+out s | in+out / step |")
            print("|---|---|---|---|---|")
            for name, (variables, step_s) in models.items():
                mb = sum(a.nbytes for a in _leaves(variables)) / 1e6
                trip = statistics.median(
                    _timed(lambda v=variables: ray.get(remote_echo.remote(v)))
                    for _ in range(rounds)) - empty
                print(f"| {name} | {mb:.1f} | {step_s:.3f} | {trip:.3f} | {trip / step_s:.2f} |")
            print(f"(an empty task's round trip, subtracted: {empty * 1e3:.1f} ms)")
            remote_fetch = ray.remote(num_cpus=1)(fetch_dataset)
            print("\n| dataset | MB | read + put on the driver s | first fetch on a node s | "
                  "next task s |")
            print("|---|---|---|---|---|")
            for name, path in sets.items():
                start = time.perf_counter()
                kind, base, files = dataset_files(
                    {"input": {"data": {"name": f"npz:{path}"}, "data_dir": ""}})
                ref = ray.put(files)
                put_s = time.perf_counter() - start
                shipped = shipment(kind, base, files.digest(), ref)
                first = ray.get(remote_fetch.remote(shipped))
                again = ray.get(remote_fetch.remote(shipped))
                print(f"| {name} | {files.size / 1e6:.1f} | {put_s:.2f} | {first:.2f} | "
                      f"{again:.4f} |")
        finally:
            ray.shutdown()


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def search_rate(workers: int, candidates: int, tmp: str) -> dict[str, float]:
    """The README search on `workers` worker nodes: children per hour (from the seed's end
    to the last child's) and the tasks' median per-candidate times."""
    from nas.search.store.study import Study

    workdir = os.path.join(tmp, f"study{workers}")
    os.makedirs(workdir)
    hidden = [workdir, os.path.join(os.path.expanduser("~"), ".cache", "nas")]
    with LocalCluster(hidden, workers=workers) as cluster:
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "nas.search.cli", f"--config={CONFIG}",
             f"--workdir={workdir}", "--noprogress", "--config.search.executor=ray",
             f"--config.search.ray_address={cluster.address}",
             f"--config.search.workers={workers}", "--config.search.prepare_ahead=0",
             f"--config.search.max_candidates={candidates}"],
            capture_output=True, text=True, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
        wall = time.perf_counter() - start
    if out.returncode:
        raise SystemExit(out.stdout[-3000:] + out.stderr[-3000:])
    done = Study.load(workdir).candidates("done")
    seed = next(c for c in done if c.parent_id is None)
    children = [c for c in done if c.parent_id is not None]
    span = max(c.finished_at for c in children) - seed.finished_at
    med = lambda key: statistics.median(c.metrics.get(key, 0.0) for c in children)  # noqa: E731
    return {"wall_s": wall, "children": len(children), "per_hour": 3600 * len(children) / span,
            "data_s": med("ray_data_s"), "train_s": med("ray_train_s"),
            "retries": sum(c.metrics.get("ray_retries", 0) for c in done)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--candidates", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--skip-search", action="store_true")
    args = parser.parse_args()
    reason = unshare_refusal()
    if reason:
        raise SystemExit(f"needs separate mount namespaces per node: {reason}")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    print(f"load: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="nas-ray-bench-") as tmp:
        transfers(args.rounds, args.steps, tmp)
        if args.skip_search:
            return
        rates = {n: search_rate(n, args.candidates, tmp) for n in (1, 2)}
    print("\n| worker nodes | children | children/hour | wall s | per child: data s | "
          "train s | retries |")
    print("|---|---|---|---|---|---|---|")
    for n, r in rates.items():
        print(f"| {n} | {r['children']} | {r['per_hour']:.0f} | {r['wall_s']:.0f} | "
              f"{r['data_s']:.2f} | {r['train_s']:.1f} | {r['retries']} |")
    print(f"2 nodes / 1 node: {rates[2]['per_hour'] / rates[1]['per_hour']:.2f}x")
    print(f"load: {os.getloadavg()[0]:.1f} (1 min)")


if __name__ == "__main__":
    main()
