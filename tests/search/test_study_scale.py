"""Bookkeeping that does not grow with the study: a proposal reads no full listing and no
graph but its parent's, claims and results are indexed single-row operations, and the
kept counts and columns say what the table says."""

import shutil
import sqlite3

import numpy as np
import pytest

from nas.search import Individual, Study, select_parents
from nas.search.execution.driver import Driver
from tests.search.conftest import tiny_search_config

N = 120


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A driver's study with N finished candidates (a third failed), built once."""
    workdir = tmp_path_factory.mktemp("scale") / "s"
    driver = Driver(tiny_search_config(pipeline_depth=2), str(workdir))
    driver.seed_population()
    study = driver.study
    graph_json = study.get(1).graph_json
    study.tell(study.claim(worker="w").id, {"accuracy": 0.9, "flops": 100.0, "params": 10.0,
                                            "val_examples": 143}, worker="w")
    rng = np.random.default_rng(0)
    for i in range(2, N + 1):
        parent = int(rng.integers(1, i))
        if i % 3 == 0:
            study.add(graph_json, parent_id=parent, fingerprint=f"f{i}", status="failed",
                      error="synthetic")
            continue
        cid = study.add(graph_json, parent_id=parent, fingerprint=f"f{i}")
        acc = round(float(rng.uniform(0.5, 0.99)) * 143) / 143  # ties, as measured ones
        study.tell(cid, {"accuracy": acc, "flops": float(rng.choice([50.0, 80.0, 120.0])),
                         "params": float(rng.uniform(5, 20)), "val_examples": 143})
    study.set_state("proposals", N)
    study.close()
    return workdir, tiny_search_config(pipeline_depth=2)


@pytest.fixture
def driver(built, tmp_path):
    workdir, config = built
    copy = tmp_path / "s"
    shutil.copytree(workdir, copy)
    return Driver(config, str(copy))


def _traced(study: Study, action) -> list[str]:
    """The SQL statements `action` runs on the study's connection (values inlined)."""
    statements: list[str] = []
    with study._db.read() as conn:
        conn.set_trace_callback(statements.append)
    try:
        action()
    finally:
        with study._db.read() as conn:
            conn.set_trace_callback(None)
    return [s for s in statements if not s.lstrip().startswith("--")]  # trigger bodies


def _plans(study: Study, statements: list[str]) -> list[str]:
    """EXPLAIN QUERY PLAN of each statement that reads or writes the candidates or rungs,
    on a second connection (nothing runs)."""
    conn = sqlite3.connect(study.path)
    try:
        plans = []
        for sql in statements:
            if sql.split()[0].upper() in ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA"):
                continue
            plans += [f"{row[-1]}  <-  {sql[:120]}"
                      for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
        return plans
    finally:
        conn.close()


def _scans(plans: list[str]) -> list[str]:
    return [p for p in plans if p.startswith(("SCAN candidates", "SCAN rungs"))]


def test_a_proposal_reads_no_listing_and_only_its_parents_graph(driver):
    study = driver.study
    driver.population()  # a driver's first read fills its cache once
    rng = np.random.default_rng([driver.search.seed, N])

    def proposal_bookkeeping():
        counts = study.counts()
        driver._update(_NoBar(), 0, counts)
        done = driver.population()
        parent = study.get(driver.choose_parent(done, rng))
        study.find("new-fingerprint")
        study.add(parent.graph_json, parent_id=parent.id, fingerprint="new-fingerprint",
                  state={"proposals": N + 1})

    statements = _traced(study, proposal_bookkeeping)
    with_graph = [s for s in statements if "graph_json" in s and s.startswith("SELECT")]
    assert len(with_graph) == 1 and "WHERE id=" in with_graph[0]  # the parent's row
    assert not [s for s in statements if "GROUP BY" in s or "COUNT(" in s.upper()]
    assert not _scans(_plans(study, statements)), _plans(study, statements)
    assert len(statements) < 40, statements


class _NoBar:
    """What `Driver._update` calls on a progress bar, drawing nothing."""

    n = 0

    def set_postfix(self, **kwargs):
        self.shown = kwargs

    def refresh(self):
        pass


def test_the_kept_population_chooses_what_the_full_listing_chooses(driver):
    """Same rows, same parent as selection over every done candidate read in full; the
    progress line's best and front size are `Study.best` and `Study.pareto_front`'s."""
    study = driver.study
    done = driver.population()
    full = [c for c in study.candidates("done") if c.id <= study.last_id() + 1 - 2]
    assert [c.id for c in done] == [c.id for c in full]
    for seed in range(10):
        want = select_parents([Individual.from_candidate(c) for c in full], driver.selection,
                              np.random.default_rng(seed))
        assert driver.choose_parent(done, np.random.default_rng(seed)) == want[0]
    bar = _NoBar()
    driver._update(bar, 0, study.counts())
    assert bar.shown["best_acc"] == f"{study.best(1)[0].accuracy:.3f}"
    assert bar.shown["front"] == len(study.pareto_front("flops"))
    # A candidate past the pipeline's bound still running: the proposal waits for it.
    cid = study.add(study.get(1).graph_json, parent_id=1, fingerprint="late")
    study.claim(worker="w", candidate_id=cid)
    study.add(study.get(1).graph_json, parent_id=1, fingerprint="later")
    assert driver.population() is None
    study.tell(cid, {"accuracy": 0.995, "flops": 1.0, "val_examples": 143}, worker="w")
    assert driver.population()[-1].id == cid
    assert driver._done.best().id == study.best(1)[0].id == cid
    for i, (acc, flops) in enumerate([(0.995, 1.0), (0.2, 0.5), (0.999, 300.0)]):
        twin = study.add("{}", fingerprint=f"twin{i}")  # ties with front points, and new ones
        study.tell(twin, {"accuracy": acc, "flops": flops})
        driver._update(bar, 0, study.counts())
        assert bar.shown["front"] == len(study.pareto_front("flops")), i
        assert bar.shown["best_acc"] == f"{study.best(1)[0].accuracy:.3f}"


def test_claim_renew_and_result_are_indexed_single_row_operations(driver):
    study = driver.study
    cid = study.add(study.get(1).graph_json, parent_id=1, fingerprint="claimed")
    worker = "host:1"

    def claim_and_result():
        study.claim(worker=worker)
        study.renew(cid, worker)
        study.holds(cid, worker)
        study.tell(cid, {"accuracy": 0.8, "flops": 9.0, "val_examples": 143}, worker=worker)

    statements = _traced(study, claim_and_result)
    plans = _plans(study, statements)
    assert not _scans(plans), plans
    assert any("USING INDEX candidates_status" in p or "USING COVERING INDEX "
               "candidates_status" in p for p in plans)
    assert study.get(cid).status == "done"


def test_status_counts_follow_every_change_and_are_rebuilt_when_missing(driver):
    study = driver.study

    def table_counts():
        with study._db.read() as c:
            return dict(c.execute("SELECT status, COUNT(*) FROM candidates GROUP BY status"))

    a = study.add("{}", fingerprint="a")
    b = study.add("{}", fingerprint="b", status="infeasible", error="too big")
    study.claim(worker="w", candidate_id=a)
    study.release(a, "w")
    study.claim(worker="w", candidate_id=a)
    study.fail(a, "boom", worker="w")
    counts = study.counts()
    assert {s: n for s, n in counts.items() if n} == table_counts()
    assert counts["infeasible"] == 1 and study.get(b).status == "infeasible"
    # A study written before the counts existed (or by a migration) gets them, counted.
    with study._db.write() as c:
        for name in ("status_counts_insert", "status_counts_update", "status_counts_delete"):
            c.execute(f"DROP TRIGGER {name}")
        c.execute("DROP TABLE status_counts")
    study.close()
    again = Study.load(study.workdir)
    assert {s: n for s, n in again.counts().items() if n} == table_counts()
    again.add("{}", fingerprint="c")
    assert again.counts()["pending"] == table_counts()["pending"]


def test_done_rows_refuse_nothing_and_read_only_done_ones(driver):
    study = driver.study
    rows = study.done_rows(0, 10)
    assert [r.id for r in rows] == [c.id for c in study.candidates("done") if c.id <= 10]
    assert all(r.val_examples == 143 and r.extra_metrics == {"val_examples": 143}
               for r in rows)
    assert study.done_rows(study.last_id()) == []
    assert study.first_unfinished_id() is None


def test_an_older_study_gets_the_selection_index_when_opened(driver):
    study = driver.study
    with study._db.write() as c:
        c.execute("DROP INDEX candidates_selection")
    study.close()
    again = Study.load(study.workdir)
    with again._db.read() as c:
        names = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        plan = c.execute("EXPLAIN QUERY PLAN SELECT id, accuracy, flops FROM candidates "
                         "WHERE status='done' ORDER BY id").fetchall()
    assert "candidates_selection" in names
    assert "COVERING INDEX candidates_selection" in plan[0][-1]
