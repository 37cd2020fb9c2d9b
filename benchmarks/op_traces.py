"""How many ops a search traces with `jax.eval_shape` to learn their shapes, and its seconds.

Synthesis checks every candidate subgraph op by op; an op whose shapes are not known yet (in
memory or in the property store) is traced. The count is deterministic, so it compares two
revisions where seconds on a shared machine cannot. Two identical searches run one after
the other in one process with a new property store: the first pays every trace, the second
should pay none.

    python benchmarks/op_traces.py
    PYTHONPATH=/path/to/other/tree python benchmarks/op_traces.py   # another revision's nas

The searches are the test suite's (`tiny_search_config` in `tests/search/conftest.py`: the
README's search on 16x16 digits, 3 candidates, in this process).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import nas.properties.tensor_shapes as tensor_shapes
from nas.search.execution.driver import Driver

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "search"))
from conftest import tiny_search_config  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    traced = [0]
    trace = tensor_shapes.eval_op_shapes

    def counted(*a, **kw):
        traced[0] += 1
        return trace(*a, **kw)

    tensor_shapes.eval_op_shapes = counted
    print(f"nas from {os.path.dirname(os.path.dirname(tensor_shapes.__file__))}")
    with tempfile.TemporaryDirectory(prefix="op_traces_") as scratch:
        store = os.path.join(scratch, "ops.sqlite")
        for run in (1, 2):
            before, start = traced[0], time.perf_counter()
            config = tiny_search_config(seed_epochs=0.2, property_cache=store)
            config.train.total_epochs = 0.2
            Driver(config, os.path.join(scratch, f"search{run}")).run(progress=False)
            print(f"search {run}: {traced[0] - before} ops traced, "
                  f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
