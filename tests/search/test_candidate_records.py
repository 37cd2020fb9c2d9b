"""A candidate's typed records: `Status` and `Inheritance`, read from what studies hold,
written back as they were, and bad values read as one clear line."""

import dataclasses
import json
import sqlite3

import pytest

from nas.search import Inheritance, Status, Study
from nas.search.store.candidate import EMPTY_INHERITANCE, FINISHED, STATUSES

GRAPH = json.dumps({"graph": {"ops": ["conv"]}, "constants": {}})
# What the driver writes for a child, as studies have held it
CHILD = {"kind": "subgraph", "inherited": ["conv_1"], "new": ["conv_2"],
         "init_path": "/w/inits/3", "fit_pairs": [["conv_2:0", "conv_1:0"]],
         "hparams": {"lr": 0.01}, "proposal": 3, "slot_refusals": 1}


def test_status_is_the_plain_name():
    assert Status.DONE == "done" and f"{Status.FAILED}" == "failed"
    assert json.dumps({"s": Status.STOPPED}) == '{"s": "stopped"}'
    assert [str(s) for s in STATUSES] == ["pending", "running", "done", "failed",
                                          "infeasible", "stopped"]
    assert set(FINISHED) == set(STATUSES) - {Status.PENDING, Status.RUNNING}


@pytest.mark.parametrize("blob", [None, {}])
def test_no_record_is_the_empty_one(blob):
    inh = Inheritance.from_json(blob)
    assert inh == EMPTY_INHERITANCE and not inh and inh.to_json() is None
    assert inh.kind is None and inh.new is None and inh.hparams is None and not inh.enqueued


def test_an_old_record_reads_with_defaults_and_keeps_what_it_had():
    # a study written before kind, proposal and fit_pairs: the driver fitted the child and
    # recorded the fit's errors
    old = {"inherited": ["a"], "new": ["b"], "fit": {"mse_before": 1.0, "mse_after": 0.5},
           "note": "a key this code does not know"}
    inh = Inheritance.from_json(old)
    assert inh.inherited == ("a",) and inh.new == ("b",) and inh.fit == old["fit"]
    assert inh.kind is None and inh.fit_pairs is None and inh.proposal is None
    assert inh.extra == {"note": "a key this code does not know"}
    assert inh.to_json() == old
    assert inh["new"] == ["b"] and inh.get("kind") is None and "note" in inh


def test_the_record_round_trips_to_the_same_json():
    inh = Inheritance.from_json(CHILD)
    assert inh.fit_pairs == (("conv_2:0", "conv_1:0"),) and inh.proposal == 3
    assert inh.to_json() == CHILD
    assert Inheritance.from_json(inh.to_json()) == inh
    assert dataclasses.replace(inh, slot_refusals=None).to_json() == {
        k: v for k, v in CHILD.items() if k != "slot_refusals"}
    seed = Inheritance(init_path="/w/inits/seed")
    assert seed.to_json() == {"init_path": "/w/inits/seed"}
    assert Inheritance(enqueued=True).to_json() == {"enqueued": True}


@pytest.mark.parametrize("blob, line", [
    ([1, 2], "inheritance: expected a JSON object or null, got list"),
    ({"new": "conv"}, "inheritance.new: expected a list of op names"),
    ({"proposal": True}, "inheritance.proposal: expected int"),
    ({"fit_pairs": [["a"]]}, "inheritance.fit_pairs: expected a list of"),
])
def test_a_bad_record_is_one_line(blob, line):
    with pytest.raises(ValueError, match="^" + line.replace("(", r"\(")) as e:
        Inheritance.from_json(blob)
    assert "\n" not in str(e.value)


def test_the_study_stores_the_json_it_stored_before(tmp_path):
    study = Study.create(tmp_path)
    seed = study.add(GRAPH, fingerprint="a")
    child = study.add(GRAPH, parent_id=seed, fingerprint="b",
                      inheritance=Inheritance.from_json(CHILD))
    mapping = study.add(GRAPH, parent_id=seed, fingerprint="c", inheritance=CHILD)
    with sqlite3.connect(study.path) as conn:
        stored = dict(conn.execute("SELECT id, inheritance_json FROM candidates"))
    assert stored[seed] is None
    assert stored[child] == stored[mapping] == json.dumps(CHILD, sort_keys=True)
    got = study.get(child)
    assert isinstance(got.status, Status) and got.status == Status.PENDING
    assert got.inheritance == Inheritance.from_json(CHILD) and got.inheritance.new == ("conv_2",)
    assert study.get(seed).inheritance == EMPTY_INHERITANCE
    assert [c.status for c in study.candidates(Status.PENDING)] == [Status.PENDING] * 3


def test_a_bad_status_in_a_study_is_one_line(tmp_path):
    study = Study.create(tmp_path)
    cid = study.add(GRAPH)
    study.close()
    conn = sqlite3.connect(tmp_path / "study.db")
    conn.execute("PRAGMA ignore_check_constraints=ON")
    conn.execute("UPDATE candidates SET status='lost' WHERE id=?", (cid,))
    conn.commit()
    conn.close()
    with pytest.raises(ValueError) as e:
        Study.load(tmp_path).get(cid)
    assert str(e.value) == (f"{tmp_path / 'study.db'}: candidate {cid}: status: unknown "
                            f"status 'lost'; expected one of pending, running, done, failed, "
                            f"infeasible, stopped")
    with pytest.raises(ValueError, match="^status: unknown status 'lost'"):
        Study.load(tmp_path).candidates("lost")


def test_a_bad_inheritance_in_a_study_names_the_candidate(tmp_path):
    study = Study.create(tmp_path)
    cid = study.add(GRAPH)
    with sqlite3.connect(study.path) as conn:
        conn.execute("UPDATE candidates SET inheritance_json='[1]' WHERE id=?", (cid,))
    with pytest.raises(ValueError, match=f"candidate {cid}: inheritance: expected a JSON "
                                         f"object or null, got list$"):
        study.get(cid)
