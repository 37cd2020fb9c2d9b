"""A refused proposal is not a candidate: a child that cannot start near its parent, and a
move that raises, are recorded with their cause, and another child is proposed in place."""

from __future__ import annotations

import pytest

from nas.mutation import net2net
from nas.search.execution.driver import Driver
from nas.search.execution.task import Outcome, record_outcome
from nas.search.reporting.report_text import refusal_lines, summary
from nas.search.store.study import Study
from nas.search.strategy.settings import validate_search

GRAPH = '{"graph": {}}'
# Every fitted child (subgraph and shrink moves) is refused at its start; Net2Net children
# (function-preserving, nothing to fit) are not: refusals the same on every executor.
FIT_REFUSES = {"steps": 2, "batches": 1, "batch_size": 8, "bn_batch_size": 16,
               "max_error": 1e-9}


def _study(tmp_path, **search):
    study = Study.create(tmp_path / "s", {"search": search})
    seed = study.add(GRAPH, fingerprint="seed")
    study.claim(worker="w")
    study.tell(seed, {"accuracy": 0.9, "flops": 10.0}, worker="w")
    return study


def _child(study, fingerprint, **inheritance):
    cid = study.add(GRAPH, parent_id=1, fingerprint=fingerprint,
                    inheritance={"kind": "subgraph", "proposal": 0, **inheritance})
    assert study.claim(worker="w").id == cid
    return cid


def test_a_refused_child_leaves_the_candidates_and_its_slot_is_taken_by_the_next(tmp_path):
    study = _study(tmp_path)
    cid = _child(study, "a")
    record_outcome(study, Outcome(cid, error="PoorStartError: its validation accuracy at "
                                             "its start, 0.100, is below 0.600"), worker="w")
    assert [c.id for c in study.candidates()] == [1]  # not a candidate: takes no budget
    assert sum(study.counts().values()) == 1
    assert study.last_id() == cid  # its id is not given again: proposals read by id
    (refusal,) = study.refusals()
    assert (refusal.candidate_id, refusal.parent_id, refusal.kind, refusal.stage,
            refusal.slot_refusals, refusal.replaced_by) == (cid, 1, "subgraph", "start", 1,
                                                            None)
    assert refusal.cause.startswith("PoorStartError: its validation accuracy")
    assert study.open_refusal(through=cid - 1) is None  # not among what it reads yet
    assert study.open_refusal(through=cid) == refusal
    nxt = study.add(GRAPH, parent_id=1, fingerprint="b", replaces=refusal.id,
                    inheritance={"kind": "shrink", "slot_refusals": 1})
    assert nxt == cid + 1 and study.refusals()[0].replaced_by == nxt
    assert study.open_refusal(through=nxt) is None
    assert refusal_lines(study) == ["proposals refused at their start: 1 (kinds: subgraph 1)"]
    assert "proposals refused at their start: 1" in summary(study)
    # a late outcome of the refused child (its first worker, lease lost) changes nothing
    record_outcome(study, Outcome(cid, error="PoorStartError: again"), worker="w")
    assert len(study.refusals()) == 1


def test_a_slot_refused_max_refusals_times_fails_with_its_cause(tmp_path):
    study = _study(tmp_path, max_refusals=2)
    cid = _child(study, "a", slot_refusals=2)  # its slot's third proposal
    record_outcome(study, Outcome(cid, error="PoorFitError: its new ops fit ... error 3"),
                   worker="w")
    failed = study.get(cid)
    assert failed.status == "failed" and study.refusals() == []
    assert failed.error == ("its slot's proposals were refused at their start 3 time(s) "
                            "(search.max_refusals=2); the last: PoorFitError: its new ops "
                            "fit ... error 3")
    other = _child(study, "b")  # any other error fails its candidate at once
    record_outcome(study, Outcome(other, error="FloatingPointError: training diverged"),
                   worker="w")
    assert study.get(other).status == "failed" and study.refusals() == []


def test_a_refusal_before_the_child_exists_moves_the_proposal_counter_with_it(tmp_path):
    study = _study(tmp_path)
    study.record_refusal(stage="move", kind="deepen", proposal=4, parent_id=1,
                         cause="deepen: TypeError: x (at nas/mutation/net2net.py:1)",
                         state={"proposals": 5})
    assert study.get_state("proposals") == 5
    assert study.refusal_counts() == {"start": {}, "move": {"deepen": 1}}
    assert refusal_lines(study) == ["proposals whose move raised: 1 (kinds: deepen 1); the "
                                    "last: deepen: TypeError: x (at "
                                    "nas/mutation/net2net.py:1)"]
    with pytest.raises(ValueError, match="stage"):
        study.record_refusal(stage="later", cause="x")
    again = Study.load(tmp_path / "s")  # kept in the file
    assert [r.kind for r in again.refusals("move")] == ["deepen"]


def test_a_studys_stored_max_refusals_is_read_as_the_settings_declare_it(tmp_path):
    study = Study.create(tmp_path, {"search": {"max_refusals": "many"}})
    with pytest.raises(ValueError) as e:
        _ = study.max_refusals
    assert str(e.value).startswith("config field 'search.max_refusals' must be an int")
    assert Study.create(tmp_path / "default", {}).max_refusals == 8


def test_max_refusals_is_checked(search_config):
    assert validate_search(search_config()).max_refusals == 8
    with pytest.raises(ValueError, match="search.max_refusals"):
        validate_search(search_config(max_refusals=-1))


def _choices(study):
    return [(c.id, c.parent_id, c.fingerprint, c.accuracy, c.status)
            for c in study.candidates()]


def _refused(study):
    return [(r.proposal, r.candidate_id, r.parent_id, r.kind, r.stage, r.slot_refusals,
             r.replaced_by) for r in study.refusals()]


def test_refused_children_and_a_raising_move_leave_the_budget_to_trained_ones(
        tmp_path, search_config, monkeypatch):
    """max_candidates=4 trains 4 candidates however many proposals are refused: fitted
    children at their start, and every deepen move, which raises."""
    def broken(*args, **kwargs):
        raise KeyError("kernel")  # a bug inside a move

    monkeypatch.setattr(net2net, "deepen", broken)
    config = search_config(max_candidates=4, seed_epochs=0.1, fit=FIT_REFUSES,
                           mutation={"net2net_p": 0.6, "shrink_p": 0.5})
    config.train.total_epochs = 0.1
    study = Driver(config, str(tmp_path / "s")).run(progress=False)
    assert [c.status for c in study.candidates()] == ["done"] * 4
    starts, moves = study.refusals("start"), study.refusals("move")
    assert starts and moves
    for r in starts:
        assert r.kind in ("subgraph", "shrink") and "search.fit.max_error=1e-09" in r.cause
        assert r.candidate_id is not None and r.replaced_by is not None
    for r in moves:
        assert r.kind == "deepen" and r.candidate_id is None
        assert r.cause.startswith("deepen: KeyError: 'kernel' (at nas/mutation/net2net.py:")
    text = summary(study)
    assert f"proposals refused at their start: {len(starts)} (kinds: " in text
    assert f"proposals whose move raised: {len(moves)} (kinds: deepen {len(moves)})" in text


@pytest.mark.slow  # two searches, one with a worker process
def test_the_same_seed_refuses_the_same_proposals_inline_and_with_workers(tmp_path,
                                                                          search_config):
    runs = {}
    for name, settings in (("inline", dict(executor="inline")),
                           ("workers", dict(executor="local", workers=1, propose_ahead=0,
                                            prepare_ahead=0))):
        config = search_config(max_candidates=3, seed_epochs=0.1, fit=FIT_REFUSES,
                               mutation={"net2net_p": 0.5, "shrink_p": 0.5}, **settings)
        config.train.total_epochs = 0.1
        runs[name] = Driver(config, str(tmp_path / name)).run(progress=False)
    inline, workers = runs["inline"], runs["workers"]
    assert _refused(inline)  # some refusal, recorded
    assert len(inline.candidates("done")) == 3
    assert _refused(workers) == _refused(inline)
    assert _choices(workers) == _choices(inline)


@pytest.mark.slow  # three driver processes: an uninterrupted search, one killed, its resume
def test_a_driver_killed_after_a_refusal_resumes_to_the_same_proposals_and_refusals(tmp_path):
    """SIGKILL once a refusal is recorded, then the same command: the study ends with the
    proposals, refusals and candidates of a search that was never interrupted."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    config = tmp_path / "refusing.py"  # the settings of the inline test above, as a file
    config.write_text(
        "import sys\n"
        f"sys.path.insert(0, {root!r})\n"
        "from tests.search.conftest import tiny_search_config\n\n\n"
        "def get_config():\n"
        f"    c = tiny_search_config(max_candidates=4, seed_epochs=0.1, fit={FIT_REFUSES!r},\n"
        "                           mutation={'net2net_p': 0.5, 'shrink_p': 0.5})\n"
        "    c.train.total_epochs = 0.1\n"
        "    return c\n")
    flags = [f"--config={config}", "--noprogress"]

    def driver(workdir):
        return subprocess.Popen([sys.executable, "-m", "nas.search.cli", *flags,
                                 f"--workdir={workdir}"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)

    def refusals(workdir):
        try:
            return Study.load(workdir).refusals()
        except ValueError:  # not created yet
            return []

    whole, cut = str(tmp_path / "whole"), str(tmp_path / "cut")
    first = driver(whole)
    assert first.wait(timeout=900) == 0, first.stdout.read().decode()[-3000:]
    assert refusals(whole)  # the settings refuse some proposals
    killed = driver(cut)
    deadline = time.monotonic() + 900  # a safety net only: the refusal is what is awaited
    while not refusals(cut):
        assert killed.poll() is None, killed.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert len(Study.load(cut).candidates("done")) < 4  # cut short: the resume has work
    resumed = driver(cut)
    assert resumed.wait(timeout=900) == 0, resumed.stdout.read().decode()[-3000:]
    a, b = Study.load(whole), Study.load(cut)
    assert _refused(b) == _refused(a)
    assert [(c.id, c.parent_id, c.fingerprint, c.status) for c in b.candidates()] == [
        (c.id, c.parent_id, c.fingerprint, c.status) for c in a.candidates()]
    assert len(b.candidates("done")) == 4
