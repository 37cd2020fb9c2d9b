"""Damage on disk is named in one line: a stored graph that no longer parses (the candidate
and the field), a truncated export (not a candidate archive), a study file that is not a
study (a worker says so at once); a worker with no study yet says what it waits for."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from nas import zoo
from nas.graph.serialize import graph_to_json
from nas.io.candidate import write_candidate
from nas.search.store.study import Study
from tests.search.conftest import ROOT


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}


def nas_search(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nas.search.cli", *args], capture_output=True,
                          text=True, env=_env(), timeout=timeout)


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stdout + proc.stderr
    return lines[0]


def test_a_damaged_stored_graph_names_the_candidate_and_the_field(tmp_path):
    graph, constants, _ = zoo.cnn.CifarNet()
    study = Study.open(tmp_path, config={"search": {}})
    cid = study.add(graph_to_json(graph, constants), generation=0)
    study.close()
    with sqlite3.connect(tmp_path / "study.db") as db:  # damaged on disk
        db.execute("UPDATE candidates SET graph_json = '{broken' WHERE id = ?", (cid,))
    line = one_line(nas_search("export", f"--workdir={tmp_path}", f"--id={cid}",
                               f"--out={tmp_path / 'c.zip'}"))
    assert line.startswith(f"nas-search: error: candidate {cid}: field 'graph_json' holds "
                           f"damaged JSON ("), line
    assert not (tmp_path / "c.zip").exists()


def test_a_worker_on_a_file_that_is_not_a_study_says_so_at_once(tmp_path):
    (tmp_path / "study.db").write_bytes(b"these bytes are not a SQLite database\n" * 200)
    # --wait_s=600: "at once" is the subprocess timeout of 300 s, half of it
    line = one_line(nas_search("worker", f"--workdir={tmp_path}", "--wait_s=600"))
    assert line.startswith(f"nas-search: error: {tmp_path / 'study.db'}: not a readable "
                           f"SQLite database"), line


def test_a_worker_without_a_study_says_what_it_waits_for(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "nas.search.cli", "worker",
                             f"--workdir={tmp_path}", "--wait_s=30"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_env())
    try:
        first = proc.stdout.readline().strip()  # printed before it starts waiting
    finally:
        proc.kill()
        proc.wait()
    assert first == (f"nas-search worker: waiting up to 30 s for a study to appear in "
                     f"{tmp_path / 'study.db'} (start the driver with --workdir={tmp_path})")


@pytest.fixture
def truncated_export(tmp_path):
    graph, constants, _ = zoo.cnn.CifarNet()
    from nas.graph.serialize import graph_to_dict

    whole = write_candidate(tmp_path / "whole.zip", graph_to_dict(graph, constants), None)
    cut = tmp_path / "cut.zip"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    return str(cut)


def test_a_truncated_export_is_not_a_candidate_archive_to_every_reader(truncated_export):
    from nas.io import load_candidate
    from nas.search.execution.seeds import read_seed_graph
    from nas.train.cli import UserError, read_graph_file

    expected = f"{truncated_export}: not a candidate archive (a truncated or damaged zip"
    for read, prefix in ((load_candidate, ""), (read_graph_file, "--graph: "),
                         (read_seed_graph, "config field 'search.seed_graph': ")):
        with pytest.raises((ValueError, UserError)) as caught:
            read(truncated_export)
        text = str(caught.value)
        assert text.startswith(prefix + expected) and "\n" not in text, text
