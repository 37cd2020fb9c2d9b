"""`nas-search import`: a Flax model from the command line as a seed file; every mistake is
one line; the file seeds a search with the imported weights."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import serialization

import nas
from nas.interop.cli import import_checked, import_flax
from nas.search.execution.driver import Driver
from nas.train.checkpoint import load_variables
from tests.interop import models
from tests.search.conftest import tiny_search_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAS_SEARCH = os.path.join(os.path.dirname(sys.executable), "nas-search")
FACTORY = "tests.interop.models:LinenResNet"
SMALL = "tests.interop.models:LinenBranches"


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu"}
    return subprocess.run([NAS_SEARCH, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_import_writes_a_seed_with_the_given_weights(tmp_path, monkeypatch):
    """What `nas-search import --flax=... --variables=W.msgpack --out=...` runs (in-process:
    the subprocess path is covered by the slow search tests and the error-line test)."""
    monkeypatch.chdir(ROOT)
    model = models.LinenResNet()
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 16, 16, 3))
    variables = model.init(jax.random.PRNGKey(5), x)
    weights = tmp_path / "weights.msgpack"
    weights.write_bytes(serialization.msgpack_serialize(jax.tree.map(np.asarray, variables)))
    out = tmp_path / "seed.zip"
    assert import_flax(FACTORY, "16,16,3", str(weights), str(out)) == str(out)
    cand = nas.load_candidate(out)
    want = np.asarray(model.apply(variables, x))
    np.testing.assert_allclose(np.asarray(cand(x)), want, rtol=0,
                               atol=1e-4 * float(np.abs(want).max()))


def test_a_cli_mistake_is_one_error_line_and_exit_1(tmp_path):
    result = run_cli("import", "--flax=tests.interop.models:raises", "--input_shape=8,8,3",
                     f"--out={tmp_path / 'x.zip'}")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "nas-search: error: --flax=tests.interop.models:raises: the factory raised "
        "RuntimeError: no weights here"]
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("flax, shape, variables, message", [
    ("tests.interop.models", "16,16,3", None, "expected package.module:factory"),
    ("no_such_package.x:f", "16,16,3", None, "cannot import 'no_such_package.x'"),
    ("tests.interop.models:missing", "16,16,3", None, "has no callable 'missing'"),
    ("tests.interop.models:not_a_module", "16,16,3", None, "returned str, not a flax"),
    (FACTORY, "16,x,3", None, "--input_shape=16,x,3: expected sizes > 0"),
    (FACTORY, "0,16,3", None, "expected sizes > 0"),
    (FACTORY, "16,16,3", "missing.msgpack", "No such file"),
    (FACTORY, "16,16,3", "garbage.msgpack", "not a flax msgpack file"),
    (FACTORY, "16,16,3", "list.msgpack", "expected the module's variables"),
    ("tests.interop.models:nnx_cnn", "32,32,3", "list.msgpack", "an NNX module"),
    (FACTORY, "16,16", None, "calling the module on the example input"),
])
def test_bad_import_inputs_are_one_line(tmp_path, monkeypatch, flax, shape, variables,
                                        message):
    monkeypatch.chdir(ROOT)
    (tmp_path / "garbage.msgpack").write_bytes(b"\xc1\xc1 not msgpack")
    (tmp_path / "list.msgpack").write_bytes(serialization.msgpack_serialize([1, 2]))
    out = tmp_path / "seed.zip"
    with pytest.raises(ValueError, match=message) as excinfo:
        import_flax(flax, shape, variables and str(tmp_path / variables), str(out))
    assert "\n" not in str(excinfo.value)
    assert not out.exists()


def test_an_imported_model_seeds_the_study_with_its_weights(tmp_path):
    model = models.LinenResNet()
    x = models.example()
    variables = model.init(jax.random.PRNGKey(4), x)
    path = nas.save_candidate(nas.from_flax(model, x, variables=variables),
                              tmp_path / "seed.zip")
    driver = Driver(tiny_search_config(seed_graph=str(path)), str(tmp_path / "study"))
    driver.seed_population()
    (seed,) = driver.study.candidates()
    init = load_variables(seed.inheritance["init_path"])
    conv = init["params"]["ResBlock_0/Conv_0"]["kernel"]
    np.testing.assert_array_equal(conv, variables["params"]["ResBlock_0"]["Conv_0"]["kernel"])
    stats = init["batch_stats"]["BatchNorm_0"]["var"]
    np.testing.assert_array_equal(stats, variables["batch_stats"]["BatchNorm_0"]["var"])


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["tests.interop.models:LinenResNet",
                                     "tests.interop.models:nnx_cnn"])
def test_seeded_digits_search_finishes(tmp_path, factory):
    seed = tmp_path / "seed.zip"
    result = run_cli("import", f"--flax={factory}", "--input_shape=32,32,3", f"--out={seed}")
    assert result.returncode == 0, result.stderr
    workdir = tmp_path / "study"
    # The small test ResNet reaches ~0.34 validation accuracy in the seed's 3 epochs, below
    # the config's min_acc 0.5 for a parent: any seed may parent here.
    result = run_cli("--config=configs/digits_cnn_search.py", f"--workdir={workdir}",
                     f"--seed_graph={seed}", "--config.search.max_candidates=4",
                     "--config.search.selection.min_acc=0.0", "--noprogress",
                     "--config.search.finals.k=0", timeout=3000)
    assert result.returncode == 0, result.stderr[-2000:]
    from nas.search.store.study import Study

    study = Study.load(str(workdir))
    children = [c for c in study.candidates() if c.parent_id is not None]
    done = [c for c in children if c.status == "done"]
    assert len(done) >= 2, [(c.id, c.status, c.error) for c in children]
    assert all(c.inheritance for c in done)


@pytest.mark.slow  # a second import of the ResNet, from an orbax checkpoint directory
def test_import_reads_an_orbax_checkpoint(tmp_path, monkeypatch):
    from nas.train.checkpoint import save_variables

    monkeypatch.chdir(ROOT)
    model = models.LinenResNet()
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 16, 16, 3))
    variables = model.init(jax.random.PRNGKey(6), x)
    checkpoint = save_variables(str(tmp_path / "ckpt"), jax.tree.map(np.asarray, variables))
    out = tmp_path / "seed.zip"
    import_flax(FACTORY, "16,16,3", checkpoint, str(out))
    want = np.asarray(model.apply(variables, x))
    np.testing.assert_allclose(np.asarray(nas.load_candidate(out)(x)), want, rtol=0,
                               atol=1e-4 * float(np.abs(want).max()))


@pytest.mark.slow
def test_the_cli_prints_the_path_and_the_checks_largest_difference(tmp_path):
    out = tmp_path / "seed.zip"  # a small model: the CLI's start-up is most of the time
    result = run_cli("import", f"--flax={SMALL}", "--input_shape=8,8,3", f"--out={out}")
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{out}: import checked on a random "
                                                   "batch of 2, largest |output difference| ")
    match = re.search(r"difference\| (\S+) \((\S+) of the largest \|output\| (\S+); "
                      r"tolerance 1e-04\)$", lines[0])
    assert match, lines[0]
    absolute, relative, largest = (float(v) for v in match.groups())
    assert 0.0 <= relative <= 1e-4 and largest > 0.0
    assert absolute == pytest.approx(relative * largest, rel=0.1, abs=1e-12)
    assert nas.load_candidate(out).variables is not None


def test_import_checked_measures_before_it_writes(tmp_path, monkeypatch):
    """`import_checked` returns the measurement of the check run on the seed it wrote; a
    candidate a little off is measured as off by exactly that much."""
    from nas.interop.check import measure_import

    monkeypatch.chdir(ROOT)
    out = tmp_path / "seed.zip"
    imported = import_checked(SMALL, "8,8,3", None, str(out))
    assert imported.path == str(out) and out.exists()
    assert imported.check.relative <= 1e-4 and imported.check.largest_output > 0
    assert imported.line().startswith(f"{out}: import checked")
    model = models.LinenBranches()
    x = jax.random.normal(jax.random.PRNGKey(0), (2, 8, 8, 3))
    cand = nas.load_candidate(out)
    again = measure_import(cand, model, x)
    assert again.largest_output == pytest.approx(imported.check.largest_output, rel=1e-6)
    bias = jax.tree.map(np.array, cand.variables)
    head = next(k for k in reversed(bias["params"]) if "bias" in bias["params"][k])
    size = bias["params"][head]["bias"].size  # off by up to a fifth of the tolerance
    step = 0.2 * 1e-4 * imported.check.largest_output / size
    bias["params"][head]["bias"] = bias["params"][head]["bias"] + step * np.arange(
        1, size + 1, dtype=np.float32)
    off = measure_import(dataclasses.replace(cand, variables=bias), model, x)
    with jax.default_matmul_precision("float32"):  # as the check computes (a GPU: TF32)
        got = np.asarray(dataclasses.replace(cand, variables=bias)(x))
        module = np.asarray(cand(x))
    assert off.largest_difference == pytest.approx(float(np.abs(got - module).max()),
                                                   abs=2 * again.largest_difference
                                                   + 1e-6 * again.largest_output)
    assert off.largest_difference > 10 * max(again.largest_difference, 1e-9)


def test_a_mistake_in_import_checked_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "seed.zip"
    with pytest.raises(ValueError, match="^nas.check_import: CountsItsCalls: the imported "
                                         "graph does not reproduce"):
        import_checked("tests.interop.models:CountsItsCalls", "8,8,3", None, str(out))
    assert not out.exists()
    with pytest.raises(ValueError, match="^import needs --out=FILE.zip$"):
        import_checked(FACTORY, "16,16,3", None, None)
