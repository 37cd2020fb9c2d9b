"""Study: round trip, validation, queries, export, refusing foreign/corrupt/newer files."""

import dataclasses
import json
import math
import sqlite3
import zipfile

import pytest

from nas.search import DuplicateCandidateError, Study, StudyNotFoundError

GRAPH = json.dumps({"graph": {"ops": ["conv", "relu"]}, "constants": {}})


def _done(study, acc, flops, params, parent=None, fp=None):
    cid = study.add(GRAPH, parent_id=parent, fingerprint=fp)
    assert study.claim("w", cid).id == cid
    study.tell(cid, {"accuracy": acc, "flops": flops, "params": params})
    return cid


def test_round_trip(tmp_path):
    config = {"seed": 0, "max_attempts": 3, "sizes": (1, 2)}
    study = Study.create(tmp_path / "run", config)
    assert (tmp_path / "run" / "study.db").is_file()
    root = study.add(GRAPH, fingerprint="aa11", seed=7, state={"rng": [1, 2], "generation": 1})
    child = study.add(
        GRAPH,
        parent_id=root,
        fingerprint="bb22",
        seed=8,
        spec={"ops": ["conv"], "outputs": ["relu:0"]},
        properties={"depth": 2},
        inheritance={"inherited": ["conv/kernel"], "new": ["dense/bias"]},
    )
    cand = study.claim("host:1")
    assert (cand.id, cand.status, cand.worker, cand.attempts) == (root, "running", "host:1", 1)
    metrics = {
        "accuracy": 0.91, "loss": 0.3, "flops": 1.5e6, "params": 12345,
        "im_sec_core_train": 290.0, "im_sec_core_infer": 900.0, "epochs": 2, "note": "ok",
    }  # fmt: skip
    study.tell(root, metrics, checkpoint_path="/ckpt/1")
    study.close()

    again = Study.load(tmp_path / "run")
    assert again.config == {"seed": 0, "max_attempts": 3, "sizes": [1, 2]}
    assert again.get_state("rng") == [1, 2] and again.get_state("missing", 5) == 5
    r, c = again.get(root), again.get(child)
    assert r.status == "done" and r.metrics == {**metrics, "epochs": 2.0, "params": 12345.0}
    assert r.checkpoint_path == "/ckpt/1" and r.seed == 7 and r.fingerprint == "aa11"
    assert r.started_at <= r.finished_at and r.created_at <= r.started_at
    assert c.parent_id == root and c.generation == 1 and c.status == "pending"
    assert c.spec == {"ops": ["conv"], "outputs": ["relu:0"]}
    assert c.properties == {"depth": 2}
    assert c.inheritance["inherited"] == ["conv/kernel"]
    assert c.graph_json == GRAPH and c.graph == json.loads(GRAPH)
    assert again.counts() == {"pending": 1, "running": 0, "done": 1, "failed": 0, "infeasible": 0,
                              "stopped": 0}
    assert [x.id for x in again.candidates()] == [root, child]
    assert [x.id for x in again.candidates(["pending", "running"])] == [child]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.status = "x"


def test_open_create_load_errors(tmp_path):
    with pytest.raises(StudyNotFoundError, match="no study here"):
        Study.load(tmp_path)
    study = Study.open(tmp_path, {"a": 1})
    study.add(GRAPH)
    with pytest.raises(ValueError, match="already exists"):
        Study.create(tmp_path)
    reopened = Study.open(tmp_path, {"a": 2})  # resume: the stored config wins
    assert reopened.config == {"a": 1} and len(reopened.candidates()) == 1
    with pytest.raises(TypeError):
        Study(tmp_path)
    with pytest.raises(ValueError, match="config"):
        Study.create(tmp_path / "x", {"f": object()})


@pytest.mark.parametrize("header", [False, True])
def test_an_interrupted_creation_is_no_study(tmp_path, header):
    """study.db left 0 bytes, or a SQLite header without tables, by a kill inside create."""
    path = tmp_path / "study.db"
    path.write_bytes(b"")
    if header:
        conn = sqlite3.connect(path)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.close()
    with pytest.raises(StudyNotFoundError, match="empty database") as e:
        Study.load(tmp_path)
    assert "Study.create" not in str(e.value)
    study = Study.open(tmp_path, {"a": 1})
    assert study.config == {"a": 1} and Study.load(tmp_path).config == {"a": 1}


def test_duplicates_and_input_validation(tmp_path):
    study = Study.create(tmp_path)
    first = study.add(GRAPH, fingerprint="abc")
    with pytest.raises(DuplicateCandidateError, match=f"candidate {first}") as info:
        study.add(GRAPH, fingerprint="abc")
    assert info.value.existing_id == first and isinstance(info.value, ValueError)
    second = study.add(GRAPH, fingerprint="abc", allow_duplicate=True)
    assert study.find("abc") == [first, second]
    with pytest.raises(ValueError, match="graph_json"):
        study.add("{not json")
    with pytest.raises(ValueError, match="parent_id"):
        study.add(GRAPH, parent_id=999)
    with pytest.raises(ValueError, match="status"):
        study.add(GRAPH, status="done")
    with pytest.raises(ValueError, match="spec"):
        study.add(GRAPH, spec={"x": float("nan")})
    with pytest.raises(ValueError, match="candidate_id"):
        study.get(999)
    with pytest.raises(ValueError, match="status"):
        study.candidates("bogus")
    assert len(study.candidates()) == 2  # nothing half-written by the failed adds


def test_tell_fail_and_claim_rules(tmp_path):
    study = Study.create(tmp_path)
    a, b, c = (study.add(GRAPH) for _ in range(3))
    assert study.claim("w", b).id == b
    assert study.claim("w", b) is None  # already running
    with pytest.raises(ValueError, match="metrics.accuracy: required"):
        study.tell(b, {"loss": 1.0})
    with pytest.raises(ValueError, match="metrics.loss: must be finite"):
        study.tell(b, {"accuracy": 0.5, "loss": math.nan})
    with pytest.raises(ValueError, match="metrics.flops"):
        study.tell(b, {"accuracy": 0.5, "flops": "many"})

    @dataclasses.dataclass
    class Metrics:
        accuracy: float
        loss: float

    assert study.tell(b, Metrics(0.8, 0.2)).accuracy == 0.8
    again = study.tell(b, {"accuracy": 0.9})  # the first result wins; no crash
    assert (again.status, again.accuracy) == ("done", 0.8)
    failed = study.fail(a, RuntimeError("NaN loss at step 3"))
    assert failed.status == "failed" and failed.error == "RuntimeError: NaN loss at step 3"
    assert study.fail(c, "out of memory", infeasible=True).status == "infeasible"
    assert study.fail(c, "again").error == "out of memory"  # first outcome kept
    assert study.claim("w") is None
    infeasible = study.add(GRAPH, status="infeasible", error="synthesis gave up")
    assert study.get(infeasible).finished_at is not None


def test_requeue_only_one_worker(tmp_path):
    study = Study.create(tmp_path)
    a, b = study.add(GRAPH), study.add(GRAPH)
    study.claim("driver", a)
    study.claim("external", b)
    assert study.requeue_running(worker="driver") == ([a], [])
    assert study.get(b).status == "running"
    with pytest.raises(ValueError, match="max_attempts"):
        study.requeue_running(max_attempts=0)


def test_pareto_front_best_and_export(tmp_path):
    study = Study.create(tmp_path)
    s = _done(study, 0.90, 100.0, 10.0)
    cheap = _done(study, 0.80, 10.0, 50.0, parent=s)
    _done(study, 0.70, 50.0, 60.0, parent=s)  # dominated on both
    top = _done(study, 0.95, 200.0, 5.0, parent=cheap)
    study.add(GRAPH)  # pending: ignored
    assert [c.id for c in study.pareto_front("flops")] == [top, s, cheap]
    assert [c.id for c in study.pareto_front("params")] == [top]
    assert study.pareto_front("im_sec_core_train") == []
    with pytest.raises(ValueError, match="cost"):
        study.pareto_front("latency")
    assert [c.id for c in study.best(2)] == [top, s]

    out = study.export(top, tmp_path / "out" / "top.zip")
    doc = json.loads(zipfile.ZipFile(out).read("candidate.json"))
    info = doc["info"]
    assert info["id"] == top and info["parent_id"] == cheap and info["generation"] == 2
    assert doc["graph"] == json.loads(GRAPH)
    assert doc["metrics"] == {"accuracy": 0.95, "flops": 200.0, "params": 5.0}
    assert doc["weights"] is None and doc["train_config"] is None  # no checkpoint, no config
    assert [p.name for p in out.parent.iterdir()] == ["top.zip"]  # no temp file left


def test_refuses_corrupt_foreign_and_newer_files(tmp_path):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "study.db").write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(ValueError, match="not a readable SQLite database"):
        Study.load(corrupt)
    with pytest.raises(ValueError, match="not a readable SQLite database"):
        Study.open(corrupt)

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    conn = sqlite3.connect(foreign / "study.db")
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match="not a nas study"):
        Study.load(foreign)

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "study.db").write_bytes(b"")
    with pytest.raises(StudyNotFoundError, match="empty database"):
        Study.load(empty)

    newer = tmp_path / "newer"
    Study.create(newer).close()
    conn = sqlite3.connect(newer / "study.db")
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(ValueError, match="schema version 99 is newer"):
        Study.load(newer)

    damaged = tmp_path / "damaged"
    study = Study.create(damaged)
    for _ in range(50):
        study.add(json.dumps({"pad": "x" * 4000}))
    study.close()
    db = damaged / "study.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    data = bytearray(db.read_bytes())
    data[4096 : len(data)] = b"\xff" * (len(data) - 4096)  # wipe every page but the first
    db.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="damaged|not a"):
        Study.load(damaged).candidates()


def test_the_budget_is_the_drivers_last_else_the_stored_configs(tmp_path):
    study = Study.create(tmp_path / "a", {"search": {"max_candidates": 5}})
    assert study.max_candidates == 5
    study.set_state("max_candidates", 9)  # a resumed driver extended it
    assert study.max_candidates == 9 and Study.load(tmp_path / "a").max_candidates == 9
    assert Study.create(tmp_path / "b", {}).max_candidates == 12  # the field's default
    bad = Study.create(tmp_path / "c", {"search": {"max_candidates": 0}})
    with pytest.raises(ValueError) as e:
        _ = bad.max_candidates
    assert str(e.value).startswith("config field 'search.max_candidates' must be")
