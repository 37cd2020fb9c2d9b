"""`nas-search export` end to end: the file outlives its study (same logits from a new
process once the workdir is deleted), the README's example runs on it, and `nas-train
--graph` prints and trains with the candidate's own settings."""

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import nas
from nas.graph import Model
from nas.graph.serialize import load
from nas.search.execution.driver import Driver
from nas.train.checkpoint import load_variables
from tests.search.conftest import ROOT, TINY_IMAGE_SIZE, tiny_search_config

TRAIN_CONFIG = os.path.join(ROOT, "configs", "digits_cnn.py")  # lr 2e-3, 5 epochs
LR = 7e-4  # the study's, unlike the config file's
SEED_EPOCHS = 0.25


def _run(*args, cwd):
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A one-candidate study exported by the CLI, with the logits of the study's checkpoint
    on a batch saved beside it; then the study's workdir is deleted."""
    root = tmp_path_factory.mktemp("export")
    config = tiny_search_config(max_candidates=1, seed_epochs=SEED_EPOCHS)
    config.train.lr = LR
    workdir = root / "study"
    (seed,) = Driver(config, str(workdir)).run(progress=False).candidates()
    assert seed.status == "done"
    graph, constants = load(seed.graph_json)
    size = TINY_IMAGE_SIZE
    batch = np.random.default_rng(0).normal(size=(4, size, size, 3)).astype(np.float32)
    logits = Model(graph, constants).apply(load_variables(seed.checkpoint_path), batch)
    np.savez(root / "reference.npz", batch=batch, logits=np.asarray(logits))
    proc = _run(
        "-m",
        "nas.search.cli",
        "export",
        f"--workdir={workdir}",
        f"--id={seed.id}",
        "--out=candidate.zip",
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"wrote {root / 'candidate.zip'}: candidate {seed.id} (graph, "
                               "trained weights, training settings, metrics)")
    assert lines[1:3] == ["  import nas",
                          f"  candidate = nas.load_candidate('{root / 'candidate.zip'}')"]
    shutil.rmtree(workdir)
    return root, seed


def test_the_export_holds_settings_and_metrics(exported):
    root, seed = exported
    cand = nas.load_candidate(root / "candidate.zip")
    # the study's metrics, and its per-example results (a seed has no "vs_seed")
    assert {k: v for k, v in cand.metrics.items()
            if k not in ("val_correct", "test_correct")} == seed.metrics
    assert cand.correctness().size == seed.extra_metrics["val_examples"]
    assert cand.info["id"] == seed.id
    assert cand.train_config["lr"] == LR
    assert cand.train_config["total_epochs"] == SEED_EPOCHS  # the seed's own budget
    assert cand.input_shape == (TINY_IMAGE_SIZE, TINY_IMAGE_SIZE, 3)


def _readme_example() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## The exported candidate") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_gives_the_study_logits_in_a_new_process(exported):
    root, _ = exported
    assert not (root / "study").exists()
    check = (
        "\nassert logits.shape == (8, 10), logits.shape\n"
        "ref = np.load('reference.npz')\n"
        "np.testing.assert_allclose(cand(ref['batch']), ref['logits'], rtol=1e-5, "
        "atol=1e-5)\nprint('same logits')\n"
    )
    proc = _run("-c", _readme_example() + check, cwd=root)
    assert proc.returncode == 0 and "same logits" in proc.stdout, proc.stderr[-3000:]


def test_nas_train_prints_and_uses_the_candidate_settings(exported):
    root, _ = exported
    workdir = root / "more"
    proc = _run(
        "-m",
        "nas.train.cli",
        f"--config={TRAIN_CONFIG}",
        "--graph=candidate.zip",
        f"--workdir={workdir}",
        "--config.seed=3",
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "starting from the exported candidate's trained weights" in out
    assert (
        "training settings (the candidate's own, from candidate.zip; --config gives only "
        "its --config.F=V overrides):"
    ) in out
    assert re.search(r"^  lr +0\.0007$", out, re.M), out
    assert re.search(r"^  total_epochs +0\.25$", out, re.M), out
    assert re.search(r"^  seed +3  \(command line\)$", out, re.M), out
    # trained and evaluated as in the search: the validation split it was chosen on, then
    # the test split; each with its interval and size
    assert re.search(r"^validation accuracy +\d+\.\d\d % \(95 % interval [0-9.]+-[0-9.]+ %, "
                     r"n=\d+; split 'holdout': 0\.1 of 'train', never trained on\)$", out,
                     re.M), out
    assert re.search(r"^test accuracy +\d+\.\d\d % \(95 % interval [0-9.]+-[0-9.]+ %, n=360; "
                     r"split 'test'\)$", out, re.M), out
    assert re.search(r"\d+/\d+ \[.*(step/s|s/step)", proc.stderr), proc.stderr[-2000:]  # bar
    used = json.loads((workdir / "config.json").read_text())
    assert (used["lr"], used["total_epochs"], used["seed"]) == (LR, SEED_EPOCHS, 3)


def test_nas_train_needs_a_config_for_a_file_without_settings(tmp_path):
    from nas.graph.serialize import graph_to_dict
    from nas.zoo import cnn

    graph, constants, _ = cnn.CifarNet()
    old = tmp_path / "old.json"  # a version 1 export without weights: no settings either
    old.write_text(
        json.dumps(
            {"format": "nas-candidate", "version": 1, "graph": graph_to_dict(graph, constants)}
        )
    )
    proc = _run("-m", "nas.train.cli", f"--graph={old}", f"--workdir={tmp_path}/w", cwd=tmp_path)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        "nas-train: error: --config is required (unless --graph is "
        "a candidate exported with its training settings)"
    )
    assert not (tmp_path / "w").exists()
