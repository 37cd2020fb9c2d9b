"""A report that stays small: past `SCALE_LIMIT` finished candidates the page draws the
population as density, details only the fronts, the best k, the seed and the recommended
candidate, and lists only those rows; report.csv keeps every candidate."""

import csv
import re

import numpy as np
import pytest

from nas.graph.serialize import graph_to_json
from nas.io import examples
from nas.search import Study
from nas.search.reporting.highlights import SCALE_LIMIT
from nas.search.reporting.report import write_report
from nas.search.strategy import recommend
from nas.zoo import cnn
from tests.search.conftest import dump_dom, headless_browser

K = 5
LARGE = SCALE_LIMIT + 20
VAL, TEST = 143, 360


def _build(workdir, n):
    """`n` done candidates through the public Study API (no training): CifarNet's graph,
    seeded metrics and per-example results, each child's parent drawn from those before
    it (as benchmarks/study_scale.py builds its studies)."""
    graph, constants, _ = cnn.CifarNet()
    graph_json = graph_to_json(graph, constants)
    study = Study.create(workdir, config={"train": {"input": {"image_size": 32}},
                                          "search": {"selection": {"costs": ["flops"]}}})
    rng = np.random.default_rng(n)
    for i in range(1, n + 1):
        parent = None if i == 1 else int(rng.integers(1, i))
        cid = study.add(graph_json, parent_id=parent, fingerprint=f"{i:08x}")
        scale = 1.0 if i == 1 else float(rng.lognormal(0.0, 0.5))
        acc = 0.9 if i == 1 else float(np.clip(rng.normal(0.85, 0.06), 0.3, 0.99))
        val, test = rng.random(VAL) < acc, rng.random(TEST) < acc
        study.tell(cid, {"accuracy": float(val.mean()), "flops": 1.5e7 * scale,
                         "params": 1.2e5 * scale, "im_sec_core_train": 300.0 / scale,
                         "val_examples": VAL, "val_correct": examples.to_text(val),
                         "test_accuracy": float(test.mean()), "test_examples": TEST,
                         "test_correct": examples.to_text(test)})
    write_report(study, k=K)
    return study


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    study = _build(tmp_path_factory.mktemp("large"), LARGE)
    return study, (study.workdir / "report" / "report.html").read_text()


def _expected(study):
    """What the page must detail, found through the Study API rather than the report."""
    done = study.candidates("done", with_graphs=False)
    rec = recommend.recommend(done, recommend.Comparisons.of(study),
                              recommend.margin_pt(study.config)).candidate
    ids = {c.id for c in study.pareto_front("flops")} | {c.id for c in study.best(K)}
    return ids | {1, rec.id}, rec


def test_large_report_details_only_fronts_best_seed_and_recommended(large):
    study, page = large
    expected, rec = _expected(study)
    assert rec.id != 1  # a child is recommended, so the set has four kinds of member
    assert set(map(int, re.findall(r'<section class="candidate" id="cand-(\d+)"', page))) \
        == expected
    table = page[page.index('id="candidates-table"'):]
    table = table[:table.index("</table>")]
    assert set(map(int, re.findall(r'<td id="c(\d+)"', table))) == expected
    assert f'data-shown="{len(expected)}" data-total="{LARGE}"' in page
    assert "report.csv" in page and "nas-search dashboard --workdir=" in page
    shown_as = re.search(rf'id="cand-{rec.id}".*?class="shown-for"><b>shown as</b>: ([^<]*)',
                         page).group(1)
    assert "recommended" in shown_as
    for cid in expected:  # each section links to its row, each row to its section
        assert f'— row <a href="#c{cid}">{cid}</a>' in page
        assert f'<td id="c{cid}"><a href="#cand-{cid}">{cid}</a></td>' in page


def test_large_report_draws_the_population_as_density(large):
    study, page = large
    expected, rec = _expected(study)
    charts = re.findall(r'<svg class="scatter scatter-(\w+)".*?</svg>', page)
    assert charts == ["flops", "params", "im_sec_core_train"]
    for svg in re.findall(r'<svg class="scatter .*?</svg>', page):
        assert re.search(rf'<g class="density" data-n="{LARGE}"', svg), svg[:300]
        cells = [int(n) for n in re.findall(r"<title>(\d+) candidates?</title></rect>", svg)]
        assert sum(cells) == LARGE and len(cells) > 10
        points = set(map(int, re.findall(r'<circle class="point" data-id="(\d+)"', svg)))
        assert points == expected  # one point per candidate shown in detail, no more
        assert len(re.findall(r'class="errorbar"', svg)) == len(expected)
        assert 'data-mark="seed"' in svg and f'data-id="{rec.id}" points=' in svg
        assert ">validation accuracy<" in svg
    assert len(page.encode()) < 1_000_000, len(page.encode())


def _missing_targets(page):
    targets = set(re.findall(r'id="([^"]+)"', page))
    return sorted({h for h in re.findall(r'href="#([^"]+)"', page) if h not in targets})


def test_large_report_links_resolve_and_the_csv_keeps_every_candidate(large):
    study, page = large
    assert not _missing_targets(page), _missing_targets(page)[:10]
    with open(study.workdir / "report" / "report.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["id"]) for r in rows] == list(range(1, LARGE + 1))
    assert sum(r["recommended"] == "1" for r in rows) == 1
    assert all(r["val_vs_seed"] for r in rows[1:])  # paired with the seed, every child


def test_small_report_keeps_every_point_and_row(tmp_path):
    study = _build(tmp_path / "small", 12)
    page = (study.workdir / "report" / "report.html").read_text()
    assert 'class="density"' not in page and "data-total" not in page
    assert len(re.findall(r'<td id="c\d+"', page)) == 12
    flops = re.search(r'<svg class="scatter scatter-flops".*?</svg>', page).group(0)
    assert len(re.findall(r'<circle class="point"', flops)) == 12
    expected, _ = _expected(study)
    assert set(map(int, re.findall(r'<section class="candidate" id="cand-(\d+)"', page))) \
        == expected
    assert not _missing_targets(page)  # a parent without a section is named, not linked


_DENSITY_PROBE = """<script>
  var cells = Array.from(document.querySelectorAll('svg.scatter g.density rect'))
      .filter(function(r){ var b = r.getBoundingClientRect();
                           return b.width > 0 && b.height > 0; }).length;
  var missing = Array.from(document.querySelectorAll('a[href^="#"]'))
    .map(function(a){ return a.getAttribute('href').slice(1); })
    .filter(function(id){ return !document.getElementById(id); });
  document.body.setAttribute('data-cells', String(cells));
  document.body.setAttribute('data-missing', missing.join(','));
</script></body>"""


@pytest.mark.skipif(headless_browser() is None, reason="no headless browser (chromium) installed; "
                    ".ci/run installs one")
def test_large_report_renders_its_density_in_a_browser(large, tmp_path):
    study, page = large
    path = tmp_path / "probe.html"
    path.write_text(page.replace("</body>", _DENSITY_PROBE))
    dom = dump_dom(headless_browser(), path)
    assert int(re.search(r'data-cells="(\d+)"', dom).group(1)) > 30
    assert 'data-missing=""' in dom
