"""Reversible CPU-offload trainer vs the standard trainer, side by side in one run.

    python benchmarks/reversible.py            # RevNet width 64, batch 128, depths 4 16 64
    python benchmarks/reversible.py --quick    # width 16, batch 32: minutes on 2 CPU cores

For each depth (couplings, 2 resolution stages), on the same parameters and batch:
* step time of the standard data-parallel step (`nas.train.steps`, pmapped, as
  `train_and_eval` runs it) and of `ReversibleTrainer.train_step`, timed in alternating
  rounds, and the throughput ratio reversible / standard;
* the device peak of each: standard = its compiled step's arguments + outputs + temps
  (`memory_analysis`); reversible = the largest per-layer temp plus the largest bytes
  resident in the `device` memory kind at any layer boundary (every backend alike);
* arrays copied onto the device and written back to host memory, and compiled-program
  launches, per reversible step and per coupling (the slope between the two deepest
  depths);
* of one reversible step's wall time, the milliseconds Python spends dispatching programs
  and waiting for the device (the rest is Python between calls).
Then the deepest depth each trainer fits in `--budget-mib` (standard from the compiled
step's footprint at each depth; reversible from its measured peak, which does not grow).
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


def _device_bytes() -> int:
    return sum(x.nbytes for x in jax.live_arrays()
               if x.sharding.memory_kind in ("device", None) and not x.is_deleted())


def _host_split(rev: ReversibleTrainer, data: dict, rng: jax.Array) -> dict:
    """Seconds of one reversible step that Python spends dispatching programs (their calls
    return before the device finishes) and waiting for the device (the throttle and the
    final loss): where the step's time goes when the device work per layer is small."""
    from nas.train import reversible

    spent = {"dispatch": 0.0, "wait": 0.0}

    def timed(fn, key):
        def wrapper(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[key] += time.perf_counter() - t
        return wrapper

    call, throttle = rev._call, reversible._throttle
    rev._call, reversible._throttle = timed(call, "dispatch"), timed(throttle, "wait")
    try:
        t = time.perf_counter()
        rev.train_step(data, rng)
        total = time.perf_counter() - t
    finally:
        del rev._call
        reversible._throttle = throttle
    return {"dispatch": spent["dispatch"], "wait": spent["wait"], "split_total": total}


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
    std = jax.pmap(steps.make_train_step(model, tx, 10), axis_name=steps.AXIS,
                   donate_argnums=(0,), devices=jax.local_devices()[:1])
    state_r = steps.replicate(state, 1)
    sharded = steps.shard(data, 1)
    rng_r = steps.replicate(np.asarray(jax.random.PRNGKey(0)), 1)
    rev = ReversibleTrainer(graph, constants, config=config, sched_kw=sched_kw,
                            image_shape=IMAGE, params=params, cache=cache,
                            devices=jax.local_devices()[:1])
    rng = jax.random.PRNGKey(0)
    for _ in range(2):  # compile and warm up
        state_r, m = std(state_r, sharded, rng_r)
        jax.block_until_ready(m)
        rev.train_step(data, rng)

    # Device peak of a reversible step, the same way on every backend: the largest
    # device-kind bytes alive at a layer boundary plus the largest compiled temp. (The
    # allocator's peak_bytes_in_use is per process and would include the standard step's.)
    base = _device_bytes()
    seen: list[int] = []
    rev.hook = lambda event, layer: seen.append(_device_bytes() - base)
    rev.train_step(data, rng)
    rev.hook = None
    out["rev_peak"] = rev.max_temp_bytes() + max(seen) + sum(v.nbytes for v in data.values())
    out.update(rev.step_counts())
    out.update(_host_split(rev, data, rng))
    out["layers"] = len(rev.layers)

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
    parser.add_argument("--quick", action="store_true", help="CPU-sized: width 16, batch 32")
    parser.add_argument("--width", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--depths", type=int, nargs="+")
    parser.add_argument("--budget-mib", type=float)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=2)
    args = parser.parse_args()
    width = args.width or (16 if args.quick else 64)
    batch = args.batch or (32 if args.quick else 128)
    depths = args.depths or [4, 16, 64]
    budget = (args.budget_mib or (64.0 if args.quick else 1024.0)) * MiB

    dev = jax.devices()[0]
    print(f"jax {jax.__version__}, backend {jax.default_backend()} ({dev.device_kind}), "
          f"1 device; RevNet width {width}, 2 stages, batch {batch}, "
          f"{IMAGE[0]}x{IMAGE[1]}x{IMAGE[2]}, Adam; {args.rounds} rounds of "
          f"{args.per_round} steps, medians\n")
    cache = ProgramCache()
    rows = [measure(d, width, batch, args.rounds, args.per_round, cache) for d in depths]
    print("| depth | standard ms/step | reversible ms/step | reversible / standard "
          "throughput | standard peak MiB | reversible peak MiB | copies to device/step | "
          "writes to host/step | launches/step | dispatch ms/step | device wait ms/step |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['depth']} | {1e3 * r['std']:.1f} | {1e3 * r['rev']:.1f} | "
              f"{r['std'] / r['rev']:.2f}x | {r['std_peak'] / MiB:.1f} | "
              f"{r['rev_peak'] / MiB:.1f} | {r['to_device']} | {r['to_host']} | "
              f"{r['launches']} | "
              f"{1e3 * r['dispatch']:.1f} | {1e3 * r['wait']:.1f} |")
    if len(rows) > 1:
        a, b = rows[-2], rows[-1]
        dd = b["depth"] - a["depth"]
        print(f"\nper coupling (depth {a['depth']} -> {b['depth']}): "
              f"{(b['to_device'] - a['to_device']) / dd:.1f} copies to the device, "
              f"{(b['to_host'] - a['to_host']) / dd:.1f} writes to host, "
              f"{(b['launches'] - a['launches']) / dd:.1f} launches")

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


if __name__ == "__main__":
    main()
