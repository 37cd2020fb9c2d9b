"""Reversible CPU-offload trainer vs the standard trainer, side by side in one run.

    python benchmarks/reversible.py [--quick] [--budget-mib 48]

Prints three tables:
1. Step time of both trainers on the same RevNet and batch (interleaved timing rounds;
   goal: reversible throughput >= 0.6x standard; the theoretical extra is one forward).
2. Compiled temp bytes of a training step vs depth (2, 8, 32 couplings) for both.
3. The deepest RevNet each trainer can train within a fixed device-memory budget: the
   standard step's compiled footprint (arguments + outputs + temps) vs the reversible
   trainer's device peak (largest per-layer temp + two layers' weights and optimizer state
   + the activation pair and its cotangents).
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from nas.graph import Model
from nas.train import config as config_lib
from nas.train import optim, steps
from nas.train.reversible import ReversibleTrainer
from nas.train.revrun import standard_step_memory
from nas.zoo import revnet

IMAGE = (32, 32, 3)


def _config() -> config_lib.ml_collections.ConfigDict:
    return config_lib.with_defaults({"optax_name": "scale_by_adam", "lr": 1e-3})


def _batch(batch: int) -> dict[str, np.ndarray]:
    rs = np.random.RandomState(0)
    return {"image": rs.randn(batch, *IMAGE).astype(np.float32),
            "label": rs.randint(0, 10, batch).astype(np.int32)}


def step_times(depth: int, width: int, batch: int, rounds: int, per_round: int) -> dict:
    """Median seconds per step of each trainer, timed in alternating rounds."""
    graph, constants, _ = revnet.RevNet(depth=depth, width=width)
    config = _config()
    model = Model(graph, constants)
    data = _batch(batch)
    params = jax.tree.map(np.asarray, dict(model.init(jax.random.PRNGKey(0),
                                                      data["image"][:1])["params"]))
    sched_kw = {"total_steps": 10_000}
    tx, _ = optim.make(config, params, sched_kw)
    state = {"params": params, "frozen": {}, "batch_stats": {}, "opt_state": tx.init(params),
             "ema": {}, "step": np.int32(0)}
    std = jax.pmap(steps.make_train_step(model, tx, 10), axis_name=steps.AXIS,
                   donate_argnums=(0,))
    state_r = steps.replicate(state, 1)
    sharded = steps.shard(data, 1)
    rng_r = steps.replicate(np.asarray(jax.random.PRNGKey(0)), 1)
    rev = ReversibleTrainer(graph, constants, config=config, sched_kw=sched_kw,
                            image_shape=IMAGE, params=params)
    rng = jax.random.PRNGKey(0)
    for _ in range(2):  # compile and warm up
        state_r, m = std(state_r, sharded, rng_r)
        jax.block_until_ready(m)
        rev.train_step(data, rng)
    times: dict[str, list[float]] = {"standard": [], "reversible": []}
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(per_round):
            state_r, m = std(state_r, sharded, rng_r)
        jax.block_until_ready(m)
        times["standard"].append((time.perf_counter() - t) / per_round)
        t = time.perf_counter()
        for _ in range(per_round):
            rev.train_step(data, rng)  # returns a float: synchronous
        times["reversible"].append((time.perf_counter() - t) / per_round)
    return {k: statistics.median(v) for k, v in times.items()}


def reversible_footprint(depth: int, width: int, batch: int) -> dict:
    """Run one reversible step; its temp peak and estimated device peak in bytes."""
    graph, constants, _ = revnet.RevNet(depth=depth, width=width)
    trainer = ReversibleTrainer(graph, constants, config=_config(), image_shape=IMAGE,
                                sched_kw={"total_steps": 10})
    trainer.train_step(_batch(batch), jax.random.PRNGKey(0))
    acts = trainer.activations(_batch(batch)["image"])
    pair = max(sum(a.nbytes for a in stack) for stack in acts[1:])
    temp = trainer.max_temp_bytes()
    peak = temp + 2 * max(trainer.layer_bytes()) + 2 * pair + _batch(batch)["image"].nbytes
    return {"temp": temp, "peak": peak}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--budget-mib", type=float, default=48.0)
    args = parser.parse_args()
    mib = 2**20
    width, batch = 16, 32
    depth_speed = 8
    rounds, per_round = (3, 3) if args.quick else (5, 5)

    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, "
          f"{jax.local_device_count()} device(s); RevNet width {width}, batch {batch}, "
          f"{IMAGE[0]}x{IMAGE[1]}, Adam\n")
    t = step_times(depth_speed, width, batch, rounds, per_round)
    ratio = t["standard"] / t["reversible"]
    print(f"1. step time, RevNet depth {depth_speed} (median of {rounds} rounds)")
    print("| trainer | ms/step | images/s | throughput vs standard |")
    print("|---|---:|---:|---:|")
    for name in ("standard", "reversible"):
        rel = 1.0 if name == "standard" else ratio
        print(f"| {name} | {1e3 * t[name]:.1f} | {batch / t[name]:.0f} | {rel:.2f}x |")

    print("\n2. compiled temp bytes of one training step vs depth (MiB)")
    print("| depth | standard temp | reversible temp | standard / reversible |")
    print("|---:|---:|---:|---:|")
    cfg = _config()
    for depth in (2, 8, 32):
        graph, constants, _ = revnet.RevNet(depth=depth, width=width)
        std = standard_step_memory(graph, constants, cfg, batch, IMAGE)["temp"]
        rev = reversible_footprint(depth, width, batch)["temp"]
        print(f"| {depth} | {std / mib:.2f} | {rev / mib:.2f} | {std / rev:.1f}x |")

    budget = args.budget_mib * mib
    depths = (2, 4, 8, 16, 32, 64) if args.quick else (2, 4, 8, 16, 32, 64, 128)
    print(f"\n3. deepest RevNet trainable within {args.budget_mib:.0f} MiB of device memory")
    print("| depth | standard step MiB | fits | reversible device peak MiB | fits |")
    print("|---:|---:|:---:|---:|:---:|")
    best = {"standard": 0, "reversible": 0}
    for depth in depths:
        graph, constants, _ = revnet.RevNet(depth=depth, width=width)
        std = standard_step_memory(graph, constants, cfg, batch, IMAGE)["total"]
        rev = reversible_footprint(depth, width, batch)["peak"]
        if std <= budget:
            best["standard"] = depth
        if rev <= budget:
            best["reversible"] = depth
        print(f"| {depth} | {std / mib:.1f} | {'yes' if std <= budget else 'no'} | "
              f"{rev / mib:.1f} | {'yes' if rev <= budget else 'no'} |")
    print(f"\ndeepest within budget: standard {best['standard']}, reversible "
          f"{best['reversible']} (of those tried; the reversible peak does not grow)")


if __name__ == "__main__":
    main()
