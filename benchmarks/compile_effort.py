"""Does a lower (or higher) XLA optimization effort pay off against a child's training budget?

Compiles the README search's CifarNet train step (digits, batch 64, Adam) and its eval step
with each compiler setting, then times steps on the compiled programs, and prints the
compile seconds, the median step seconds, and the total for a README child's budget
(22 train steps and one eval of 360 images: what a child trains for one epoch). A fresh
persistent cache is not used: every setting compiles, each in a process of its own (XLA:GPU
keeps autotuning results in memory, so a later setting in the same process would compile
faster for that alone).

    python benchmarks/compile_effort.py [--steps 22] [--repeats 12]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import jax
import numpy as np
import optax

from nas import zoo
from nas.graph import Model
from nas.train import mesh as mesh_lib
from nas.train import steps
from nas.train.optim import init_state

SETTINGS = {  # name: compiler options of `.compile(compiler_options=...)`
    "default": {},
    "xla_backend_optimization_level=0": {"xla_backend_optimization_level": 0},
    "xla_backend_optimization_level=1": {"xla_backend_optimization_level": 1},
    "xla_llvm_disable_expensive_passes": {"xla_llvm_disable_expensive_passes": True},
}
CPU_SETTINGS = {  # XLA:GPU has no such option
    "exec_time_optimization_effort=-1": {"exec_time_optimization_effort": -1.0},
    "exec_time_optimization_effort=+1": {"exec_time_optimization_effort": 1.0},
    # XLA:CPU's YNN (XNNPACK) library fusions off for both programs (the trainer turns
    # them off for its train step only: nas.train.compilation.gradient_options)
    "xla_cpu_experimental_ynn_fusion_type=none": {"xla_cpu_experimental_ynn_fusion_type": ""},
    # XLA:CPU's loop emitters in place of its MLIR fusion emitters (the test suite's
    # setting, tests/conftest.py), alone and with the trainer's YNN setting
    "xla_cpu_use_fusion_emitters=false": {"xla_cpu_use_fusion_emitters": False},
    "ynn_fusion_type=none + use_fusion_emitters=false": {
        "xla_cpu_experimental_ynn_fusion_type": "", "xla_cpu_use_fusion_emitters": False},
}
GPU_SETTINGS = {  # XLA:GPU's own: how hard it autotunes kernels (default 4; 0 off)
    "xla_gpu_autotune_level=0": {"xla_gpu_autotune_level": 0},
    "xla_gpu_autotune_level=1": {"xla_gpu_autotune_level": 1},
    "xla_gpu_autotune_level=2": {"xla_gpu_autotune_level": 2},
    "xla_gpu_autotune_level=3": {"xla_gpu_autotune_level": 3},
}


def settings() -> dict[str, dict]:
    """The settings compared on this process's default backend."""
    return {**SETTINGS, **(GPU_SETTINGS if jax.default_backend() == "gpu" else CPU_SETTINGS)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=22, help="train steps of a child")
    parser.add_argument("--repeats", type=int, default=12, help="timed steps per setting")
    parser.add_argument("--setting", default="", help="measure only this one (a table row)")
    args = parser.parse_args()
    if not args.setting:
        print(f"{jax.default_backend()}, {args.steps} train steps + 1 eval per child")
        print("| setting | compile s | train step s | eval s | child total s |")
        print("|---|---:|---:|---:|---:|")
        for name in settings():
            subprocess.run([sys.executable, __file__, "--setting", name, "--steps",
                            str(args.steps), "--repeats", str(args.repeats)], check=False)
        return
    options = settings()[args.setting]
    graph, constants, _ = zoo.build("cnn", 10, 32)
    model = Model(graph, constants)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32, 32, 3)).astype(np.float32)
    variables = jax.tree.map(np.asarray, model.init(jax.random.PRNGKey(0), x[:1]))
    tx = optax.adam(1e-3)
    state = {"params": variables["params"], "frozen": {}, "step": np.int32(0),
             "batch_stats": variables.get("batch_stats", {}),
             "opt_state": init_state(tx, variables["params"])}
    mesh = mesh_lib.build()
    state_r = mesh_lib.put_replicated(state, mesh)
    batch = mesh_lib.put_sharded({"image": x, "label": rng.integers(0, 10, 64).astype(np.int32)},
                                 mesh)
    key = mesh_lib.put_replicated(np.asarray(jax.random.PRNGKey(0)), mesh)
    ev = mesh_lib.put_sharded({"image": rng.standard_normal((360, 32, 32, 3)).astype(np.float32),
                               "label": np.zeros(360, np.int32),
                               "mask": np.ones(360, np.float32)}, mesh)
    eval_vars = mesh_lib.put_replicated({"params": variables["params"],
                                         "batch_stats": variables.get("batch_stats", {})}, mesh)
    # not donated: the timed calls reuse one state
    train = mesh_lib.data_parallel(steps.make_train_step(model, tx, 10), mesh,
                                   (mesh_lib.REPLICATED, mesh_lib.SHARDED, mesh_lib.REPLICATED),
                                   (mesh_lib.REPLICATED, mesh_lib.REPLICATED))
    evaluate = steps.eval_program(steps.make_eval_step(model, 10), mesh)
    t = time.perf_counter()
    train_c = train.lower(state_r, batch, key).compile(compiler_options=options)
    off = mesh_lib.put_replicated(np.asarray(False), mesh)  # running averages: plain eval
    eval_c = evaluate.lower(eval_vars, ev, off).compile(compiler_options=options)
    compile_s = time.perf_counter() - t
    jax.block_until_ready(train_c(state_r, batch, key))
    times = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        jax.block_until_ready(train_c(state_r, batch, key))
        times.append(time.perf_counter() - t)
    jax.block_until_ready(eval_c(eval_vars, ev, off))
    t = time.perf_counter()
    jax.block_until_ready(eval_c(eval_vars, ev, off))
    eval_s = time.perf_counter() - t
    step_s = float(np.median(times))
    total = compile_s + args.steps * step_s + eval_s
    print(f"| {args.setting} | {compile_s:.2f} | {step_s:.4f} | {eval_s:.3f} | {total:.2f} |",
          flush=True)


if __name__ == "__main__":
    main()
