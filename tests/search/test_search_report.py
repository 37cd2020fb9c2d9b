"""Report: PNG, self-contained HTML and text summary from a study."""

import base64
import json

from nas.search import Study
from nas.search.reporting.report import write_report
from nas.search.reporting.report_text import lineage, summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _study(tmp_path):
    study = Study.create(tmp_path)
    prev = None
    for i, (acc, flops, params) in enumerate([(0.8, 4e6, 3e4), (0.85, 2e6, 2e4), (0.9, 5e6, 1e4)]):
        cid = study.add(json.dumps({"i": i}), parent_id=prev)
        study.claim("w", cid)
        study.tell(cid, {"accuracy": acc, "flops": flops, "params": params, "loss": 0.5})
        prev = cid
    bad = study.add("{}", parent_id=prev)
    study.claim("w", bad)
    study.fail(bad, "ValueError: <boom> & NaN")
    study.add("{}", parent_id=1)
    return study


def test_write_report(tmp_path):
    study = _study(tmp_path)
    html_path = write_report(study)
    assert html_path == tmp_path / "report" / "report.html"
    png = (tmp_path / "report" / "pareto.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 5000
    page = html_path.read_text()
    # the SVG fronts are inline; the PNG (the same fronts) is linked, not shown twice
    assert base64.b64encode(png).decode() not in page and 'href="pareto.png"' in page
    assert page.count('<svg class="scatter') == 2
    assert page.count("<tr class=") == 5
    assert "&lt;boom&gt; &amp; NaN" in page and "<boom>" not in page
    assert 'href="#c1">1</a> → <a href="#c2">2</a> → <a href="#c3">3</a>' in page
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == [
        "pareto.png", "report.csv", "report.html"]


def test_report_of_empty_study_and_summary(tmp_path):
    empty = Study.create(tmp_path / "empty")
    write_report(empty)
    assert (tmp_path / "empty" / "report" / "pareto.png").read_bytes().startswith(PNG_MAGIC)
    assert "no finished candidates yet" in summary(empty)

    study = _study(tmp_path / "s")
    text = summary(study, k=2)
    lines = text.splitlines()
    assert "done 3" in lines[0] and "failed 1" in lines[0] and "pending 1" in lines[0]
    assert lines[1].startswith("best 2 by validation accuracy (it decides")
    assert lines[2].split()[0] == "id"
    assert [line.split()[0] for line in lines[3:6]] == ["3", "2", "1"]
    assert lines[5].split()[:2] == ["1", "(seed)"] and "the last row is the seed" in lines[1]
    # no per-example results nor sample sizes (made-up metrics): nothing shows a cheaper
    # child as good, so the seed is recommended, and the line says why
    assert lines[-2].startswith("recommended: the seed, candidate 1 (no per-example results")
    assert lines[-1] == f"  nas-search export --workdir={study.workdir} --id=1 " \
        "--out=candidate_1.zip"
    by_id = {c.id: c for c in study.candidates()}
    assert lineage(4, by_id) == [1, 2, 3, 4]


def test_the_seed_among_the_best_is_one_row(tmp_path):
    """The seed in the best k is printed once, in its place, and the header does not say
    that a last row was added for it."""
    study = _study(tmp_path)
    lines = summary(study, k=5).splitlines()
    rows = lines[3:lines.index(next(ln for ln in lines[3:] if not ln.split()[0].isdigit()))]
    assert [r.split()[0] for r in rows] == ["3", "2", "1"]
    assert sum("(seed)" in r for r in rows) == 1
    assert "the last row is the seed" not in lines[1]


def _corner_study(tmp_path, log_x):
    """The seed at the top right (most FLOPs, most accurate), children down to the
    bottom left: every label sits at an edge."""
    study = Study.create(tmp_path)
    spread = 100.0 if log_x else 2.0
    rows = [(0.95, 8e6), (0.60, 8e6 / spread), (0.80, 8e6 / spread ** 0.5), (0.94, 7.9e6)]
    for i, (acc, flops) in enumerate(rows):
        cid = study.add(json.dumps({"i": i}), parent_id=None if i == 0 else 1)
        study.claim("w", cid)
        study.tell(cid, {"accuracy": acc, "flops": flops, "params": flops / 100,
                         "val_examples": 143})
    return study


def test_the_fronts_png_labels_stay_inside_the_plot(tmp_path):
    from nas.search.reporting.report import pareto_figure

    for log_x in (False, True):
        study = _corner_study(tmp_path / str(log_x), log_x)
        fig = pareto_figure(study)
        renderer = fig.canvas.get_renderer()
        plots = [ax for ax in fig.axes if ax.get_xlabel() in ("FLOPs", "parameters")]
        assert len(plots) == 2
        for ax in plots:  # not the colour bars
            box = ax.get_window_extent(renderer)
            texts = [t for t in ax.texts if t.get_text()]
            assert {t.get_text() for t in texts} >= {"seed 1", "2", "3"}, [t.get_text()
                                                                     for t in texts]
            for t in texts:
                e = t.get_window_extent(renderer)
                assert (box.x0 <= e.x0 and e.x1 <= box.x1 and box.y0 <= e.y0
                        and e.y1 <= box.y1), (log_x, ax.get_xlabel(), t.get_text(), e, box)
