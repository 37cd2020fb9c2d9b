"""Reversible CPU-offload trainer vs the standard trainer, side by side in one run.

    python benchmarks/reversible.py            # RevNet width 16, batch 32, depths 4 16 64
    python benchmarks/reversible.py --quick    # width 8, batch 16, depths 2 8 32
    python benchmarks/reversible.py --width 64 --batch 128 --depths 4 32 256  # accelerator

For each depth (couplings, 2 resolution stages), on the same parameters and batch:
* step time of the standard data-parallel step (`nas.train.steps`, pmapped, as
  `train_and_eval` runs it) and of `ReversibleTrainer.train_step`, timed in alternating
  rounds, and the throughput ratio reversible / standard;
* compiled programs launched per step by each, counted where JAX hands executables to the
  runtime (`nas.train.launches`);
* host-device transfers per reversible step: arrays crossing the program's boundary
  (batch, labels and step number in, loss out) and, inside the program, packed layer rows
  and kept activations copied onto the device and written back to host memory;
* the device peak of each: standard = its compiled step's arguments + outputs + temps
  (`memory_analysis`); reversible = its step program's temps (the state is a host-memory
  argument) plus the batch.
Then the deepest depth each trainer fits in `--budget-mib` (standard from the compiled
step's footprint at each depth; reversible from its measured peak, which does not grow).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import jax
import numpy as np

from nas.graph import Model
from nas.train import config as config_lib
from nas.train import mesh as mesh_lib
from nas.train import optim, steps
from nas.train.launches import count_launches
from nas.train.memory import standard_step_memory
from nas.train.reversible import ReversibleTrainer
from nas.train.revprograms import ProgramCache
from nas.zoo import revnet

IMAGE = (32, 32, 3)
MiB = 2**20


def _config() -> config_lib.ml_collections.ConfigDict:
    return config_lib.with_defaults({"optax_name": "scale_by_adam", "lr": 1e-3,
                                     "grad_clip_norm": 0.0})


def _batch(batch: int) -> dict[str, np.ndarray]:
    rs = np.random.RandomState(0)
    return {"image": rs.randn(batch, *IMAGE).astype(np.float32),
            "label": rs.randint(0, 10, batch).astype(np.int32)}


def measure(depth: int, width: int, batch: int, rounds: int, per_round: int,
            cache: ProgramCache) -> dict:
    graph, constants, _ = revnet.RevNet(depth=depth, width=width)
    config = _config()
    model = Model(graph, constants)
    data = _batch(batch)
    params = jax.tree.map(np.asarray, dict(model.init(jax.random.PRNGKey(0),
                                                      data["image"][:1])["params"]))
    sched_kw = {"total_steps": 10_000}
    out: dict = {"depth": depth}
    out["std_peak"] = standard_step_memory(graph, constants, config, batch, IMAGE)["total"]

    tx, _ = optim.make(config, params, sched_kw)
    state = {"params": params, "frozen": {}, "batch_stats": {}, "opt_state": tx.init(params),
             "ema": {}, "step": np.int32(0)}
    rng = jax.random.PRNGKey(0)
    mesh = mesh_lib.build((1,))
    rng_r = mesh_lib.put_replicated(np.asarray(rng), mesh)
    sharded = mesh_lib.put_sharded(data, mesh)
    # Launches are counted where JAX hands executables to the runtime; the programs must
    # be built and first called inside the block (see `nas.train.launches`).
    with count_launches() as count:
        std = steps.train_program(steps.make_train_step(model, tx, 10), mesh)
        state_r = mesh_lib.put_replicated(state, mesh)
        rev = ReversibleTrainer(graph, constants, config=config, sched_kw=sched_kw,
                                image_shape=IMAGE, params=params, cache=cache, mesh=mesh)
        state_r, m = std(state_r, sharded, rng_r)  # compile (the counted steps warm up)
        jax.block_until_ready(m)
        rev.train_step(data, rng)
        count.reset()
        state_r, m = std(state_r, sharded, rng_r)
        jax.block_until_ready(m)
        out["std_launches"] = count.launches
        count.reset()
        rev.train_step(data, rng)
        out["rev_launches"] = count.launches

    # Device peak of a reversible step: its program's temporaries (the weights and
    # optimizer state are arguments in host memory) plus the batch it is given.
    out["rev_peak"] = rev.max_temp_bytes() + sum(v.nbytes for v in data.values())
    out.update(rev.step_counts())
    out["layers"] = len(rev.layers)
    out["segments"] = len(rev.segments)

    times: dict[str, list[float]] = {"std": [], "rev": []}
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(per_round):
            state_r, m = std(state_r, sharded, rng_r)
        jax.block_until_ready(m)
        times["std"].append((time.perf_counter() - t) / per_round)
        t = time.perf_counter()
        for _ in range(per_round):
            rev.train_step(data, rng)  # returns a float: synchronous
        times["rev"].append((time.perf_counter() - t) / per_round)
    out.update({k: statistics.median(v) for k, v in times.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="width 8, batch 16, depths 2 8 32")
    parser.add_argument("--width", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--depths", type=int, nargs="+")
    parser.add_argument("--budget-mib", type=float)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--per-round", type=int, default=1)
    args = parser.parse_args()
    start = time.perf_counter()
    width = args.width or (8 if args.quick else 16)
    batch = args.batch or (16 if args.quick else 32)
    depths = args.depths or ([2, 8, 32] if args.quick else [4, 16, 64])
    budget = (args.budget_mib or 64.0) * MiB

    dev = jax.devices()[0]
    print(f"jax {jax.__version__}, backend {jax.default_backend()} ({dev.device_kind}), "
          f"1 device; RevNet width {width}, 2 stages, batch {batch}, "
          f"{IMAGE[0]}x{IMAGE[1]}x{IMAGE[2]}, Adam; {args.rounds} rounds of "
          f"{args.per_round} steps, medians\n")
    cache = ProgramCache()
    rows = [measure(d, width, batch, args.rounds, args.per_round, cache) for d in depths]
    print("| depth | standard ms/step | reversible ms/step | reversible / standard "
          "throughput | standard launches/step | reversible launches/step | host<->program "
          "arrays/step | in-program copies to device/step | in-program writes to host/step | "
          "standard peak MiB | reversible peak MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['depth']} | {1e3 * r['std']:.1f} | {1e3 * r['rev']:.1f} | "
              f"{r['std'] / r['rev']:.2f}x | {r['std_launches']} | {r['rev_launches']} | "
              f"{r['boundary']} | {r['to_device']} | {r['to_host']} | "
              f"{r['std_peak'] / MiB:.1f} | {r['rev_peak'] / MiB:.1f} |")

    # The deepest depth within the budget, standard from its compiled footprint.
    rev_peak = max(r["rev_peak"] for r in rows)
    config = _config()
    best_std, depth = 0, 1
    while depth <= 1024:
        graph, constants, _ = revnet.RevNet(depth=depth, width=width)
        need = standard_step_memory(graph, constants, config, batch, IMAGE)["total"]
        if need > budget:
            break
        best_std, depth = depth, depth * 2
    fits = "every depth (its peak does not grow)" if rev_peak <= budget else "none"
    print(f"\nwithin {budget / MiB:.0f} MiB: standard up to depth {best_std} (powers of two "
          f"tried), reversible {fits}: peak {rev_peak / MiB:.1f} MiB at depths {depths}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux
    print(f"peak resident memory of this process: {rss:.0f} MiB; "
          f"wall {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
