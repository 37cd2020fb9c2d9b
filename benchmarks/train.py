"""Training throughput, side by side in one run (this machine is shared and noisy).

    python benchmarks/train.py [--quick]

Prints four tables:
1. Input: digits CifarNet (batch 128) images/sec of the whole training loop of
   `train_and_eval` (device-resident data, and the grain pipeline; steps / step-loop time,
   without compile and the final eval) against the compiled train step alone on the same
   device data. Best of two alternated rounds each. Goal: loop / step >= 0.9 with the data
   on the device.
2. MFU: achieved FLOP/s of the CifarNet (and, without --quick, ResNet18) train step in f32
   and bf16 at batch 128 and 1024 (ResNet18 at 1024 on an accelerator only), over a matmul
   peak of the same dtype measured in this run. FLOPs per step are counted from the step's
   jaxpr (nas.train.flops: backend independent, forward + backward + optimizer).
3. Compilations of one candidate (first run, then a rerun served by the persistent cache).
4. CifarNet step with 1 vs 2 devices at a large global batch: forced CPU devices in
   subprocesses on a CPU host; skipped when the host has a single accelerator.
5. The mesh step (`jax.jit` over a `Mesh`, what `train_and_eval` runs) against the same
   step under `jax.pmap` (kept here only, for the comparison) on 2 devices (forced CPU
   devices in a subprocess on a CPU host; the local accelerators elsewhere): digits
   CifarNet, batch 128, device-resident data and a host batch, alternated rounds, best of
   each; and the training loop of `train_and_eval` against the mesh step.

    python benchmarks/train.py --mesh-only   # table 5 alone
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _digits_config(batch: int, epochs: float, device_bytes: int, dtype: str = "float32"):
    from nas.train.config import base_config

    c = base_config()
    c.num_classes = 10  # the digits; the trainers built here read it directly
    c.input.batch_size = batch
    c.input.device_data_bytes = device_bytes
    c.total_epochs = epochs
    c.eval.every_epochs = 1000  # one evaluation, at the end: the loop is what is timed
    c.ckpt_steps = 0
    c.log_training_steps = 10**9
    c.compute_dtype = dtype
    return c


def _step_trainer(model_name: str, batch: int, dtype: str, device_data: bool):
    """A compiled StandardTrainer on digits (device feed) or synthetic host data."""
    import jax

    from nas.graph import Model
    from nas.train import data, devdata, trainers, zoo_graph
    from nas.train.train import _init_variables

    config = _digits_config(batch, 1.0, 2**30, dtype)
    graph, constants = zoo_graph(model_name, 10, 32)
    model = Model(graph, constants)
    variables = _init_variables(model, (32, 32, 3), 0, {})
    dd = None
    if device_data:
        src = data.open_source("digits", "train", None)
        dd = devdata.load(src, "digits", 32, 0, jax.local_devices())
    t = trainers.StandardTrainer(model, config, params=dict(variables["params"]), frozen={},
                                 batch_stats=dict(variables.get("batch_stats", {})),
                                 sched_kw={"total_steps": 10_000}, device_data=dd)
    if dd is not None:
        first = dd.indices(0, batch)
    else:
        x = np.random.default_rng(0).normal(size=(batch, 32, 32, 3)).astype(np.float32)
        first = {"image": x, "label": np.zeros(batch, np.int32)}
    ev = {"image": np.zeros((jax.local_device_count(), 32, 32, 3), np.float32),
          "label": np.zeros(jax.local_device_count(), np.int32),
          "mask": np.ones(jax.local_device_count(), np.float32)}
    compile_s = t.compile(first, ev)
    return t, first, compile_s


def _step_rate(model_name: str, batch: int, dtype: str, seconds: float,
               device_data: bool = False) -> dict:
    """images/sec of the compiled train step alone, and its FLOPs from the jaxpr."""
    import jax

    from nas.train import flops, perf

    t, first, compile_s = _step_trainer(model_name, batch, dtype, device_data)
    args = (t._state_r, *t._args(first))
    flops_per_step = flops.count(t._train, *args) * jax.local_device_count()

    def run():
        return t.train_step(first)["training_loss"]

    ips = perf.throughput(run, batch, min_seconds=seconds, min_calls=3)
    return {"model": model_name, "batch": batch, "dtype": dtype, "images_per_s": ips,
            "flops_per_step": flops_per_step, "flop_per_s": flops_per_step * ips / batch,
            "compile_s": compile_s}


def _loop_rate(batch: int, epochs: float, device_bytes: int) -> dict:
    """images/sec of the whole training loop of train_and_eval on digits CifarNet."""
    from nas.train import train_and_eval

    config = _digits_config(batch, epochs, device_bytes)
    m, _, _ = train_and_eval(config, eval_perf=False)
    return {"images_per_s": m.steps * batch / max(m.train_seconds, 1e-9),
            "wait_share": m.input_wait_seconds / max(m.train_seconds, 1e-9),
            "steps": m.steps, "compilations": m.compilations, "cache_hits": m.compile_cache_hits}


def _peak(dtype: str, seconds: float) -> float:
    """Best matmul FLOP/s of one dtype: 2048^3 on CPU, 8192^3 on an accelerator (a small
    product does not fill a GPU)."""
    import jax

    from nas.train.perf import matmul_peak_flops

    n = 2048 if jax.default_backend() == "cpu" else 8192
    return matmul_peak_flops(n, seconds, dtype)


def _compilations() -> tuple[dict, dict]:
    """One tiny candidate twice with a fresh persistent cache: compiles, then cache hits."""
    from nas.train import train_and_eval

    with tempfile.TemporaryDirectory() as cache:
        config = _digits_config(128, 0.2, 2**30)
        config.compilation_cache_dir = cache
        out = []
        for _ in range(2):
            m, _, _ = train_and_eval(config)
            out.append({"compilations": m.compilations, "cache_hits": m.compile_cache_hits,
                        "compile_s": m.compile_seconds})
    return out[0], out[1]


def _devices_subprocess(devices: int, batch: int, seconds: float) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    out = subprocess.run(
        [sys.executable, __file__, "--child", f"--batch={batch}", f"--seconds={seconds}"],
        env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _pmap_step(t, device_data: bool):
    """The trainer's own step function under `jax.pmap`, with pmap's layout (a leading
    device axis on every input): () -> loss, one step per call."""
    import jax

    from nas.train import compilation, steps
    from nas.train import mesh as mesh_lib

    n = jax.local_device_count()
    fn = steps.make_train_step(t.model, t.tx, t.num_classes, compute_dtype=t.dtype)
    if device_data:
        fn = steps.with_device_data(fn, t.device_data.augment_fn(), t.seed)
    pm = jax.pmap(fn, axis_name=steps.AXIS, donate_argnums=(0,))

    def lead(x):  # (n * k, ...) -> (n, k, ...), device d's rows in row d
        return np.asarray(x).reshape(n, -1, *np.shape(x)[1:])

    put = jax.pmap(lambda x: x)
    state = {"s": put(jax.tree.map(lambda x: np.broadcast_to(x, (n, *np.shape(x))),
                                   t.state()))}
    rng = np.broadcast_to(np.asarray(jax.random.PRNGKey(0)), (n, 2))
    if device_data:
        share = put(jax.tree.map(lead, mesh_lib.to_host(t.device_data.arrays)))
        batch = t.device_data.indices(0, 128)
        args = lambda: (share, lead(batch), rng)  # noqa: E731
    else:
        x = np.random.default_rng(0).normal(size=(128, 32, 32, 3)).astype(np.float32)
        host = {"image": x, "label": np.zeros(128, np.int32)}
        args = lambda: (jax.tree.map(lead, host), rng)  # noqa: E731

    # compiled as the trainer compiled it before the mesh (`compilation.gradient_options`)
    compiled = pm.lower(state["s"], *args()).compile(
        compiler_options=compilation.gradient_options())

    def run():
        state["s"], m = compiled(state["s"], *args())
        return m["training_loss"]

    return run


def _mesh_vs_pmap(seconds: float, rounds: int = 3) -> dict:
    """Images/s of the mesh step and the pmap step (digits CifarNet, batch 128), with
    device-resident data and with a host batch, alternated; and of the training loop."""
    import jax

    from nas.train import perf

    out: dict = {"devices": jax.local_device_count()}
    for device_data in (True, False):
        t, first, _ = _step_trainer("cnn", 128, "float32", device_data)

        def mesh_run(t=t, first=first):
            return t.train_step(first)["training_loss"]

        pmap_run = _pmap_step(t, device_data)
        best = {"mesh": 0.0, "pmap": 0.0}
        for _ in range(rounds):
            for name, run in (("mesh", mesh_run), ("pmap", pmap_run)):
                best[name] = max(best[name], perf.throughput(run, 128, min_seconds=seconds))
        out["device" if device_data else "host"] = best
    epochs = 2.0 if jax.default_backend() == "cpu" else 20.0
    out["loop"] = max(_loop_rate(128, epochs, 2**30)["images_per_s"] for _ in range(2))
    return out


def _print_mesh_vs_pmap(r: dict) -> None:
    print(f"## 5. digits CifarNet train step, batch 128 on {r['devices']} devices: "
          f"mesh (jit + shard_map) vs pmap")
    print(f"{'data':24s} {'mesh img/s':>10s} {'pmap img/s':>10s} {'mesh/pmap':>9s}")
    for key, name in (("device", "device-resident"), ("host", "host batch")):
        m, p = r[key]["mesh"], r[key]["pmap"]
        print(f"{name:24s} {m:10.0f} {p:10.0f} {m / p:9.2f}")
    print(f"training loop (device data) {r['loop']:.0f} img/s: loop / mesh step "
          f"{r['loop'] / r['device']['mesh']:.2f}")


def _mesh_table(secs: float) -> None:
    import jax

    if jax.default_backend() != "cpu":
        if jax.local_device_count() < 2:
            print("## 5. skipped: a single accelerator (the mesh has one device)")
            return
        _print_mesh_vs_pmap(_mesh_vs_pmap(secs))
        return
    env = dict(os.environ, JAX_PLATFORMS="cpu",
               XLA_FLAGS="--xla_force_host_platform_device_count=2")
    out = subprocess.run([sys.executable, __file__, "--mesh-child", f"--seconds={secs}"],
                         env=env, capture_output=True, text=True, check=True)
    _print_mesh_vs_pmap(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="CifarNet only, shorter timings")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mesh-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--mesh-only", action="store_true", help="table 5 alone")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--seconds", type=float, default=3.0)
    args = p.parse_args()
    if args.child:
        import jax

        r = _step_rate("cnn", args.batch, "float32", args.seconds)
        print(json.dumps(r | {"devices": jax.local_device_count()}))
        return
    if args.mesh_child:
        print(json.dumps(_mesh_vs_pmap(args.seconds)))
        return
    import jax

    if args.mesh_only:
        _mesh_table(1.0 if args.quick else args.seconds)
        return

    accelerator = jax.default_backend() != "cpu"
    secs = 1.0 if args.quick else 3.0
    # On an accelerator an epoch of digits is a few milliseconds: run more of them.
    epochs = (2.0 if args.quick else 5.0) * (10 if accelerator else 1)

    # 1. input vs step: alternated, best of two rounds each (the host is shared and noisy)
    rounds = [(_step_rate("cnn", 128, "float32", secs, device_data=True),
               _loop_rate(128, epochs, 2**30), _loop_rate(128, epochs, 0)) for _ in range(2)]
    step_dev, loop_dev, loop_grain = (max((r[i] for r in rounds),
                                          key=lambda x: x["images_per_s"]) for i in range(3))
    print(f"backend {jax.default_backend()}, {jax.local_device_count()} local device(s)")
    print()
    print("## 1. digits CifarNet, batch 128: training loop vs the train step alone")
    print(f"{'':34s} {'img/s':>8s} {'loop/step':>9s} {'input wait':>10s}")
    print(f"{'train step alone (device data)':34s} {step_dev['images_per_s']:8.0f}")
    for name, r in (("loop, device-resident data", loop_dev), ("loop, grain pipeline", loop_grain)):
        print(f"{name:34s} {r['images_per_s']:8.0f} "
              f"{r['images_per_s'] / step_dev['images_per_s']:9.2f} {r['wait_share']:10.1%}")
    print()

    # 2. MFU
    peaks = {d: _peak(d, secs) for d in ("float32", "bfloat16")}
    models = [("cnn", 128), ("cnn", 1024)] + ([] if args.quick else [("resnet18", 128)])
    models += [("resnet18", 1024)] if accelerator and not args.quick else []
    rows = [_step_rate(m, b, d, secs) for m, b in models for d in ("float32", "bfloat16")]
    peaks = {d: max(v, _peak(d, secs)) for d, v in peaks.items()}  # before and after
    print(f"## 2. MFU against a {2048 if not accelerator else 8192}^3 matmul peak measured here: "
          + ", ".join(f"{d} {v / 1e9:.0f} GFLOP/s" for d, v in peaks.items()))
    print(f"{'model':9s} {'batch':>5s} {'dtype':>8s} {'img/s':>8s} {'GFLOP/step':>10s} "
          f"{'GFLOP/s':>8s} {'MFU':>6s} {'compile s':>9s}")
    for r in rows:
        print(f"{r['model']:9s} {r['batch']:5d} {r['dtype']:>8s} {r['images_per_s']:8.0f} "
              f"{r['flops_per_step'] / 1e9:10.2f} {r['flop_per_s'] / 1e9:8.1f} "
              f"{r['flop_per_s'] / peaks[r['dtype']]:6.1%} {r['compile_s']:9.1f}")
    print()

    # 3. compilations
    first, second = _compilations()
    print("## 3. compilations of one digits CifarNet candidate (0.2 epochs, fresh cache)")
    print(f"first run: {first['compilations']} compilations, {first['cache_hits']} cache hits, "
          f"train+eval step compile {first['compile_s']:.2f} s")
    print(f"rerun:     {second['compilations']} compilations, {second['cache_hits']} cache "
          f"hits, train+eval step compile {second['compile_s']:.2f} s")
    print()

    # 4. devices
    big = 256 if args.quick else 512
    print(f"## 4. CifarNet train step, global batch {big}, 1 vs 2 devices")
    if jax.default_backend() != "cpu" and jax.local_device_count() < 2:
        print("skipped: this host has a single accelerator (forced CPU devices would not "
              "measure it)")
        return
    one = _devices_subprocess(1, big, secs)
    two = _devices_subprocess(2, big, secs)
    print(f"{'devices':>7s} {'img/s':>8s}")
    for r in (one, two):
        print(f"{r['devices']:7d} {r['images_per_s']:8.1f}")
    print(f"speedup 2 vs 1 devices: {two['images_per_s'] / one['images_per_s']:.2f}x "
          f"(forced CPU devices share this host's cores)")
    print()
    _mesh_table(secs)


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    main()
