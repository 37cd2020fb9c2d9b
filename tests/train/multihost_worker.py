"""One process of a 2-process `jax.distributed` run on this machine (one CPU device each),
or one process with 2 forced CPU devices: a tiny candidate trained by `train_and_eval`.

    python multihost_worker.py process ID PORT WORKDIR DATA_DIR   process ID of 2,
                                                coordinator 127.0.0.1:PORT, a shared workdir
    python multihost_worker.py single DATA_DIR              one process, 2 devices

Prints one JSON line of metrics.
"""

import json
import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
devices = 1 if sys.argv[1] == "process" else 2
# The suite's XLA flags, if any, are kept (tests/conftest.py: the cheapest codegen).
DEVICE_FLAG = f"--xla_force_host_platform_device_count={devices}"
os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), DEVICE_FLAG]))
sys.path.insert(0, os.path.dirname(__file__))

import jax  # noqa: E402

if sys.argv[1] == "process":
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{sys.argv[3]}",
                               num_processes=2, process_id=int(sys.argv[2]))

import numpy as np  # noqa: E402
from helpers import tiny_config, tiny_graph  # noqa: E402

from nas.train import TrainOptions, train_and_eval  # noqa: E402

graph, constants = tiny_graph(with_bn=True)
# grain on both sides: several processes do not keep the data on the devices
config = tiny_config(sys.argv[-1], total_epochs=0.5, **{"input.device_data_bytes": 0})
workdir = sys.argv[4] if sys.argv[1] == "process" else None
m, _, state = train_and_eval(config, options=TrainOptions(graph=graph, constants=constants,
                                                          workdir=workdir))
print(json.dumps({"process": jax.process_index(), "processes": jax.process_count(),
                  "devices": jax.device_count(), "acc": m.acc, "loss": m.loss,
                  "steps": m.steps, "eval_examples": m.eval_examples,
                  "params_sum": float(sum(np.sum(np.abs(x)) for x in
                                          jax.tree.leaves(state["params"])))}))
