"""Training throughput, side by side in one run (this machine is shared and noisy).

    python benchmarks/train.py [--quick]

Prints three tables:
1. images/sec of the data pipeline alone (digits, with augmentation) vs the CifarNet train
   step at the same batch: the pipeline must be well ahead (goal: >= 5x) so it never limits.
2. CPU MFU of the CifarNet and ResNet18 train steps: achieved FLOP/s (XLA cost analysis of
   the compiled step x steps/s) over this machine's warm f32 matmul peak measured in this run.
3. CifarNet step time with 1 vs 2 forced CPU devices at a large global batch (subprocesses,
   since the device count is fixed when jax is imported).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def _train_step_rate(model_name: str, batch: int, devices: int, seconds: float) -> dict:
    """Compile the real pmap train step for a zoo model; time it on synthetic data."""
    import jax

    from nas.graph import Model
    from nas.train import optim, perf, steps, zoo_graph
    from nas.train.config import base_config

    graph, constants = zoo_graph(model_name, 10, 32)
    model = Model(graph, constants)
    x = np.random.default_rng(0).normal(size=(batch, 32, 32, 3)).astype(np.float32)
    variables = jax.tree.map(np.asarray, model.init(jax.random.PRNGKey(0), x[:1]))
    params = dict(variables["params"])
    c = base_config()
    tx, _ = optim.make(c, params, dict(total_steps=1000))
    state = {"params": params, "frozen": {}, "batch_stats": dict(variables.get("batch_stats", {})),
             "opt_state": jax.tree.map(np.asarray, tx.init(params)), "ema": {},
             "step": np.int32(0)}
    fn = jax.pmap(steps.make_train_step(model, tx, 10), axis_name=steps.AXIS,
                  donate_argnums=(0,), devices=jax.local_devices()[:devices])
    data = steps.shard({"image": x, "label": np.zeros(batch, np.int32)}, devices)
    rng = steps.replicate(np.asarray(jax.random.PRNGKey(0)), devices)
    st = steps.replicate(state, devices)
    t = time.perf_counter()
    compiled = fn.lower(st, data, rng).compile()
    compile_s = time.perf_counter() - t
    flops_per_step = perf.compiled_flops(compiled) * devices  # cost analysis is per device
    holder = [st]

    def run():
        holder[0], m = compiled(holder[0], data, rng)
        return m["training_loss"]

    ips = perf.throughput(run, batch, min_seconds=seconds, min_calls=3)
    return {"model": model_name, "batch": batch, "devices": devices, "images_per_s": ips,
            "step_s": batch / ips, "flops_per_step": flops_per_step,
            "flop_per_s": flops_per_step * ips / batch, "compile_s": compile_s}


def _pipeline_rate(batch: int, seconds: float) -> float:
    from nas.train import data

    src = data.open_source("digits", "train", None)
    ds = data.make_train_dataset(src, data.make_preprocess("digits", True, 32),
                                 local_batch_size=batch, seed=0, num_threads=2)
    it = iter(ds)
    next(it)
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < seconds:
        next(it)
        n += batch
    return n / (time.perf_counter() - t)


def _child(args: argparse.Namespace) -> None:
    print(json.dumps(_train_step_rate(args.model, args.batch, args.devices, args.seconds)))


def _devices_subprocess(devices: int, batch: int, seconds: float) -> dict:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--model=cnn", f"--batch={batch}",
         f"--devices={devices}", f"--seconds={seconds}"],
        env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="shorter timings")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", default="cnn")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    if args.child:
        _child(args)
        return
    secs = 1.5 if args.quick else 4.0

    from nas.train import perf

    peak = perf.matmul_peak_flops(2048, seconds=secs)
    cnn = _train_step_rate("cnn", 128, 1, secs)
    pipe = _pipeline_rate(128, secs)
    resnet = _train_step_rate("resnet18", 64, 1, 2 * secs)
    peak_after = perf.matmul_peak_flops(2048, seconds=secs)
    peak = max(peak, peak_after)

    print("## 1. data pipeline vs train step (batch 128, images/sec)")
    print(f"{'digits pipeline (grain, aug)':34s} {pipe:10.0f}")
    print(f"{'CifarNet train step':34s} {cnn['images_per_s']:10.0f}")
    print(f"{'ratio pipeline / step':34s} {pipe / cnn['images_per_s']:10.1f}x")
    print()
    print(f"## 2. CPU MFU (f32 matmul peak measured here: {peak / 1e9:.0f} GFLOP/s)")
    print(f"{'model':10s} {'batch':>5s} {'img/s':>8s} {'GFLOP/step':>11s} {'GFLOP/s':>8s} "
          f"{'MFU':>6s} {'compile s':>9s}")
    for r in (cnn, resnet):
        print(f"{r['model']:10s} {r['batch']:5d} {r['images_per_s']:8.1f} "
              f"{r['flops_per_step'] / 1e9:11.2f} {r['flop_per_s'] / 1e9:8.1f} "
              f"{r['flop_per_s'] / peak:6.1%} {r['compile_s']:9.1f}")
    print()
    big = 512
    one = _devices_subprocess(1, big, secs)
    two = _devices_subprocess(2, big, secs)
    print(f"## 3. CifarNet train step, global batch {big}, forced CPU devices")
    print(f"{'devices':>7s} {'step ms':>8s} {'img/s':>8s}")
    for r in (one, two):
        print(f"{r['devices']:7d} {r['step_s'] * 1e3:8.1f} {r['images_per_s']:8.1f}")
    print(f"speedup 2 vs 1 devices: {one['step_s'] / two['step_s']:.2f}x")


if __name__ == "__main__":
    main()
