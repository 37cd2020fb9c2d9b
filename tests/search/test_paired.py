"""Paired comparisons of two models on the same examples, against hand-computed cases, and
how per-example results reach selection, the study and its summary."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest

import nas
from nas.graph.serialize import graph_to_json
from nas.io import examples
from nas.search import Study
from nas.search.strategy.selection import SelectionConfig
from nas.stats import intervals, paired
from nas.zoo import cnn

N = 143  # the digits validation split


def _vector(wrong: range | list[int], n: int = N) -> np.ndarray:
    bits = np.ones(n, dtype=bool)
    bits[list(wrong)] = False
    return bits


def test_identical_models_differ_by_zero_and_are_within_noise():
    """No disagreement on n examples bounds the difference by z^2 / (n + z^2) either way
    (Tango's interval at b = c = 0): agreement on 143 images is not a proof of equality."""
    a = _vector(range(3))
    p = paired.compare(a, a.copy())
    half = paired.Z95 ** 2 / (N + paired.Z95 ** 2)
    assert (p.difference, p.only_a, p.only_b) == (0.0, 0, 0)
    assert p.low == pytest.approx(-half, abs=1e-12) and p.high == pytest.approx(half, abs=1e-12)
    assert p.decision == "within noise" and p.noninferior(3.0) and not p.noninferior(2.0)
    assert p.text() == "+0.00 pt [-2.62, +2.62] paired, within noise"


def test_better_on_a_handful_of_images():
    """Images right only for `a`, none the other way, on 143: 3 to 0 is within noise, 4 to
    0 is "better" by the score interval (McNemar's exact test, which selection's ties use,
    still calls 5 to 0 noise: p = 2 * 0.5**5 = 0.0625)."""
    seed = _vector(range(8))
    three, four, five = _vector(range(5)), _vector(range(4)), _vector(range(3))
    p = paired.compare(three, seed)
    assert p.difference == pytest.approx(3 / N) and p.decision == "within noise"
    assert p.low < 0 < p.difference < p.high
    assert paired.compare(four, seed).decision == "better"
    assert paired.compare(seed, four).decision == "worse"
    assert paired.compare(seed, four).high < 0
    assert paired.mcnemar(five, seed) == "within noise"
    assert paired.mcnemar(_vector(range(2)), seed) == "better"  # 6 to 0: p = 0.03125
    assert paired.mcnemar(seed, _vector(range(2))) == "worse"
    # Wilson intervals of 139/143 and 135/143 overlap: unpaired, this is "noise"
    assert intervals.compare((139 / N, N), (135 / N, N)) == "within noise"


def test_mixed_disagreements_and_the_margin():
    """3 of the 10 disagreements go to `a` on 100 examples: -4 pt with Tango's interval
    [-11.28, +2.58] (the published examples are in test_tango_interval.py)."""
    a = np.array([True] * 80 + [True] * 3 + [False] * 7 + [False] * 10)
    b = np.array([True] * 80 + [False] * 3 + [True] * 7 + [False] * 10)
    p = paired.compare(a, b)
    assert (p.only_a, p.only_b, p.n) == (3, 7, 100) and p.difference == pytest.approx(-0.04)
    assert round(100 * p.low, 2) == -11.28 and round(100 * p.high, 2) == 2.58
    assert p.decision == "within noise"
    # non-inferiority at a margin: the lower end -11.28 pt against -margin
    assert not p.noninferior(11.0) and p.noninferior(11.3)
    assert paired.interval(80, 3, 7, 10) == (p.low, p.high)
    assert paired.clopper_pearson(0, 10, 0.05) == (0.0, pytest.approx(1 - 0.025 ** 0.1))


def test_clearly_better_and_worse():
    a = _vector(range(2))
    b = _vector(range(30))
    assert paired.compare(a, b).decision == "better"
    assert paired.compare(b, a).decision == "worse"
    assert paired.compare(b, a).high < 0


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="paired comparison: .* 143 and 100"):
        paired.compare(_vector([]), np.ones(100, bool))
    with pytest.raises(ValueError, match="paired comparison"):
        paired.compare(np.zeros(0, bool), np.zeros(0, bool))
    assert not paired.comparable(None, _vector([]))


def test_packed_bits_round_trip_and_refuse_damage():
    bits = _vector([0, 7, 8, 142])
    assert len(examples.pack(bits)) == 18  # 143 bits in 18 bytes
    assert np.array_equal(examples.unpack(examples.pack(bits), N), bits)
    assert np.array_equal(examples.from_text(examples.to_text(bits)), bits)
    with pytest.raises(ValueError, match="metrics.val_correct: expected 'N:base64 bits'"):
        examples.from_text("not bits", "metrics.val_correct")
    with pytest.raises(ValueError, match="cannot hold exactly 9 examples"):
        examples.from_text("9:AA==")


def test_a_negative_noninferiority_margin_is_refused():
    with pytest.raises(ValueError, match="noninferiority_pt"):
        SelectionConfig(noninferiority_pt=-1.0)


def _study(tmp_path, with_bits=True):
    """Seed 1 (FLOPs 100, 8 validation images wrong), children: 2 right on 3 more and
    cheap (40), 3 cheaper but worse on 9 more (10), 4 the most accurate (6 gained, 2 lost:
    within noise of the seed, not better) and costlier (120)."""
    study = Study.create(tmp_path, {"search": {"selection": {"noninferiority_pt": 1.0}}})
    seed_val, seed_test = _vector(range(8)), _vector(range(10), 360)
    rows = [(None, seed_val, seed_test, 100.0),
            (1, _vector(range(3, 8)), _vector(range(1, 11), 360), 40.0),
            (1, _vector(range(17)), _vector(range(30), 360), 10.0),
            (1, _vector(range(6, 10)), _vector(range(2), 360), 120.0)]
    graph = graph_to_json(*cnn.CifarNet()[:2])  # a real graph, so exports load
    for parent, val, test, flops in rows:
        cid = study.add(graph, parent_id=parent)
        study.claim("w", cid)
        metrics = {"accuracy": float(val.mean()), "flops": flops, "params": flops,
                   "val_examples": N, "test_accuracy": float(test.mean()),
                   "test_examples": 360}
        if with_bits:
            metrics |= {"val_correct": examples.to_text(val),
                        "test_correct": examples.to_text(test)}
        study.tell(cid, metrics, worker="w")
    return study


def test_study_keeps_per_example_results_out_of_the_metrics(tmp_path):
    study = _study(tmp_path)
    assert "val_correct" not in study.get(2).metrics
    val = study.correctness()
    assert sorted(val) == [1, 2, 3, 4] and val[3].sum() == N - 17
    assert study.correctness([2], "test")[2].size == 360
    assert sorted(study.correctness(range(1, 2001))) == [1, 2, 3, 4]  # past SQLite's cap
    with pytest.raises(ValueError, match="split: expected one of"):
        study.correctness(split="train")
    cid = study.add('{"x": 5}', parent_id=1)
    study.claim("w", cid)
    with pytest.raises(ValueError, match="metrics.val_correct"):
        study.tell(cid, {"accuracy": 0.5, "val_correct": "143:###"}, worker="w")
    assert cid not in study.correctness()  # nothing half-written


def test_an_older_study_without_the_table_opens_and_falls_back(tmp_path):
    import sqlite3

    study = _study(tmp_path / "s", with_bits=False)
    study.close()
    conn = sqlite3.connect(tmp_path / "s" / "study.db")
    conn.execute("DROP TABLE examples")
    conn.commit()
    conn.close()
    again = Study.load(tmp_path / "s")
    assert again.correctness() == {}
    from nas.search.reporting.report_text import summary

    text = summary(again)
    assert "(Wilson)" in text and "recommended: candidate 2" in text


def test_summary_recommends_the_cheapest_non_inferior_child(tmp_path):
    from nas.search.reporting.report import to_csv
    from nas.search.reporting.report_text import summary

    study = _study(tmp_path)
    text = summary(study, k=2)
    lines = text.splitlines()
    table = {line.split()[0]: line for line in lines[3:6]}
    assert sorted(table) == ["1", "2", "4"]  # best 2, then the seed's own row
    assert table["1"].split()[:2] == ["1", "(seed)"]
    assert "+2.10 pt [-0.57, +5.99] paired, within noise" in table["2"]
    assert lines[-2].startswith("recommended: candidate 2, 0.400 of the seed's FLOPs, "
                                "validation +2.10 pt [-0.57, +5.99] paired vs the seed "
                                "(reference: the seed, as no child is better than it on "
                                "validation (paired); the cheapest candidate non-inferior "
                                "to the seed at 1 pt on validation (paired): 2 of 4 done "
                                "candidates are; test ")
    assert lines[-1] == f"  nas-search export --workdir={tmp_path} --id=2 --out=candidate_2.zip"
    rows = [r.split(",") for r in to_csv(study).splitlines()]
    head = rows[0]
    by_id = {r[0]: dict(zip(head, r, strict=True)) for r in rows[1:]}
    assert by_id["3"]["val_vs_seed"] == "worse" and by_id["2"]["recommended"] == "1"
    assert float(by_id["3"]["val_vs_seed_pt"]) == pytest.approx(-100 * 9 / N, abs=1e-3)
    assert float(by_id["2"]["val_vs_seed_low_pt"]) == pytest.approx(-0.57, abs=5e-3)
    assert by_id["1"]["val_vs_seed"] == ""


def test_no_child_good_enough_recommends_the_seed_and_says_why(tmp_path):
    from nas.search.strategy import recommend

    study = _study(tmp_path)
    done = [c for c in study.candidates("done") if c.id in (1, 3)]
    rec = recommend.recommend(done, recommend.Comparisons.of(study), 1.0)
    assert rec.candidate.id == 1
    lines = recommend.recommendation_lines(rec, tmp_path)
    assert lines[0].startswith("recommended: the seed, candidate 1 (reference: the seed, as "
                               "no child is better than it on validation (paired); no child "
                               "is cheaper")
    assert rec.reference.id == 1 and rec.versus_reference is None
    assert lines[1].strip().startswith("nas-search export")


def _cli(*args, cwd):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run([sys.executable, "-m", "nas.search.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": root})


@pytest.mark.slow
def test_export_recommended_and_best(tmp_path):
    _study(tmp_path / "s").close()
    proc = _cli("export", f"--workdir={tmp_path}/s", "--id=recommended", "--out=rec.zip",
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"wrote {tmp_path}/rec.zip: candidate 2 (recommended)")
    assert lines[1:3] == ["  import nas", f"  candidate = nas.load_candidate('{tmp_path}/rec.zip')"]
    cand = nas.load_candidate(tmp_path / "rec.zip")
    assert cand.info["id"] == 2 and cand.correctness().size == N
    assert cand.metrics["vs_seed"]["validation"]["decision"] == "within noise"
    assert cand.correctness("test").size == 360
    proc = _cli("export", f"--workdir={tmp_path}/s", "--id=best", "--out=best.zip",
                cwd=tmp_path)
    assert proc.returncode == 0 and "candidate 4 (best validation accuracy)" in proc.stdout
    proc = _cli("export", f"--workdir={tmp_path}/s", "--id=cheapest", "--out=x.zip",
                cwd=tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "nas-search: error: --id: expected a candidate id, 'recommended' or 'best', got "
        "'cheapest'"]
    assert not (tmp_path / "x.zip").exists()
    assert math.isclose(cand.metrics["accuracy"], 138 / N)


def test_comparisons_against_the_seed_are_each_pairs_own():
    """What the summary and the CSV count for all children at once is each pair's own
    comparison (interval, decision, non-inferiority)."""
    from types import SimpleNamespace

    from nas.search.strategy.recommend import Comparisons

    rng = np.random.default_rng(0)
    seed = rng.random(143) < 0.9
    bits = {1: seed, **{i: seed ^ (rng.random(143) < rng.uniform(0.0, 0.2))
                        for i in range(2, 302)}}
    bits[302] = rng.random(100) < 0.9  # other examples: not paired
    pairs = Comparisons(bits, {})
    found = pairs.against(SimpleNamespace(id=1))
    assert sorted(found) == list(range(1, 302))
    for margin in (2.0, 4.0, 6.0):
        want = [paired.compare(bits[i], seed).noninferior(margin) for i in range(2, 302)]
        assert [found[i].noninferior(margin) for i in range(2, 302)] == want
        assert 0 < sum(want) < len(want)
    assert all(found[i] == paired.compare(bits[i], seed) for i in range(2, 302))
    assert pairs.against(SimpleNamespace(id=302), "test") == {}
