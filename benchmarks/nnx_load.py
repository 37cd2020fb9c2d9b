"""How long does exported NNX code take to load, against building its `Model`?

Exports the README CifarNet and ResNet18 (small) as NNX code (`nas.export_flax(...,
api="nnx")`) and times, each in a fresh process (eager ops compile once per process),
`from_variables(variables)` against `Model(rngs=nnx.Rngs(0))`: the eager construction that
draws every initial weight, which `from_variables` skips by making only their shapes.
Prints the seconds of each and their ratio.

    python benchmarks/nnx_load.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

WAYS = ("from_variables", "Model(rngs)")


def measure(directory: str, way: str) -> float:
    """Seconds of one load of the export in `directory`, the first in this process."""
    import importlib.util

    from flax import nnx, serialization

    spec = importlib.util.spec_from_file_location("exported", os.path.join(directory,
                                                                           "model.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with open(os.path.join(directory, "variables.msgpack"), "rb") as f:
        variables = serialization.msgpack_restore(f.read())
    start = time.perf_counter()
    model = (module.from_variables(variables) if way == WAYS[0]
             else module.Model(rngs=nnx.Rngs(0)))
    nnx.state(model).flat_state()  # every variable made
    return time.perf_counter() - start


def export(name: str, directory: str) -> None:
    import jax
    import numpy as np

    import nas
    from nas.graph import Model
    from nas.io.candidate import ExportedCandidate
    from nas.zoo import cnn, resnetv1

    graph, constants, _ = (cnn.CifarNet() if name == "cnn" else
                           resnetv1.ResNet18(num_classes=10, input_resolution="small"))
    shape = (32, 32, 3)
    variables = jax.tree.map(np.asarray, Model(graph, constants).init(
        jax.random.PRNGKey(0), np.zeros((1, *shape), np.float32)))
    nas.export_flax(ExportedCandidate(path=name, graph=graph, constants=constants,
                                      variables=variables, input_shape=shape),
                    directory, api="nnx")


def main() -> None:
    if len(sys.argv) == 3:
        print(measure(sys.argv[1], sys.argv[2]))
        return
    print("| model | from_variables s | Model(rngs) s | Model(rngs) / from_variables |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("cnn", "resnet18"):
            directory = os.path.join(tmp, name)
            export(name, directory)
            seconds = [float(subprocess.run([sys.executable, __file__, directory, way],
                                            check=True, capture_output=True,
                                            text=True).stdout.split()[-1]) for way in WAYS]
            print(f"| {name} | {seconds[0]:.2f} | {seconds[1]:.2f} | "
                  f"{seconds[1] / seconds[0]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
