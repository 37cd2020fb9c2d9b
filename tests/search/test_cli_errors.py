"""Every class of bad input to the CLIs: one line on stderr, a non-zero exit, no traceback,
no new or changed files."""

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.search.conftest import ROOT, SEARCH_CONFIG, probe_cli

TRAIN_CONFIG = os.path.join(ROOT, "configs", "digits_cnn.py")


def _run(module, *args, cwd):
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


def _snapshot(root):
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            out[path] = os.stat(path).st_mtime_ns
        out[folder] = None
    return out


def _assert_one_line(proc, prog, *needles):
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


def _fill(folder):
    (folder / "afile").write_text("x")
    (folder / "noget.py").write_text("x = 1\n")
    (folder / "dict.py").write_text("def get_config():\n    return {'lr': 1.0}\n")
    (folder / "raises.py").write_text("def get_config(arg=None):\n"
                                      "    raise TypeError('no such preset')\n")
    return folder


SEARCH_CASES = [
    (["--workdir={t}/afile"], ["afile", "not a directory"]),
    (["--workdir={t}/afile/sub"], ["afile", "not a directory"]),
    (["--workdir={t}/new", "--config.search.mutation.mutator=magic"],
     ["search.mutation.mutator"]),
    (["--workdir={t}/new", "--config.search.seed_epochs=-1"], ["search.seed_epochs"]),
    (["--workdir={t}/new", "--config.train.total_epochs=-1"], ["train.total_epochs"]),
    (["--workdir={t}/new", "--config.search.time_limit_s=-1"], ["search.time_limit_s"]),
    (["--workdir={t}/new", "--config.train.input.batch_size=0"], ["train.input.batch_size"]),
    (["--workdir={t}/new", "--config.train.optax_name=adamz"], ["train.optax_name"]),
    (["--workdir={t}/new", "--config.search.max_candidatez=3"],
     ["'search.max_candidatez' (did you mean 'search.max_candidates'?)"]),
    (["--workdir={t}/new", "--config={t}/missing.py"], ["missing.py"]),
    (["report", "--workdir={t}/new"], ["study.db", "no study"]),
    (["export", "--workdir={t}/new", "--id=1", "--out={t}/x.json"], ["no study"]),
    (["frobnicate", "--workdir={t}/new"], ["frobnicate"]),
    # found only once the study existed: checked before the workdir is touched
    (["--workdir={t}/new", "--config.train.model_name=bogus"], ["train.model_name", "bogus"]),
    (["--workdir={t}/new", "--seed_graph={t}/nope.json"], ["search.seed_graph", "nope.json"]),
    (["--workdir={t}/new", "--config.train.optax_name=adam"],
     ["train.optax_name", "learning_rate"]),
    (["--workdir={t}/new", "--config.search.seed=99999999999999999999"], ["search.seed"]),
    (["--workdir={t}/new", "--config.train.num_classes=5"], ["train.num_classes", "10"]),
    (["--workdir={t}/new", "--config={t}/noget.py"], ["noget.py", "get_config()"]),
    (["--workdir={t}/new", "--config={t}/raises.py:x"],
     ["--config: ", "raises.py: TypeError: no such preset"]),
    # a search that would select on its test split
    (["--workdir={t}/new", "--config.search.validation_fraction=0.0"],
     ["search.validation_fraction", "select on the test split 'test'"]),
    (["--workdir={t}/new", "--config.search.validation_split=test"],
     ["search.validation_split", "test split"]),
]


def _study_with_one_candidate(folder, damaged=False):
    """A study in folder/s with one candidate; `damaged`: its stored properties are not
    JSON."""
    import sqlite3

    from nas.search.store.study import Study

    study = Study.create(folder / "s", {"search": {}})
    cid = study.add(json.dumps({"format": "nas.graph"}))
    study.close()
    if damaged:
        conn = sqlite3.connect(folder / "s" / "study.db")
        conn.execute("UPDATE candidates SET properties_json='{not json' WHERE id=?", (cid,))
        conn.commit()
        conn.close()
    return cid


@pytest.fixture(scope="module")
def search_mistakes(tmp_path_factory):
    """Every case of SEARCH_CASES, and the export and report cases of the tests below, run
    by `nas-search`'s main, each in a fork of one process that has imported it
    (`_cli_probe.py`) and in a place of its own: {case index or name: (the exit and
    stderr, the place's files before, after, SimpleNamespace(place, cid: the id of the
    study's one candidate))}."""
    keys, places, cases, cids = [], [], [], {}
    for i, (args, _) in enumerate(SEARCH_CASES):
        place = _fill(tmp_path_factory.mktemp(f"case{i}"))
        args = [a.format(t=place) for a in args]
        if not any(a.startswith("--config=") for a in args) and args[0].startswith("--"):
            args.insert(0, f"--config={SEARCH_CONFIG}")
        keys.append(i)
        places.append(place)
        cases.append({"argv": args, "cwd": str(place)})
    for key, damaged, out in (("under_a_file", False, "afile/x.json"),
                              ("damaged_json", True, "x.json"),
                              ("out_is_a_directory", False, "out"),
                              ("no_such_id", False, "x.json")):
        place = tmp_path_factory.mktemp(key)
        cid = cids[key] = _study_with_one_candidate(place, damaged)
        (place / "afile").write_text("x")
        (place / "out").mkdir()
        keys.append(key)
        places.append(place)
        cases.append({"argv": ["export", f"--workdir={place}/s",
                               f"--id={99 if key == 'no_such_id' else cid}",
                               f"--out={place}/{out}"], "cwd": str(place)})
    place = tmp_path_factory.mktemp("empty_db")
    (place / "study.db").write_bytes(b"")
    keys.append("empty_db")
    places.append(place)
    cases.append({"argv": ["report", f"--workdir={place}"], "cwd": str(place)})
    before = [_snapshot(place) for place in places]
    results = probe_cli(cases)
    return {key: (results[i], before[i], _snapshot(places[i]),
                  SimpleNamespace(place=places[i], cid=cids.get(key)))
            for i, key in enumerate(keys)}


@pytest.mark.parametrize("case", range(len(SEARCH_CASES)))
def test_nas_search_bad_input_is_one_line(search_mistakes, case):
    proc, before, after, _ = search_mistakes[case]
    _assert_one_line(proc, "nas-search", *SEARCH_CASES[case][1])
    assert after == before  # nothing created or changed


def test_export_under_a_file_and_damaged_study_json(search_mistakes):
    proc, before, after, _ = search_mistakes["under_a_file"]
    _assert_one_line(proc, "nas-search", "afile")
    assert after == before
    proc, before, after, made = search_mistakes["damaged_json"]
    _assert_one_line(proc, "nas-search", "study.db", f"candidate {made.cid}", "properties")
    assert after == before


def test_help_lists_subcommands_and_flags(tmp_path):
    for module, words in (("nas.search.cli", ["worker", "report", "export", "--workdir",
                                              "--config", "--candidate"]),
                          ("nas.train.cli", ["--config", "--workdir", "--graph"])):
        proc = _run(module, "--help", cwd=tmp_path)
        assert proc.returncode == 0
        for word in words:
            assert word in proc.stdout, (module, proc.stdout)


NEST = "[" * 100_000 + "]" * 100_000
BAD_GRAPHS = {
    "nested": (NEST, ["nested"]),
    "negative-features": (
        json.dumps({"format": "nas.graph", "version": 1, "input_names": ["input"],
                    "output_names": ["d"], "constants": {}, "ops": [
                        {"name": "d", "type": "DENSE", "input_names": ["input"],
                         "input_kwargs": {}, "op_kwargs": {"features": -3},
                         "num_outputs": 1}]}),
        ["'d'", "features"]),
    "empty-initializer": (
        json.dumps({"format": "nas.graph", "version": 1, "input_names": ["input"],
                    "output_names": ["d"], "constants": {}, "ops": [
                        {"name": "d", "type": "DENSE", "input_names": ["input"],
                         "input_kwargs": {}, "op_kwargs": {"features": 3, "kernel_init": {}},
                         "num_outputs": 1}]}),
        ["'d'", "kernel_init"]),
}
TRAIN_CASES = [
    (["--config.optax_name=adam"], ["'optax_name'", "learning_rate"]),
    (["--config.optax_name=softmax_cross_entropy"], ["'optax_name'", "optax transform"]),
    (["--config.wd_pattern=("], ["'wd_pattern'", "regex"]),
    (["--config.num_classes=5"], ["config field 'num_classes' is 5", "'digits' has 10"]),
    (["--config={t}/dict.py"], ["--config", "ConfigDict", "dict"]),
    (["--config={t}/noget.py"], ["noget.py", "get_config()"]),
    (["--config={t}/raises.py"], ["--config: ", "raises.py: TypeError: no such preset"]),
    (["--workdir={t}/afile"], ["--workdir", "afile", "not a directory"]),
    (["--graph={t}/cnn12.json"], ["--graph", "12 logits", "'digits' has 10 classes"]),
    (["--graph={t}/gone.json"], ["--graph", "gone.json", "'checkpoint_path'",
                                 "no saved variables"]),
    (["--graph={t}/foreign.zip"], ["--graph", "foreign.zip", "without candidate.json"]),
    (["--graph={t}/settings.zip"], ["--graph", "settings.zip", "field 'train_config'",
                                    "'lr'"]),
]
LATE_CASES = [  # found by building the model or the optimizer: refused before any output
    (["--config.model_name=nope"], ["config field 'model_name'", "'nope'"]),
    (["--config.schedule.warmup_steps=-5"], ["config field 'schedule'", "warmup must be >= 0",
                                             "total_epochs 5 x 22.5 steps per epoch"]),
    (["--config={t}/listed.py"], ["config field 'schedule[0]'", "cooldown_steps or "
                                  "cooldown_epochs, not both"]),
]


def _train_place(place):
    """`_fill`, and the graph files, archives and config of TRAIN_CASES and LATE_CASES."""
    import zipfile

    from nas.graph.serialize import graph_to_dict, graph_to_json
    from nas.io import write_candidate
    from nas.zoo import cnn

    _fill(place)
    graph, constants, _ = cnn.CifarNet()
    (place / "cnn.json").write_text(graph_to_json(graph, constants))
    (place / "cnn12.json").write_text(graph_to_json(*cnn.CifarNet(num_classes=12)[:2]))
    exported = {"format": "nas-candidate", "graph": json.loads(graph_to_json(graph, constants)),
                "checkpoint_path": str(place / "deleted_checkpoint")}
    (place / "gone.json").write_text(json.dumps(exported))
    with zipfile.ZipFile(place / "foreign.zip", "w") as archive:
        archive.writestr("notes.txt", "not a candidate")
    write_candidate(place / "settings.zip", graph_to_dict(graph, constants), None,
                    train_config={"lr": "fast"})
    (place / "listed.py").write_text(
        f"import runpy\n\n\ndef get_config(arg=None):\n"
        f"    c = runpy.run_path({TRAIN_CONFIG!r})['get_config']()\n"
        f"    with c.ignore_type():\n"
        f"        c.schedule = [('^conv', {{'cooldown_steps': 5, 'cooldown_epochs': 1}}), "
        f"('.*', None)]\n"
        f"    return c\n")
    return place


def _deleted_checkpoint_place(place):
    """An export whose checkpoint's arrays were deleted, as place/exp.json."""
    import shutil

    import numpy as np

    from nas.graph.serialize import graph_to_dict
    from nas.train.checkpoint import save_variables
    from nas.zoo import cnn

    path = save_variables(str(place / "ck"), {"params": {"d": {"k": np.ones((3, 3))}}})
    for folder in list((place / "ck").rglob("d")):
        shutil.rmtree(folder)
    graph, constants, _ = cnn.CifarNet()
    (place / "exp.json").write_text(json.dumps({
        "format": "nas-candidate", "checkpoint_path": path,
        "graph": graph_to_dict(graph, constants)}))
    return place


@pytest.fixture(scope="module")
def train_mistakes(tmp_path_factory):
    """Every `nas-train` case of the tests below, run by its main, each in a fork of one
    process that has imported it (`probe_cli`; a subprocess per case would import jax for
    each) and in a place of its own: {(kind, case): (the run, the place's files before,
    after)}."""
    keys, places, cases = [], [], []

    def case(key, place, *args):
        args = [a.format(t=place) for a in args]
        if not any(a.startswith("--config=") for a in args):
            args.insert(0, f"--config={TRAIN_CONFIG}")
        if not any(a.startswith("--workdir=") for a in args):
            args.append(f"--workdir={place}/w")
        keys.append(key)
        places.append(place)
        cases.append({"argv": args, "cwd": str(place)})

    for name, (content, _) in BAD_GRAPHS.items():
        place = tmp_path_factory.mktemp(name)
        (place / "g.json").write_text(content)
        case(("graph", name), place, "--graph={t}/g.json")
    place = _deleted_checkpoint_place(tmp_path_factory.mktemp("deleted"))
    case(("deleted", 0), place, "--graph={t}/exp.json")
    for kind, table in (("train", TRAIN_CASES), ("late", LATE_CASES)):
        for i, (args, _) in enumerate(table):
            case((kind, i), _train_place(tmp_path_factory.mktemp(f"{kind}{i}")), *args)
    before = [_snapshot(place) for place in places]
    results = probe_cli(cases, prog="nas-train")
    return {key: (results[i], before[i], _snapshot(places[i])) for i, key in enumerate(keys)}


@pytest.mark.parametrize("name", BAD_GRAPHS)
def test_nas_train_bad_graph_file_is_one_line(train_mistakes, name):
    proc, before, after = train_mistakes["graph", name]
    _assert_one_line(proc, "nas-train", *BAD_GRAPHS[name][1])
    assert after == before


def test_export_whose_checkpoint_arrays_were_deleted_is_one_line(train_mistakes):
    proc, before, after = train_mistakes["deleted", 0]
    _assert_one_line(proc, "nas-train", "ck", "cannot be read")
    assert after == before


@pytest.mark.parametrize("case", range(len(TRAIN_CASES)))
def test_nas_train_values_that_pass_the_schema_are_one_line(train_mistakes, case):
    proc, before, after = train_mistakes["train", case]
    _assert_one_line(proc, "nas-train", *TRAIN_CASES[case][1])
    assert after == before


@pytest.mark.parametrize("case", range(len(LATE_CASES)))
def test_nas_train_config_mistakes_come_before_anything_is_printed(train_mistakes, case):
    proc, before, after = train_mistakes["late", case]
    _assert_one_line(proc, "nas-train", *LATE_CASES[case][1])
    assert proc.stdout == ""
    assert after == before


def test_export_errors_name_the_flags(search_mistakes):
    proc, before, after, made = search_mistakes["out_is_a_directory"]
    _assert_one_line(proc, "nas-search", f"--out: {made.place}/out: Is a directory")
    assert ".tmp" not in proc.stderr
    assert after == before
    proc, before, after, _ = search_mistakes["no_such_id"]
    _assert_one_line(proc, "nas-search", "--id=99: no candidate 99")
    assert after == before


def test_empty_study_db_is_no_study(search_mistakes):
    proc, _, _, _ = search_mistakes["empty_db"]
    _assert_one_line(proc, "nas-search", "study.db", "no study")
    assert "Study.create" not in proc.stderr
