"""The researcher's report: front candidates with ops, diagram, mutation diff, training curve;
CSV export; checked as text and, where a browser exists, as a rendered page."""

import csv
import io
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from nas.graph.serialize import graph_to_json
from nas.io import examples
from nas.mutation import propose_child
from nas.search import Study
from nas.search.reporting.report import CSV_COLUMNS, progress_series, to_csv, write_report
from nas.search.reporting.svg import nice_ticks
from nas.zoo import cnn
from tests.mutation.helpers import parent_variables
from tests.search.conftest import dump_dom, headless_browser

CHILD_CONFIG = {"linear_p": None, "time_limit_s": 600.0}  # never binding, even at load
BEST_K = 2  # fewer than the 3 done candidates: the best block must stop at k


def _curve(workdir, cid, accs):
    path = os.path.join(workdir, "candidates", str(cid), "train")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        for step, (loss, acc) in enumerate(accs, start=1):
            f.write(json.dumps({"step": step * 10, "training_loss": loss,
                                "training_accuracy": acc - 0.05}) + "\n")
            if step % 3 == 0:  # an eval at each epoch end / rung, under its older name
                f.write(json.dumps({"step": step * 10, "epoch": step // 3, "eval_acc": acc})
                        + "\n")
        f.write('{"step": 99, "training_lo')  # a torn last line, as after a kill


def _validation(wrong: int) -> dict:
    """Per-example validation results: the first `wrong` of 143 images wrong (so the kid,
    4 wrong, is the seed's 7 minus three: cheaper and non-inferior, the recommendation)."""
    bits = np.ones(143, dtype=bool)
    bits[:wrong] = False
    return {"val_examples": 143, "val_correct": examples.to_text(bits)}


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    """A study of CifarNet and a real child, with made-up metrics (training is not tested
    here) and a real metrics.jsonl for the child."""
    workdir = tmp_path_factory.mktemp("report")
    graph, constants, _ = cnn.CifarNet()
    variables = parent_variables(graph, constants)
    child = propose_child(graph, constants, variables, seed=3, config=CHILD_CONFIG)
    study = Study.create(workdir, config={
        "train": {"input": {"image_size": 32}},
        "search": {"selection": {"costs": ["flops", "im_sec_core_train"]}}})
    seed = study.add(graph_to_json(graph, constants), generation=0)
    study.claim("w", seed)
    study.tell(seed, {"accuracy": 0.95, "flops": 7.5e7, "params": 2.2e6,
                      "im_sec_core_train": 200.0, **_validation(7)})
    kid = study.add(graph_to_json(child.graph, child.constants), parent_id=seed,
                    spec=child.spec_json(),
                    inheritance={"kind": child.kind, "inherited": sorted(child.inherited),
                                 "new": sorted(child.new),
                                 "fit_pairs": [["a:0", "b:0"]]})
    study.claim("w", kid)
    study.tell(kid, {"accuracy": 0.97, "flops": 4.0e7, "params": 2.1e6,
                     "im_sec_core_train": 50.0, "fit_mse_before": 1.0, "fit_mse_after": 0.01,
                     **_validation(4)})
    _curve(str(workdir), kid, [(1.2, 0.8), (0.9, 0.85), (0.6, 0.9), (0.5, 0.93), (0.4, 0.95),
                               (0.3, 0.97)])
    worse = study.add('{"not": "a graph"}', parent_id=seed)
    study.claim("w", worse)
    study.tell(worse, {"accuracy": 0.5, "flops": 9e7, "params": 3e6, **_validation(71)})
    study.add("{}", parent_id=kid)  # pending
    write_report(study, k=BEST_K)
    return workdir, seed, kid, child


def test_page_shows_front_candidates_in_detail(study_dir):
    workdir, seed, kid, child = study_dir
    page = (workdir / "report" / "report.html").read_text()
    for cid in (seed, kid):
        assert f'id="cand-{cid}"' in page
    assert 'id="cand-3"' not in page  # not on any front
    section = page[page.index(f'id="cand-{kid}"'):]
    assert 'class="graph-diagram"' in section and 'class="training-curve"' in section
    assert "replaced subgraph" in section and "new subgraph" in section
    assert f"<b>mutation</b>: <code>{child.kind}</code>" in section
    assert "relative error 1 → 0.01" in section
    for name in sorted(child.new):
        assert name in section  # fresh weights named
    assert "1x32x32x32" in section  # op list with shapes
    # every point identifiable: one linked circle per done candidate and cost with a value
    assert len(re.findall(r'<a href="#cand-\d+"><circle class="point"', page)) >= 2
    assert 'data-id="3"' in page
    assert "train images/s/core" in page  # throughput is a cost on the page


def test_ops_and_symbolic_sizes_read_for_people():
    from nas.search.reporting.report_candidate import OpRow, explain_symbol, readable_op

    conv = OpRow("gen1196444851/edge0/conv/0", "CONV", [], "", "")
    assert readable_op(conv, "new in candidate 7, generation 2") == \
        "CONV #0 on edge 0 (new in candidate 7, generation 2)"
    assert readable_op(OpRow("gen5/conv_layer0/relu", "RELU", [], "", "")) == \
        "RELU conv_layer0/relu"
    assert explain_symbol("S:-1*2", {}) == "size of the op's input's last axis × 2"
    assert explain_symbol("S:1:0%4", {}) == "size of the op's input 1's axis 0 ÷ 4"
    assert explain_symbol("K:num_classes", {"num_classes": 10}) == \
        "graph constant num_classes (= 10)"


def test_csv_export(study_dir):
    workdir, seed, kid, _ = study_dir
    text = (workdir / "report" / "report.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [r["id"] for r in rows] == ["1", "2", "3", "4"]
    by_id = {r["id"]: r for r in rows}
    assert by_id[str(kid)]["on_front"] == "1" and by_id["3"]["on_front"] == "0"
    assert by_id["4"]["status"] == "pending" and by_id["4"]["accuracy"] == ""
    assert by_id[str(kid)]["generation"] == "1"
    assert to_csv(Study.load(workdir)) == text


def test_progress_series_counts_best_and_front(study_dir):
    workdir, *_ = study_dir
    series = progress_series(Study.load(workdir).candidates())
    assert [n for n, _, _ in series] == [1, 2, 3]
    assert [round(a, 2) for _, a, _ in series] == [0.95, 0.97, 0.97]
    assert all(isinstance(f, int) for _, _, f in series)


def test_nice_ticks_are_round():
    assert nice_ticks(0.0, 1.0) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(3.0, 3.0) == [3.0]


@pytest.mark.skipif(headless_browser() is None, reason="no headless browser (chromium) installed; "
                    ".ci/run installs one")
def test_page_renders_in_a_browser_and_sorts(study_dir, tmp_path):
    workdir, seed, kid, _ = study_dir
    browser = headless_browser()
    page = (workdir / "report" / "report.html").read_text()
    # Click the accuracy header once (ascending) and record the row order in the DOM.
    probe = page.replace("</body>", """<script>
      var th = Array.from(document.querySelectorAll('#candidates-table thead th'))
                 .find(function(h){ return h.textContent === 'val accuracy [95%]'; });
      th.click();
      var ids = Array.from(document.querySelectorAll('#candidates-table tbody tr'))
                 .map(function(r){ return r.cells[0].textContent.trim(); });
      document.body.setAttribute('data-sorted', ids.join(','));
      var missing = Array.from(document.querySelectorAll('a[href^="#"]'))
        .map(function(a){ return a.getAttribute('href').slice(1); })
        .filter(function(id){ return !document.getElementById(id); });
      document.body.setAttribute('data-missing', missing.join(','));
      var svgs = Array.from(document.querySelectorAll('svg')).filter(function(s){
        var r = s.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
      document.body.setAttribute('data-svgs', String(svgs.length));
    </script></body>""")
    path = tmp_path / "probe.html"
    path.write_text(probe.replace('src="data:image/png', 'data-x="'))
    dom = dump_dom(browser, path)
    assert f'id="cand-{kid}"' in dom and 'class="graph-diagram"' in dom
    assert re.search(r'data-sorted="3,1,2,4"', dom), re.search(r'data-sorted="[^"]*"', dom)
    assert 'data-missing=""' in dom  # every in-page link has its target
    svgs = int(re.search(r'data-svgs="(\d+)"', dom).group(1))
    assert svgs >= 2 + 2 + 2 * 2  # scatters, progress, per-candidate diagrams and curves


def _probe(page: str, script: str, tmp_path) -> dict:
    """What `script` (which fills a variable `out`) read from `page` rendered in the
    browser, handed back through a base64 attribute of the body."""
    import base64

    path = tmp_path / "probe.html"
    path.write_text(page.replace("</body>", script.replace("</script>", """
  document.body.setAttribute('data-probe', btoa(unescape(encodeURIComponent(
      JSON.stringify(out)))));
</script></body>""")))
    dom = dump_dom(headless_browser(), path)
    return json.loads(base64.b64decode(re.search(r'data-probe="([^"]*)"', dom).group(1)))


_EXPLAINS_PROBE = """<script>
  function text(sel){ var e = document.querySelector(sel); return e ? e.textContent : ''; }
  var kid = document.getElementById('cand-KID');
  var curve = kid.querySelectorAll('svg.training-curve')[1];
  var points = curve ? curve.querySelectorAll('circle.datum').length : 0;
  var readable = Array.from(kid.querySelectorAll('.op-readable'))
      .map(function(e){ return e.textContent; });
  var fronts = Array.from(document.querySelectorAll('.on-fronts'))
      .map(function(e){ return e.closest('section').id + '=' + e.textContent; });
  // a legend never covers a data point: no legend box overlaps any point of its chart
  var covered = 0;
  document.querySelectorAll('svg').forEach(function(svg){
    svg.querySelectorAll('g.legend').forEach(function(g){
      var a = g.getBoundingClientRect();
      svg.querySelectorAll('circle').forEach(function(c){
        var b = c.getBoundingClientRect();
        if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
          covered += 1; }); }); });
  var out = {points: points, readable: readable, fronts: fronts, covered: covered,
             legend: text('#cand-KID .symbols'), best_head: text('#best h2'),
             best_rows: document.querySelectorAll('#best-table tbody tr').length};
</script>"""


@pytest.mark.skipif(headless_browser() is None, reason="no headless browser (chromium) installed; "
                    ".ci/run installs one")
def test_page_explains_itself_in_a_browser(study_dir, tmp_path):
    """Rendered: a curve of several points, ops named for people, symbolic sizes explained,
    the fronts each candidate is on (the costs the search ranked by), k best, and no
    legend over a data point."""
    workdir, seed, kid, child = study_dir
    page = (workdir / "report" / "report.html").read_text()
    probe = _probe(page, _EXPLAINS_PROBE.replace("KID", str(kid)), tmp_path)
    assert probe["points"] >= 5, probe  # training-batch and eval accuracy by step
    fresh = [r for r in probe["readable"] if f"new in candidate {kid}, generation 1" in r]
    assert fresh and all(not r.startswith("gen") for r in probe["readable"]), probe
    assert any(re.match(r"[A-Z_]+ #\d+ on edge \d+ \(", r) for r in fresh), fresh
    assert any("seed model" in r for r in probe["readable"]), probe
    assert "K:num_classes" in probe["legend"] and "num_classes (= 10)" in probe["legend"]
    assert f"cand-{kid}=on the fronts: accuracy vs FLOPs, accuracy vs train images/s/core" in \
        probe["fronts"], probe["fronts"]
    assert f"cand-{seed}=on the fronts: accuracy vs train images/s/core" in probe["fronts"]
    assert probe["best_head"].startswith(f"Best {BEST_K} ") and probe["best_rows"] == BEST_K
    assert probe["covered"] == 0


@pytest.mark.slow
def test_cli_report_csv(study_dir):
    workdir, *_ = study_dir
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "nas.search.cli", "report",
                          f"--workdir={workdir}", "--csv"], capture_output=True, text=True,
                         timeout=300, env=env, check=True)
    assert out.stdout == (workdir / "report" / "report.csv").read_text()
    assert out.stdout.splitlines()[0].startswith("id,parent_id,generation,status,accuracy")


_NOISE_PROBE = """<script>
  var out = {charts: []};
  document.querySelectorAll('svg.scatter').forEach(function(svg){
    var points = Array.from(svg.querySelectorAll('circle.point'));
    var seed = svg.querySelector('circle.point[data-mark="seed"]');
    seed.scrollIntoView({block: 'center', inline: 'center'});  // hit-testing needs it shown
    var r = seed.getBoundingClientRect();
    var hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    var bars = Array.from(svg.querySelectorAll('path.errorbar')).filter(function(b){
      return b.getBBox().height > 0; }).length;
    var star = svg.querySelector('polygon.mark.recommended');
    out.charts.push({bars: bars, points: points.length,
      seed_last: points[points.length - 1] === seed, seed_hit: hit === seed,
      seed_label: (svg.querySelector('.seed-label') || {}).textContent || '',
      star: star ? star.getAttribute('data-id') : '',
      texts: Array.from(svg.querySelectorAll('text')).map(function(t){
        return t.textContent; })});
  });
  out.vs_seed = Array.from(document.querySelectorAll('.vs-seed')).map(function(e){
    return e.closest('section').id + '=' + e.textContent; });
  out.recommended = (document.getElementById('recommended') || {}).textContent || '';
  out.progress = Array.from(document.querySelectorAll('svg.progress text')).map(
    function(t){ return t.textContent; });
  out.images = document.querySelectorAll('img').length;
</script>"""


@pytest.mark.skipif(headless_browser() is None, reason="no headless browser (chromium) installed; "
                    ".ci/run installs one")
def test_page_shows_noise_the_seed_and_the_recommendation(study_dir, tmp_path):
    """Rendered: every point has its 95 % error bar, the seed is drawn on top of every
    child and labelled, the recommended child is marked, the axes name the validation
    accuracy, each candidate on a front says how it compares with the seed, and the fronts
    are not shown a second time as an image."""
    workdir, seed, kid, _ = study_dir
    page = (workdir / "report" / "report.html").read_text()
    probe = _probe(page, _NOISE_PROBE, tmp_path)
    assert probe["charts"], probe
    for chart in probe["charts"]:
        assert chart["bars"] == chart["points"] >= 2, chart
        assert chart["seed_last"] and chart["seed_hit"], chart
        assert chart["seed_label"] == f"seed {seed}" and chart["star"] == str(kid), chart
        assert "validation accuracy" in chart["texts"], chart["texts"]
        assert f"recommended {kid}" in chart["texts"]
    assert "validation accuracy" in probe["progress"]
    assert probe["recommended"].startswith(f"recommended: candidate {kid}, ")
    assert f"nas-search export --workdir={workdir} --id={kid}" in probe["recommended"]
    assert any(v.startswith(f"cand-{kid}=vs the seed (candidate {seed}): validation "
                            "accuracy +2.10 pt [") and "paired, within noise" in v
               for v in probe["vs_seed"]), probe["vs_seed"]
    assert probe["images"] == 0  # the PNG is linked, not a duplicate of the SVG fronts
