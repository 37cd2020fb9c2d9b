"""Suite-wide setup, before any test imports jax.

On a GPU, XLA preallocates 75 % of the device per process: with pytest-xdist workers (and
the subprocesses some tests start) the second process would run out of memory. Allocate on
demand instead; a value the user set wins.

XLA:GPU reductions are not bitwise deterministic by default, and the resume tests compare a
resumed run with an uninterrupted one: ask for deterministic GPU ops (ignored on CPU).
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# The suite's models are tiny, so compiling costs more than running. LLVM's cheapest
# codegen (backend level 0, no expensive passes) makes the suite from cold about a fifth
# faster, without changing the HLO passes. XLA:CPU's loop emitters in place of its MLIR
# fusion emitters compile a search test's train step about 3x faster, and took 18-23 %
# off the cold suite (docs/benchmarks.md). A value the user set wins.
FLAGS = {"--xla_gpu_deterministic_ops": "true", "--xla_backend_optimization_level": "0",
         "--xla_llvm_disable_expensive_passes": "true",
         "--xla_cpu_use_fusion_emitters": "false"}
for flag, value in FLAGS.items():
    if flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = " ".join(
            filter(None, [os.environ.get("XLA_FLAGS"), f"{flag}={value}"]))
