"""Multi-fidelity: the promotion rule, its config, rungs in the study store and leases, and
the migration of version 1 studies."""

import json
import sqlite3
import time

import pytest

from nas.search import Study
from nas.search.strategy.fidelity import FidelityConfig, RungPlan, RungResult, promotion, rung_order
from nas.search.strategy.settings import validate_search

GRAPH = json.dumps({"graph": {"ops": ["conv"]}, "constants": {}})


def R(cid, acc, cost=None):
    return RungResult(cid, acc, cost)


# ----------------------------------------------------------------------------- the rule


def test_first_result_at_a_rung_is_promoted_unless_far_below_its_parent():
    config = FidelityConfig(rungs=(0.25,), keep=0.5, parent_ratio=0.5)
    assert promotion(R(5, 0.6), [], config, parent_accuracy=0.9)[0]
    promoted, why = promotion(R(5, 0.3), [], config, parent_accuracy=0.9)
    assert not promoted and "0.5 x parent's 0.9" in why
    assert promotion(R(5, 0.3), [], config, parent_accuracy=None)[0]  # no parent check


@pytest.mark.parametrize("keep,n,top", [(0.5, 2, 1), (0.5, 4, 2), (1 / 3, 3, 1), (1 / 3, 6, 2),
                                        (1 / 3, 2, 1), (1.0, 5, 5), (0.5, 7, 3)])
def test_top_keep_fraction_of_the_rung_go_on(keep, n, top):
    config = FidelityConfig(rungs=(1.0,), keep=keep, parent_ratio=0.0)
    results = [R(i, 0.5 + 0.01 * i) for i in range(n)]  # the last is the best
    promoted = [r.candidate_id for r in results
                if promotion(r, [p for p in results if p is not r], config, 0.9)[0]]
    assert promoted == list(range(n - top, n))


def test_ties_go_to_the_older_candidate_and_order_is_deterministic():
    config = FidelityConfig(rungs=(1.0,), keep=0.5, parent_ratio=0.0)
    assert promotion(R(1, 0.8), [R(2, 0.8)], config, None)[0]
    assert not promotion(R(2, 0.8), [R(1, 0.8)], config, None)[0]
    results = [R(3, 0.7), R(1, 0.9), R(2, 0.7)]
    assert rung_order(results) == rung_order(results[::-1]) == [1, 2, 3]


def test_pareto_ranking_promotes_cheap_and_accurate_ends():
    results = [R(1, 0.95, 100.0), R(2, 0.90, 20.0), R(3, 0.93, 90.0), R(4, 0.80, 200.0),
               R(5, 0.94, 60.0)]
    order = rung_order(results, by_cost=True)
    assert set(order[:2]) == {1, 2}  # the front's ends
    assert order[-1] == 4  # dominated by everyone
    assert set(order[:4]) == {1, 2, 3, 5}  # the front before the dominated one
    config = FidelityConfig(rungs=(1.0,), keep=0.4, parent_ratio=0.0, cost="flops")
    cheap = promotion(R(2, 0.90, 20.0), [r for r in results if r.candidate_id != 2], config,
                      0.95)
    assert cheap[0] and "Pareto layer of accuracy vs flops" in cheap[1]
    accurate_only = FidelityConfig(rungs=(1.0,), keep=0.4, parent_ratio=0.0)
    assert not promotion(R(2, 0.90, 20.0), [r for r in results if r.candidate_id != 2],
                         accurate_only, 0.95)[0]


def test_fidelity_config_and_schedule():
    assert FidelityConfig.from_dict({}).schedule(1.0) == ()
    config = FidelityConfig.from_dict({"rungs": [0.25, 0.5], "keep": 1 / 3})
    assert config.schedule(1.0) == (0.25, 0.5, 1.0)
    assert FidelityConfig.from_dict({"rungs": (0.25, 1.0)}).schedule(1.0) == (0.25, 1.0)
    bad = [({"rungs": 0.5}, "rungs"), ({"rungs": [0.5, 0.25]}, "epochs that increase"),
           ({"rungs": [0.0]}, "rungs"), ({"rungs": [True]}, "rungs"),
           ({"keep": 0.0}, "keep"), ({"keep": 1.5}, "keep"), ({"parent_ratio": -1}, "parent"),
           ({"cost": "latency"}, "cost"), ({"eta": 3}, "unknown")]
    for values, match in bad:
        with pytest.raises(ValueError, match=f"search.fidelity.*{match}"):
            FidelityConfig.from_dict(values, "search.fidelity.")
    with pytest.raises(ValueError, match="exceeds the full budget"):
        FidelityConfig.from_dict({"rungs": [2.0]}).schedule(1.0)


def test_search_config_checks_fidelity_against_the_budget(search_config):
    validate_search(search_config(fidelity={"rungs": (0.25,), "keep": 0.5}))
    with pytest.raises(ValueError, match="search.fidelity.rungs.*exceeds the full budget"):
        validate_search(search_config(fidelity={"rungs": (0.75,)}))  # total_epochs is 0.5
    with pytest.raises(ValueError, match="search.fidelity.keep"):
        validate_search(search_config(fidelity={"keep": "half"}))


def test_rung_plan_tells_each_candidate_where_to_stop():
    plan = RungPlan.from_config({"rungs": [0.25, 0.5]}, 1.0)

    class C:
        def __init__(self, parent_id, rung):
            self.id, self.parent_id, self.rung = 9, parent_id, rung

    assert plan.stop_epochs(C(None, 0)) is None  # the seed trains its whole budget
    assert [plan.stop_epochs(C(1, r)) for r in range(3)] == [0.25, 0.5, None]
    with pytest.raises(ValueError, match="rung 3 is not one of"):
        plan.stop_epochs(C(1, 3))
    assert RungPlan().stop_epochs(C(1, 0)) is None  # off


# ----------------------------------------------------------------------------- the store


def _seed(study, acc=0.9):
    cid = study.add(GRAPH, fingerprint="seed")
    study.claim("w", cid)
    study.tell(cid, {"accuracy": acc, "flops": 100.0})
    return cid


def test_rungs_are_recorded_and_decided_in_the_study(tmp_path):
    study = Study.create(tmp_path, {"search": {"lease_s": 30.0}})
    plan = RungPlan.from_config({"rungs": [0.25], "keep": 0.5, "parent_ratio": 0.5}, 1.0)
    seed = _seed(study)
    a, b, c = (study.add(GRAPH, parent_id=seed, fingerprint=f) for f in "abc")
    for cid in (a, b, c):
        assert study.claim("w1").id == cid
    metrics = {a: 0.80, b: 0.85, c: 0.30}
    out = {cid: study.record_rung(cid, 0, 0.25, {"accuracy": acc, "flops": 50.0, "steps": 3},
                                  plan.decide, checkpoint_path=f"/r/{cid}", worker="w1")
           for cid, acc in metrics.items()}
    # a: first at the rung; b: best of two; c: below half its parent's accuracy
    assert [out[x].status for x in (a, b, c)] == ["pending", "pending", "stopped"]
    assert (out[a].rung, out[a].attempts, out[a].worker, out[a].accuracy) == (1, 0, None, None)
    assert (out[c].accuracy, out[c].epochs, out[c].checkpoint_path) == (0.30, 0.25, f"/r/{c}")
    assert out[c].rungs[0]["decision"] == "stopped" and "parent" in out[c].rungs[0]["reason"]
    assert out[b].rungs[0] | {"recorded_at": 0} == {
        "rung": 0, "epochs": 0.25, "steps": 3, "accuracy": 0.85, "loss": None, "flops": 50.0,
        "params": None, "decision": "promoted", "reason": out[b].rungs[0]["reason"],
        "worker": "w1", "recorded_at": 0}
    assert study.counts()["stopped"] == 1 and study.rung_counts() == {0: (0.25, 3)}
    # a result for a rung the candidate is not at (a late duplicate) changes nothing
    assert study.record_rung(a, 0, 0.25, {"accuracy": 0.1}, plan.decide).status == "pending"
    assert study.get(a).rungs[0]["accuracy"] == 0.80

    # the promoted ones are claimed again (oldest first), under a lease, at their next rung
    again = study.claim("w2", lease_s=0.05)
    assert (again.id, again.rung, again.attempts, again.status) == (a, 1, 1, "running")
    time.sleep(0.1)  # w2 dies: its lease expires; the candidate keeps its rung
    assert study.requeue_expired() == ([a], [])
    assert (study.get(a).status, study.get(a).rung) == ("pending", 1)
    assert study.claim("w3", a).rung == 1
    assert not study.renew(a, "w2")
    done = study.tell(a, {"accuracy": 0.9, "flops": 50.0}, worker="w3", rung_epochs=1.0)
    assert done.status == "done" and [r["decision"] for r in done.rungs] == ["promoted", "final"]
    assert study.rung_counts() == {0: (0.25, 3), 1: (1.0, 1)}
    assert [c.id for c in study.candidates("stopped")] == [c]
    assert study.best(5)[0].id in (seed, a) and c not in [x.id for x in study.best(5)]


V1_CANDIDATES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE candidates (
    id INTEGER PRIMARY KEY AUTOINCREMENT, parent_id INTEGER REFERENCES candidates(id),
    generation INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'done', 'failed',
                                           'infeasible')),
    graph_json TEXT NOT NULL, fingerprint TEXT, seed INTEGER, spec_json TEXT,
    properties_json TEXT, inheritance_json TEXT, accuracy REAL, loss REAL, flops REAL,
    params REAL, im_sec_core_train REAL, im_sec_core_infer REAL, epochs REAL,
    metrics_json TEXT, checkpoint_path TEXT, error TEXT, created_at REAL NOT NULL,
    started_at REAL, finished_at REAL, worker TEXT, attempts INTEGER NOT NULL DEFAULT 0,
    lease_until REAL);
"""


def test_version_1_study_is_migrated_keeping_its_candidates(tmp_path):
    conn = sqlite3.connect(tmp_path / "study.db")
    conn.executescript(V1_CANDIDATES)
    conn.executemany("INSERT INTO meta VALUES (?, ?)", [
        ("format", "nas-study"), ("schema_version", "1"), ("config", "{}"),
        ("created_at", "1.0")])
    conn.execute("INSERT INTO candidates(generation, status, graph_json, accuracy, created_at,"
                 " attempts) VALUES (0, 'done', ?, 0.9, 1.0, 1)", (GRAPH,))
    conn.execute("INSERT INTO candidates(parent_id, generation, status, graph_json,"
                 " created_at) VALUES (1, 1, 'pending', ?, 2.0)", (GRAPH,))
    conn.commit()
    conn.close()
    study = Study.load(tmp_path)
    seed, child = study.candidates()
    assert (seed.status, seed.accuracy, seed.attempts, seed.rung, seed.rungs) == (
        "done", 0.9, 1, 0, ())
    assert (child.parent_id, child.status, child.rung) == (1, "pending", 0)
    plan = RungPlan.from_config({"rungs": [0.5]}, 1.0)
    study.claim("w", child.id)
    assert study.record_rung(child.id, 0, 0.5, {"accuracy": 0.2}, plan.decide).status == \
        "stopped"
    assert study.add(GRAPH) == 3  # ids go on
    study.close()
    conn = sqlite3.connect(tmp_path / "study.db")
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() == ("2",)
    conn.close()
    Study.load(tmp_path).close()  # a second open finds it migrated


def test_progress_bar_shows_results_per_rung_and_stopped(tmp_path, search_config):
    import io

    from tqdm import tqdm

    from nas.search.execution.driver import Driver, rung_text

    assert rung_text((0.25, 1.0), {0: (0.25, 6)}) == "0.25ep:6 1ep:0"
    driver = Driver(search_config(fidelity={"rungs": [0.25], "keep": 0.5}), str(tmp_path))
    study = driver.study
    seed = _seed(study)
    a, b = (study.add(GRAPH, parent_id=seed, fingerprint=f) for f in "ab")
    for cid, acc in ((a, 0.9), (b, 0.1)):
        study.claim("w", cid)
        study.record_rung(cid, 0, 0.25, {"accuracy": acc}, driver.rungs.decide)
    bar = tqdm(total=3, file=io.StringIO())
    driver._update(bar, 2, study.counts())
    assert "rungs=0.25ep:2 0.5ep:0" in bar.postfix and "stopped=1" in bar.postfix
    bar.close()
