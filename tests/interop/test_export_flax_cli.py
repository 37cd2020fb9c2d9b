"""`nas-search export --format=flax`: a study candidate (real SQLite study, real orbax
checkpoint) written as model.py + variables.msgpack by the CLI in a subprocess; its
mistakes are one line each and leave nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import serialization

from nas.graph.serialize import graph_to_json
from nas.search.store.study import Study
from nas.train.checkpoint import save_variables
from nas.zoo import cnn
from tests.interop.helpers import random_variables
from tests.search.conftest import ROOT, probe_cli, tiny_search_config


def _run(*args, cwd):
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "nas.search.cli", "export", *args],
                          capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": path}, timeout=300)


def _snapshot(root):
    return sorted((folder, sorted(files)) for folder, _, files in os.walk(root))


def _one_line(proc, *needles):
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("nas-search: error: "), proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A study of the README search's config with one trained-looking CifarNet (its
    variables saved as the worker saves them) and one pending candidate."""
    root = tmp_path_factory.mktemp("cli")
    graph, constants, _ = cnn.CifarNet()
    variables = random_variables(graph, constants, (32, 32, 3))
    config = tiny_search_config()
    config.train.input.image_size = 32  # CifarNet's own size, as its variables
    study = Study.create(root / "s", config)
    done = study.add(graph_to_json(graph, constants))
    assert study.claim(candidate_id=done).id == done
    path = save_variables(str(root / "ckpt"), variables)
    study.tell(done, {"accuracy": 0.5}, checkpoint_path=path)
    other, other_constants, _ = cnn.CifarNet(num_classes=7)
    pending = study.add(graph_to_json(other, other_constants))
    study.close()
    return root, done, pending, variables


def test_export_format_flax_writes_code_and_variables(study):
    root, done, _, variables = study
    proc = _run(f"--workdir={root / 's'}", f"--id={done}", "--format=flax", "--out=code",
                cwd=root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(f"wrote {(root / 'code').resolve()}: candidate {done} as "
                                  "plain Flax code")
    assert sorted(os.listdir(root / "code")) == ["model.py", "variables.msgpack"]
    source = (root / "code" / "model.py").read_text()
    assert "INPUT_SHAPE = (32, 32, 3)" in source and "class Model(nn.Module):" in source
    stored = serialization.msgpack_restore((root / "code" / "variables.msgpack").read_bytes())
    for a, b in zip(jax.tree.leaves(stored), jax.tree.leaves(variables), strict=True):
        assert np.array_equal(a, b)
    # The printed lines that load it run as written, in a fresh Python without nas.
    shown = [ln[2:] for ln in proc.stdout.splitlines()[1:]]
    assert any(ln == "import flax.serialization" for ln in shown), proc.stdout
    script = "\n".join(["import numpy as np", "images = np.ones((2, 32, 32, 3), np.float32)",
                        *shown, "np.save('logits.npy', np.asarray(logits))"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True,
                         text=True, cwd=root, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert np.load(root / "logits.npy").shape == (2, 10)


MISTAKES = [
    (["--format=onnx", "--out=x"], ["--format: unknown format 'onnx'; expected one of zip, "
                                    "flax"]),
    (["--format=flax", "--out=full"], ["--out: ", "full: the directory is not empty"]),
    (["--format=flax", "--id=99", "--out=new"], ["--id=99: no candidate 99"]),
    (["--format=flax", "--id={pending}", "--out=new"], ["candidate {pending} (pending) has no "
                                                        "trained weights"]),
]


@pytest.fixture(scope="module")
def mistakes(study, tmp_path_factory):
    """Each of MISTAKES run by `nas-search export` in a place of its own, each in a fork of
    one process that imported the CLI (`probe_cli`; a subprocess per case would import
    jax for each, and test_export_format_flax_writes_code_and_variables runs the real
    program): [(the run, the place's files before, after)]."""
    root, done, pending, _ = study
    places, cases = [], []
    for i, (args, _) in enumerate(MISTAKES):
        place = tmp_path_factory.mktemp(f"mistake{i}")
        (place / "full").mkdir()
        (place / "full" / "mine.txt").write_text("keep")
        (place / "afile").write_text("x")
        args = [a.format(pending=pending) for a in args]
        if not any(a.startswith("--id=") for a in args):
            args.append(f"--id={done}")
        places.append(place)
        cases.append({"argv": ["export", f"--workdir={root / 's'}", *args], "cwd": str(place)})
    before = [_snapshot(place) for place in places]
    runs = probe_cli(cases)
    return [(run, b, _snapshot(place)) for run, b, place in zip(runs, before, places,
                                                                  strict=True)]


@pytest.mark.parametrize("case", range(len(MISTAKES)))
def test_export_format_flax_mistakes_are_one_line(study, mistakes, case):
    pending = study[2]
    proc, before, after = mistakes[case]
    _one_line(proc, *[n.format(pending=pending) for n in MISTAKES[case][1]])
    assert after == before
