"""`nas.check_import`: an import whose graph computes what the module computes passes; one
that computes something else is one line, in Python, inside `checked_imports()` and from
`nas-search import` (which writes nothing then)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import nnx

import nas
from nas.interop.check import checked_imports
from tests.interop import models
from tests.interop.test_import_cli import run_cli


@pytest.fixture(scope="module")
def cnn():
    """(NNX module, example, its import), imported once."""
    model = models.NnxCNN(rngs=nnx.Rngs(0))
    model.eval()
    x = models.example()
    return model, x, nas.from_flax(model, x)


def test_a_faithful_import_passes_and_reports_its_difference(cnn):
    model, x, cand = cnn
    diff = nas.check_import(cand, model, x)
    assert 0.0 <= diff <= 1e-4


def test_a_linen_import_without_variables_is_checked_against_the_same_init():
    model = models.CountsItsCalls()
    x = models.example()
    cand = nas.from_flax(model, x)
    with pytest.raises(ValueError) as excinfo:
        nas.check_import(cand, model, x)
    text = str(excinfo.value)
    assert text.startswith("nas.check_import: CountsItsCalls: the imported graph does not "
                           "reproduce the module's output (largest difference ")
    assert "\n" not in text


def test_changed_weights_are_caught(cnn):
    model, x, cand = cnn
    params = jax.tree.map(np.array, cand.variables["params"])
    head = next(iter(reversed(params)))
    params[head]["kernel"] = params[head]["kernel"] * 1.01
    other = dataclasses.replace(cand, variables={**cand.variables, "params": params})
    with pytest.raises(ValueError, match=r"^nas.check_import: NnxCNN: the imported graph does "
                                         r"not reproduce"):
        nas.check_import(other, model, x)


def test_from_flax_inside_checked_imports_refuses_a_graph_that_disagrees():
    model = models.CountsItsCalls()
    x = models.example()
    nas.from_flax(model, x)  # unchecked: no compilation, no comparison
    with checked_imports(), pytest.raises(ValueError, match="^nas.check_import: "
                                                            "CountsItsCalls: "):
        nas.from_flax(model, x)


def test_bad_arguments_are_one_line():
    x = models.example()
    with pytest.raises(ValueError, match="^nas.check_import: expected the candidate "
                                         "nas.from_flax returned, got str$"):
        nas.check_import("seed.zip", models.CountsItsCalls(), x)
    cand = nas.from_flax(models.CountsItsCalls(), x)
    with pytest.raises(ValueError, match="^nas.check_import: example_input must be an array"):
        nas.check_import(cand, models.CountsItsCalls(), [1.0])


def test_the_cli_import_refuses_a_graph_that_disagrees_in_one_line(tmp_path):
    out = tmp_path / "seed.zip"
    result = run_cli("import", "--flax=tests.interop.models:CountsItsCalls",
                     "--input_shape=8,8,3", f"--out={out}")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "nas-search: error: nas.check_import: CountsItsCalls: the imported graph does not "
        "reproduce the module's output"), result.stderr[-2000:]
    assert not out.exists()
