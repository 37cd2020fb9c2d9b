"""The guide's "Latency on the device you deploy to" runs as written: its cost exports a
trained candidate with `nas.export_flax` and times it in another process, and works as a
`nas.Cost` with repeats (median and spread) where the worker measures costs."""

import functools
import os
import re

import jax
import numpy as np
import pytest

import nas
from nas.graph import Model
from nas.io.candidate import ExportedCandidate
from nas.search.execution.user_functions import measure_costs
from nas.zoo import cnn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = {"input": {"image_size": 16}}


def _guide_blocks():
    with open(os.path.join(ROOT, "docs", "guide.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("### Latency on the device you deploy to")
    section = text[start:text.index("\n## ", start)]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _candidate():
    graph, constants, _ = cnn.CifarNet()
    x = np.zeros((1, 16, 16, 3), np.float32)
    variables = Model(graph, constants).init(jax.random.key(0), x, deterministic=True,
                                             training=False)
    return graph, constants, jax.tree.map(np.asarray, dict(variables))


@pytest.mark.slow  # a jax process per candidate timed: about a minute of the default suite
def test_the_guides_cost_times_the_exported_model_in_another_process():
    cost_code, search_code = _guide_blocks()
    assert "nas.run_search(" in search_code and "deployed_latency_ms" in search_code
    space: dict = {}
    exec(compile(cost_code, "guide.md", "exec"), space)  # noqa: S102 - the guide's own code
    graph, constants, variables = _candidate()
    candidate = ExportedCandidate(path="(test)", graph=graph, constants=constants,
                                  variables=variables, input_shape=(16, 16, 3))
    assert candidate.input_shape == (16, 16, 3)
    # as a search's cost with repeats, as the worker calls it: a median and a spread (two
    # processes, each importing jax: 20 timed calls each keep it short)
    cost = nas.Cost(functools.partial(space["deployed_latency_ms"], calls=20), repeats=2)
    out = measure_costs({"costs.deployed_ms": cost}, graph, constants, variables, TRAIN,
                        {})
    assert set(out) == {"deployed_ms", "deployed_ms_iqr"}
    assert out["deployed_ms"] > 0 and out["deployed_ms_iqr"] >= 0
