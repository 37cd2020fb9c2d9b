"""A first try with data of one's own: a small class folder with the bundled digits' config
(`num_classes` from the folder, a warmup longer than the run shortened with one line), its
checks before anything is converted or written, and `nas-train --graph=CANDIDATE
--config.F=V` without a config file."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys

import numpy as np
import pytest
from helpers import tiny_config, tiny_graph
from PIL import Image

from nas.train import cli, preflight, userdata

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN_CONFIG = os.path.join(REPO, "configs", "digits_cnn.py")
CLASSES = ("circle", "square", "stripes")


def three_class_folder(root: str, train: int = 40, test: int = 10) -> str:
    """root/{train,test}/<class>/<i>.png: 24x24 colour PNGs, a class a pattern."""
    rng = np.random.default_rng(0)
    for split, count in (("train", train), ("test", test)):
        for label, name in enumerate(CLASSES):
            os.makedirs(os.path.join(root, split, name), exist_ok=True)
            for i in range(count):
                image = rng.integers(0, 60, (24, 24, 3)).astype(np.uint8)
                if label == 0:
                    image[6:18, 6:18, 0] = 220
                elif label == 1:
                    image[:, ::4, 1] = 220
                else:
                    image[::4, :, 2] = 220
                Image.fromarray(image).save(os.path.join(root, split, name, f"{i}.png"))
    return root


def _nas_train(*args: str, cwd: str, data_dir: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "NAS_DATA_DIR": data_dir}
    return subprocess.run([sys.executable, "-m", "nas.train.cli", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=900)


def _one_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("nas-train: error: "), proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert proc.stdout == ""
    return lines[0]


def _digits_config(name: str, data_dir: str):
    config = runpy.run_path(TRAIN_CONFIG)["get_config"]()
    config.input.data.name = name
    config.input.data_dir = data_dir
    return config


# ----------------------------------------------------------------------------- a small folder


def test_a_3_class_folder_with_the_digits_config_checks_without_converting(tmp_path):
    """The parts of the README's folder command: 3 classes from the folder, the digits'
    20 warmup steps shortened to half of the 9-step run, and nothing converted yet."""
    root = three_class_folder(str(tmp_path / "imgs"))
    data_dir = str(tmp_path / "tfds")
    train = cli.check_config(_digits_config(f"folder:{root}", data_dir))
    assert train.num_classes == 3
    graph, constants = preflight.check(train)
    assert constants["num_classes"] == 3
    assert preflight.training_steps(train) == (9, 120 / 64)
    assert preflight.schedule_notes(train) == [
        "config field 'schedule': warmup (20) + cooldown (0) steps exceed the run's 9 steps: "
        "shortened to warmup 4 + cooldown 0, half the run (total_epochs 5 x 1.9 steps per "
        "epoch at batch size 64)"]
    assert not os.path.exists(data_dir)  # checked from the files; converted only to train


def test_num_classes_of_a_dataset_spec(tmp_path):
    from userdata_helpers import small_arrays, write_npz

    from nas.train import data

    root = three_class_folder(str(tmp_path / "imgs"), train=2, test=1)
    arrays = small_arrays(classes=4)
    npz = write_npz(str(tmp_path / "d.npz"), arrays)
    assert data.dataset_classes(f"folder:{root}") == 3
    assert data.dataset_classes(f"npz:{npz}") == 4
    assert data.dataset_classes("digits") == 10
    config = _digits_config(f"npz:{npz}", str(tmp_path / "tfds"))
    config.num_classes = 6  # an npz's labels only bound it: a class may have no example
    assert data.check_num_classes(config) == 6
    config.num_classes = 3
    with pytest.raises(ValueError) as e:
        data.check_num_classes(config)
    assert str(e.value) == (f"{npz}: labels up to 3, outside config field 'num_classes' = 3 "
                            f"(labels must be 0..2; 0 takes the number from the data)")
    with pytest.raises(ValueError, match=r"'folder:' names no path"):
        data.dataset_classes("folder:")
    assert not os.path.exists(str(tmp_path / "tfds"))


def test_a_graph_whose_outputs_disagree_with_the_data_is_one_line(tmp_path):
    root = three_class_folder(str(tmp_path / "imgs"), train=2, test=1)
    config = _digits_config(f"folder:{root}", str(tmp_path / "tfds"))
    config.input.batch_size = 4
    train = cli.check_config(config)
    graph, constants = tiny_graph()  # 10 logits
    with pytest.raises(ValueError) as e:
        preflight.check_outputs(graph, constants, train, "--graph: g.json")
    assert str(e.value) == (f"--graph: g.json outputs 10 logits, but dataset 'folder:{root}' "
                            f"has 3 classes (config field 'num_classes')")
    preflight.check_outputs(graph, {"num_classes": 3}, train, "--graph: g.json")


FOLDER_MISTAKES = [
    (["--config.schedule.warmup_steps=-1"], ["config field 'schedule'",
                                             "warmup must be >= 0"]),
    (["--config.num_classes=10"], ["config field 'num_classes' is 10", "has 3 class folders"]),
    (["--config.input.batch_size=200"], ["'input.batch_size' must be <= the 120 examples"]),
]
OVERRIDE_MISTAKES = [
    (["--config.total_epochs=-1"], ["config field 'total_epochs'"]),
    (["--config.total_epochz=1"], ["unknown config field 'total_epochz'"]),
    (["--config.total_epochs=abc"], ["total_epochs"]),
]


@pytest.fixture(scope="module")
def mistakes(tmp_path_factory, data_dir):
    """`nas-train` on each mistake of this module, each in a place of its own and in a fork
    of one process that imported it (`probe_cli`: a subprocess per case would import jax
    for each; test_a_mistake_on_the_digits_builds_nothing runs the real program):
    {("folder" | "override", i) or "plain" or "missing": (the run, its place)}."""
    from nas.graph.serialize import graph_to_json
    from tests.search.conftest import probe_cli

    keys, places, cases = [], [], []

    def case(key, *args, data=data_dir):  # data=None: a data dir of the case's own
        place = tmp_path_factory.mktemp("case")
        keys.append(key)
        places.append(place)
        cases.append({"argv": [a.format(t=place) for a in args], "cwd": str(place),
                      "env": {"NAS_DATA_DIR": data or str(place / "tfds")}})
        return place

    for i, (args, _) in enumerate(FOLDER_MISTAKES):
        place = case(("folder", i), f"--config={TRAIN_CONFIG}",
                     "--config.input.data.name=folder:{t}/imgs", *args, "--workdir={t}/run",
                     data=None)
        three_class_folder(str(place / "imgs"), train=40, test=2)
    candidate = _exported(tmp_path_factory.mktemp("exported"), data_dir)
    for i, (args, _) in enumerate(OVERRIDE_MISTAKES):
        case(("override", i), f"--graph={candidate}", *args, "--workdir={t}/run")
    graph, constants = tiny_graph()
    place = case("plain", "--graph={t}/g.json", "--config.total_epochs=1")
    (place / "g.json").write_text(graph_to_json(graph, constants))
    case("missing", "--graph={t}/missing.zip", "--config.total_epochs=1")
    return dict(zip(keys, zip(probe_cli(cases, prog="nas-train"), places, strict=True),
                    strict=True))


@pytest.mark.parametrize("case", range(len(FOLDER_MISTAKES)))
def test_a_mistake_comes_before_the_folder_is_converted(mistakes, case):
    """One line, nothing on stdout (no `converting ... (once)`), nothing in the data dir."""
    proc, place = mistakes["folder", case]
    _one_line(proc, *FOLDER_MISTAKES[case][1])
    assert not os.path.exists(place / "tfds") and not os.path.exists(place / "run")


def test_a_mistake_on_the_digits_builds_nothing(tmp_path):
    """The bundled digits are counted from scikit-learn's arrays: a mistake on a fresh
    machine prints no tfds build line and leaves no data dir."""
    fresh = str(tmp_path / "fresh")
    proc = _nas_train(f"--config={TRAIN_CONFIG}", "--config.num_classes=5",
                      f"--workdir={tmp_path}/run", cwd=str(tmp_path), data_dir=fresh)
    _one_line(proc, "config field 'num_classes' is 5, but dataset 'digits' has 10 classes")
    assert not os.path.exists(fresh) and not os.path.exists(tmp_path / "run")


def test_a_bad_image_is_found_before_converting(tmp_path):
    from nas.train import data

    root = three_class_folder(str(tmp_path / "imgs"), train=2, test=2)
    bad = os.path.join(root, "test", "square", "0.png")
    with open(bad, "wb") as f:
        f.write(b"not a png")
    config = _digits_config(f"folder:{root}", str(tmp_path / "tfds"))
    config.input.batch_size = 2
    with pytest.raises(ValueError, match=rf"^{bad}: unreadable image"):
        data.check_dataset(config)
    assert not os.path.exists(str(tmp_path / "tfds"))
    os.unlink(bad)
    data.check_dataset(config)
    assert userdata.converted_dir(config.input.data.name, str(tmp_path / "tfds"))


def test_training_shortens_the_schedule_as_the_checks_said(data_dir):
    """`train_and_eval`, which every search worker runs, builds the shortened schedule
    itself: a warmup of 1000 steps in a 2-step run trains instead of failing."""
    from nas.train import TrainOptions, optim, train_and_eval

    config = tiny_config(data_dir, total_epochs=0.1, precise_bn_batches=0,
                         **{"schedule.warmup_steps": 1000, "input.batch_size": 64})
    steps, _ = preflight.training_steps(config)
    assert steps == 2 and optim.fitted_ramps(config.schedule, steps) == (1, 0)
    graph, constants = tiny_graph()
    metrics, _, _ = train_and_eval(config, options=TrainOptions(graph=graph, constants=constants))
    assert metrics.steps == 2 and np.isfinite(metrics.loss)


def test_a_search_says_which_schedules_it_shortens():
    """The driver prints one line for the seed's and one for the children's training."""
    from nas.search.execution.driver import schedule_lines
    from nas.search.strategy.settings import read_settings

    config = runpy.run_path(os.path.join(REPO, "configs", "digits_cnn_search.py"))[
        "get_config"]()
    search = read_settings(config)
    assert schedule_lines(config.train, search) == []  # 20 warmup steps fit
    config.train.schedule.warmup_steps = 150  # children: 2 epochs, at least 100 steps
    assert schedule_lines(config.train, search) == [
        "the seed: config field 'train.schedule': warmup (150) + cooldown (0) steps exceed "
        "the run's 60 steps: shortened to warmup 30 + cooldown 0, half the run (total_epochs "
        "3 x 20.2 steps per epoch at batch size 64)",
        "each child: config field 'train.schedule': warmup (150) + cooldown (0) steps exceed "
        "the run's 100 steps: shortened to warmup 50 + cooldown 0, half the run (total_epochs "
        "2 x 20.2 steps per epoch at batch size 64, raised to min_steps 100)"]


def test_a_search_takes_the_folder_s_classes_and_checks_its_seed_graph(tmp_path):
    from nas.graph.serialize import graph_to_json
    from nas.search.execution.seeds import check_seed
    from nas.search.strategy.settings import read_settings

    root = three_class_folder(str(tmp_path / "imgs"), train=20, test=2)
    config = runpy.run_path(os.path.join(REPO, "configs", "digits_cnn_search.py"))[
        "get_config"]()
    config.train.input.data.name = f"folder:{root}"
    config.train.input.data_dir = str(tmp_path / "tfds")
    config.train.input.batch_size = 16
    graph, constants = tiny_graph()  # 10 logits
    (tmp_path / "seed.json").write_text(graph_to_json(graph, constants))
    config.search.seed_graph = str(tmp_path / "seed.json")
    with pytest.raises(ValueError) as e:
        check_seed(config, read_settings(config))
    assert str(e.value) == (
        f"config field 'search.seed_graph': {tmp_path}/seed.json outputs 10 logits, but "
        f"dataset 'folder:{root}' has 3 classes (config field 'num_classes')")
    assert config.train.num_classes == 3  # the data's, recorded by read_settings
    (tmp_path / "seed.json").write_text(graph_to_json(graph, {"num_classes": 3}))
    check_seed(config, read_settings(config))
    assert not os.path.exists(tmp_path / "tfds")  # checked, not converted


@pytest.mark.slow
def test_the_readme_folder_command_runs_on_3_classes_of_40_pngs(tmp_path):
    """README: `nas-train --config=configs/digits_cnn.py
    --config.input.data.name=folder:$PWD/my_images --workdir=runs/folder` (76 s at load 13)."""
    three_class_folder(str(tmp_path / "my_images"), train=40, test=10)
    proc = _nas_train(f"--config={TRAIN_CONFIG}",
                      f"--config.input.data.name=folder:{tmp_path}/my_images",
                      "--workdir=runs/folder", cwd=str(tmp_path), data_dir=str(tmp_path / "tfds"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert "  num_classes         3" in out
    shortened = next(i for i, ln in enumerate(out) if ln.startswith("config field 'schedule'"))
    converting = next(i for i, ln in enumerate(out) if ln.startswith("converting folder:"))
    assert shortened < converting  # checked and said before anything is written
    assert "shortened to warmup 4 + cooldown 0" in out[shortened]
    assert any(ln.startswith("test accuracy") and "n=30; split 'test'" in ln for ln in out)
    assert any(ln.split() == ["epochs", "/", "steps", "5", "/", "9"] for ln in out)


# ----------------------------------------------------------------------------- --graph overrides


def test_overrides_of_a_candidate_get_its_own_settings_as_their_config():
    argv = ["nas-train", "--graph=c.zip", "--config.total_epochs=1", "--workdir=w"]
    assert cli.with_exported_config(argv) == [
        "nas-train", f"--config={cli.EXPORTED_CONFIG}:{os.path.abspath('c.zip')}", *argv[1:]]
    assert cli.with_exported_config(["nas-train", "--graph", "c.zip", "--config.lr=1"])[1] \
        == f"--config={cli.EXPORTED_CONFIG}:{os.path.abspath('c.zip')}"
    for unchanged in (["nas-train", "--graph=c.zip", "--workdir=w"],  # nothing to override
                      ["nas-train", "--graph=c.zip", f"--config={TRAIN_CONFIG}",
                       "--config.lr=1"],  # a config file named
                      ["nas-train", "--config.lr=1"]):  # no graph: absl's own error
        assert cli.with_exported_config(unchanged) == unchanged


def _exported(folder, data_dir):
    """A tiny graph exported with its training settings (the digits, 3 epochs)."""
    from nas.graph.serialize import graph_to_dict
    from nas.io import write_candidate

    graph, constants = tiny_graph()
    settings = tiny_config(data_dir, total_epochs=3.0).to_dict()
    path = folder / "candidate.zip"
    write_candidate(path, graph_to_dict(graph, constants), None, train_config=settings)
    return path


@pytest.fixture
def exported(tmp_path, data_dir):
    return _exported(tmp_path, data_dir)


@pytest.mark.slow
def test_nas_train_graph_with_overrides_and_no_config_file(tmp_path, data_dir, exported):
    proc = _nas_train(f"--graph={exported}", "--config.total_epochs=0.05",
                      "--config.precise_bn_batches=0", f"--workdir={tmp_path}/run",
                      "--noprogress", cwd=str(tmp_path), data_dir=data_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[0] == f"training settings (the candidate's own, from {exported}):"
    assert "  total_epochs        0.05  (command line)" in out
    assert "  lr                  0.003" in out  # the candidate's own
    assert any(ln.split() == ["epochs", "/", "steps", "1", "/", "1"] for ln in out), out


@pytest.mark.parametrize("case", range(len(OVERRIDE_MISTAKES)))
def test_a_bad_override_of_a_candidate_is_one_line(mistakes, case):
    proc, place = mistakes["override", case]
    _one_line(proc, *OVERRIDE_MISTAKES[case][1])
    assert not os.path.exists(place / "run")


def test_an_override_of_a_graph_without_settings_needs_a_config_file(mistakes):
    proc, place = mistakes["plain"]
    _one_line(proc, f"--graph: {place}/g.json carries no training settings",
              "--config.F=V needs --config=FILE")
    proc, place = mistakes["missing"]
    _one_line(proc, "--graph: cannot read", "missing.zip")
