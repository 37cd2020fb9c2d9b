"""Results of a study for people: a self-contained HTML page, a CSV, a Pareto PNG.

The page shows accuracy against every measured cost (SVG, each point a link to its
candidate), best accuracy and front size as the search went on, a sortable candidate table,
and a section (`report_candidate`) for each candidate on a front, in the best k, the seed
and the recommended one. Past `SCALE_LIMIT` finished candidates only those are points and
rows, over the population drawn as density (`highlights`): the page stays a few hundred
KB at 100,000 candidates. report.csv keeps every candidate, written row by row from a
listing without graphs, so its cost grows with the rows and not with their architectures.

Written to `<workdir>/report/` atomically, so a report being rewritten while someone
has it open is never half a file. pareto.png uses matplotlib's object API with the Agg
canvas (no pyplot global state, no display needed), imported only when a figure is drawn.
"""

from __future__ import annotations

import csv
import io
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from nas.atomic import atomic_write_bytes, atomic_write_text, atomic_write_with
from nas.search.reporting.highlights import SCALE_LIMIT, Highlights, front_of, ranked_costs
from nas.search.reporting.report_candidate import (
    Architecture,
    candidate_section,
    input_shape,
    link,
)
from nas.search.reporting.report_text import (
    COST_LABELS,
    cost_label,
    costs_present,
    error_bar,
    finals_html,
    fmt,
    front_label,
    hparams_text,
    lineage,
    measured,
    reported_test_text,
    val_accuracy_text,
)
from nas.search.reporting.svg import Point, esc, generation_colour, line_chart, scatter
from nas.search.store.candidate import Candidate, Status
from nas.search.store.study import Study
from nas.search.strategy import recommend
from nas.search.strategy.pareto import Front
from nas.search.strategy.selection import check_cost, cost_value, higher_better, spread_name
from nas.stats import paired

CSS = """
body{font-family:sans-serif;margin:1.5em;color:#222;max-width:1400px}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#eee} td.l{text-align:left}
table.sortable th{cursor:pointer} table.sortable th:after{content:" \\2195";color:#aaa}
tr.failed td,tr.infeasible td,tr.stopped td{color:#a33} tr.pending td,tr.running td{color:#777}
tr.front{background:#fff3d6}
tr[data-new] td{background:#e5f5e0}
img{max-width:100%} .plots svg{margin:0 12px 12px 0}
section.candidate{border-top:2px solid #ddd;margin-top:1.5em;padding-top:.5em}
.diff{display:flex;gap:2em;flex-wrap:wrap} .diff ol{margin:.3em 0}
.note{color:#777} figure{display:inline-block;margin:0 12px 0 0;max-width:460px;vertical-align:top}
figcaption{font-size:13px;font-weight:bold}
.row{display:flex;gap:1.5em;flex-wrap:wrap;align-items:flex-start}
"""


SORT_JS = """
document.querySelectorAll('table.sortable').forEach(function(table){
  table.querySelectorAll('thead th').forEach(function(th, col){
    th.addEventListener('click', function(){
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var asc = th.getAttribute('data-dir') !== 'asc';
      table.querySelectorAll('thead th').forEach(function(h){h.removeAttribute('data-dir');});
      th.setAttribute('data-dir', asc ? 'asc' : 'desc');
      function key(r){ var t = r.cells[col].textContent.trim(); var n = parseFloat(t);
        return t === '' ? null : (isNaN(n) || !/^[-+.0-9eE]+$/.test(t) ? t : n); }
      rows.sort(function(a, b){ var x = key(a), y = key(b);
        if (x === null) return 1; if (y === null) return -1;
        var c = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0)
                                        : (typeof x === 'number' ? -1 : 1);
        return asc ? c : -c; });
      rows.forEach(function(r){ body.appendChild(r); });
    });
  });
});
"""


def progress_series(candidates: Sequence[Candidate], cost: str = "flops",
                    user_costs: Sequence[str] = ()) -> list[tuple[int, float, int]]:
    """(n finished, best accuracy so far, front size so far) in the order done candidates
    finished; the front over those with `cost` (which may be one of `user_costs`)."""
    check_cost(cost, "cost", user_costs)
    done = sorted((c for c in candidates if c.status == Status.DONE and c.accuracy is not None),
                  key=lambda c: (c.finished_at or 0.0, c.id))
    front = Front(higher_better(cost))
    out: list[tuple[int, float, int]] = []
    best = float("-inf")
    for n, c in enumerate(done, start=1):
        best = max(best, c.accuracy)
        value = cost_value(c, cost)
        if value is not None:
            front.add(c.accuracy, value)
        out.append((n, best, front.size))
    return out


def scatters(candidates: Sequence[Candidate], hl: Highlights) -> str:
    """Accuracy against each measured cost, each point saying how it compares with the seed.
    Past `SCALE_LIMIT`, only the candidates shown in detail are points (each linking to its
    section) over the population drawn as density."""
    shown = hl.ids() if hl.large else None
    seed, front_ids = hl.seed, hl.front_ids
    marks = point_marks(seed, hl.recommended)
    notes = {c.id: text for c in candidates if c.accuracy is not None and seed is not None
             and c.id != seed.id and (shown is None or c.id in shown)
             and (text := recommend.versus(c, seed, hl.pairs))}
    done = [c for c in candidates if c.status == Status.DONE and c.accuracy is not None]
    top = max((c.generation for c in done), default=0)
    charts = []
    for cost, label in costs_present(candidates, hl.user_costs) or COST_LABELS[:1]:
        have = [c for c in done if measured(c, cost) is not None]
        drawn = have if shown is None else [c for c in have if c.id in shown]
        points = {c.id: front_point(
            c, measured(c, cost), label, marks, top,
            f"#cand-{c.id}" if c.id in front_ids or shown is not None else f"#c{c.id}",
            notes.get(c.id, ""), error_bar(c)) for c in drawn}
        front = [c.id for c in hl.fronts.get(cost, ()) if c.id in points]
        density = [] if shown is None else [(float(measured(c, cost)), float(c.accuracy))
                                            for c in have]
        title = ("front the search ranked by" if cost in hl.fronts
                 else "measured, not ranked by the search")
        charts.append(f'<figure class="front" data-cost="{esc(cost)}"><figcaption>'
                      f"{esc(front_label(cost))} ({title})</figcaption>"
                      + accuracy_scatter(points, front, drawn, label, f"scatter scatter-{cost}",
                                         density) + "</figure>")
    legend = " ".join(f'<span style="color:{generation_colour(g, top)}">&#9679;</span> {g}'
                      for g in range(top + 1)) if done else ""
    keys = (f"colour: generation {legend}; red rings: on that Pareto front; grey lines: "
            f"parent → child; bars: 95 % Wilson interval of each validation accuracy; black: "
            f"the seed (drawn on top); orange star: the recommended candidate")
    if shown is not None:
        keys = (f"{len(done):,} finished candidates: grey cells count them (darker: more; "
                f"hover for the number); points: the candidates on a front, the best, the "
                f"seed and the recommended one, each linking to its section; {keys}")
    else:
        keys += "; every point links to its candidate"
    return f'<div class="plots">{"".join(charts)}</div><p class="note">{keys}</p>'


def accuracy_scatter(points: dict[int, Point], front: Sequence[int],
                     edged: Iterable[Candidate], label: str, css_class: str,
                     density: Sequence[tuple[float, float]] | np.ndarray) -> str:
    """Validation accuracy against the cost named `label`: `points` by id, those of `front`
    (in cost order) ringed and joined, a line to each of `edged` from its parent's point."""
    for i in front:
        points[i].ring = True
    edges = [(points[c.parent_id], points[c.id]) for c in edged
             if c.id in points and c.parent_id in points]
    return scatter(list(points.values()), label, "validation accuracy", css_class,
                   [points[i] for i in front], edges=edges, density=density)


def point_marks(seed: Candidate | None, recommended: Candidate | None) -> dict[int, str]:
    """The marked points of the fronts: "seed", and "recommended" unless it is the seed."""
    if seed is None:
        return {}
    marks = {seed.id: "seed"}
    if recommended is not None and recommended.id != seed.id:
        marks[recommended.id] = "recommended"
    return marks


def front_point(c: Candidate, value: float, label: str, marks: dict[int, str], top: int,
                href: str, note: str = "", err: tuple[float, float] | None = None) -> Point:
    """`c` as a point of validation accuracy against `value` of the cost named `label`;
    `marks`: "seed" / "recommended" by id; `top`: the last generation (for its colour)."""
    mark = marks.get(c.id, "")
    return Point(float(value), float(c.accuracy),
                 f"candidate {c.id} (generation {c.generation}, parent {c.parent_id}"
                 + (f", {mark}" if mark else "") + f"): validation accuracy "
                 f"{val_accuracy_text(c)}, {label} {value:.4g}"
                 + (f"; vs the seed: {note}" if note else ""),
                 href=href, colour=generation_colour(c.generation, top), ident=str(c.id),
                 err=err, mark=mark)


def progress(candidates: Sequence[Candidate]) -> str:
    """Best validation accuracy and front size as candidates finished, as SVG charts."""
    series = progress_series(candidates)
    if not series:
        return '<p class="note">no finished candidates yet</p>'
    if len(series) > SCALE_LIMIT:  # the same steps, drawn from the entries that change
        series = [e for i, e in enumerate(series)
                  if i in (0, len(series) - 1) or e[1:] != series[i - 1][1:]]
    acc = line_chart([("best validation accuracy", "#2ca02c",
                       [(n, a) for n, a, _ in series])],
                     "candidates finished", "validation accuracy", "progress progress-accuracy",
                     integer_x=True, steps=True)
    size = line_chart([("front size (FLOPs)", "#d62728",
                        [(n, float(f)) for n, _, f in series])],
                      "candidates finished", "candidates on front", "progress progress-front",
                      integer_x=True, steps=True)
    return f'<div class="plots">{acc}{size}</div>'


BEST_COLUMNS = ("id", "parent", "gen", "val accuracy [95%]", "test accuracy [95%]", "loss",
                "flops", "params", "im/s/core")


def best_table(best: Sequence[Candidate], k: int) -> str:
    """The k candidates of best validation accuracy (`Highlights.best`)."""
    head = f"Best {k} by validation accuracy" + (
        f" (only {len(best)} done)" if len(best) < k else "")
    rows = "".join(
        f'<tr data-best="{c.id}"><td><a href="#c{c.id}">{c.id}</a></td>'
        + "".join(f"<td>{esc(fmt(v))}</td>" for v in (
            c.parent_id, c.generation, val_accuracy_text(c), reported_test_text(c), c.loss,
            c.flops, c.params, c.im_sec_core_train))
        + "</tr>" for c in best)
    return (f'<section id="best" data-k="{k}"><h2>{esc(head)}</h2>'
            f'<table id="best-table"><thead><tr>'
            + "".join(f"<th>{esc(h)}</th>" for h in BEST_COLUMNS)
            + f"</tr></thead><tbody>{rows}</tbody></table></section>")


COLUMNS = ("id", "parent", "gen", "status", "val accuracy [95%]", "test accuracy [95%]",
            "loss", "flops", "params", "im/s/core train", "im/s/core infer", "epochs",
            "attempts", "rungs", "worker", "lineage", "error")


def table(study: Study, listed: Sequence[Candidate], by_id: dict[int, Candidate],
           shown: set[int], front_ids: set[int], rows_at: set[int], large: bool,
           total: int) -> str:
    """The sortable candidate table: every candidate, or (`large`) those shown in detail,
    with a pointer to report.csv and the dashboard for the rest."""
    rows, users = [], study.user_costs  # a column per cost of the search's own
    for c in listed:
        cells = [
            f'<td id="c{c.id}">{link(c.id, shown, "cand-")}</td>',
            f"<td>{link(c.parent_id, rows_at, 'c')}</td>" if c.parent_id is not None
            else "<td></td>",
            *(f"<td>{esc(fmt(v))}</td>" for v in (
                c.generation, c.status, val_accuracy_text(c), reported_test_text(c), c.loss,
                c.flops, c.params, c.im_sec_core_train, c.im_sec_core_infer, c.epochs,
                c.attempts, *(cost_value(c, u) for u in users))),
            f'<td class="l" title="{esc(" | ".join(r["reason"] or "" for r in c.rungs))}">'
            f'{esc(rung_summary(c))}</td>',
            f'<td class="l">{esc(c.worker or "")}</td>',
            '<td class="l">' + " → ".join(link(i, rows_at, "c")
                                          for i in lineage(c.id, by_id)) + "</td>",
            f'<td class="l" title="{esc(c.error or "")}">{esc((c.error or "")[:120])}</td>',
        ]  # fmt: skip
        cls = f"{c.status} front" if c.id in front_ids else c.status
        rows.append(f'<tr class="{cls}">' + "".join(cells) + "</tr>")
    csv_link = '<a id="csv-link" href="report.csv" download>download CSV</a>'
    if large:
        head = (f'<p class="table-scope" data-shown="{len(listed)}" data-total="{total}">'
                f"{len(listed)} of {total:,} candidates: those shown in detail below (on a "
                f"front, the best, the seed, the recommended one); every candidate is in "
                f"report.csv ({csv_link}). {dashboard_note(study)} Highlighted rows are on "
                f"a Pareto front; click a column to sort.</p>")
    else:
        head = (f"<p>highlighted rows are on a Pareto front; click a column to sort; "
                f"{csv_link}</p>")
    return (f'<section id="candidates"><h2>Candidates</h2>{head}'
            f'<table id="candidates-table" class="sortable"><thead><tr>'
            + "".join(f"<th>{esc(h)}</th>" for h in (*COLUMNS[:13], *users, *COLUMNS[13:]))
            + "</tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table></section>")


def dashboard_note(study: Study) -> str:
    """Where any other candidate's page is: the dashboard renders it on demand."""
    return (f"Any candidate's page (mutation, training, architecture): <code>nas-search "
            f"dashboard --workdir={esc(str(study.workdir))}</code>, then "
            f"<code>/candidates/&lt;id&gt;</code>.")


def render_html(study: Study, candidates: Sequence[Candidate], k: int, hl: Highlights
                ) -> str:
    """The report page, everything inline (plots as SVG), so it stands alone. `candidates`
    may come without graphs: those of the candidates shown in detail and of their
    ancestors are read here."""
    by_id = {c.id: c for c in candidates}
    costs = [cost for cost, _ in costs_present(candidates, study.user_costs)]
    shown, rec = hl.ids(), hl.recommendation
    listed = [c for c in candidates if c.id in shown] if hl.large else list(candidates)
    rows_at = {c.id for c in listed}
    count_text = "; ".join([", ".join(f"{s}: {n}" for s, n in study.counts().items()),
                            *recommend.bounds_lines(candidates, rec.bounds)])
    order = sorted(shown, key=lambda i: (-(by_id[i].accuracy or 0.0), i))
    full = _with_graphs(study, order, by_id)
    archs: dict[int, Architecture] = {}
    sections = "".join(candidate_section(
        study, full[i], full, input_shape(study), costs,
        [cost for cost, front in hl.fronts.items() if any(c.id == i for c in front)], archs,
        hl.pairs,
        why=hl.reasons(i), sections=shown, rows=rows_at)
        for i in order)
    ranked_text = ", ".join(front_label(cost) for cost in hl.fronts)
    toc = " ".join(f'<a href="#cand-{i}">{i}</a>' for i in order) or "none yet"
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>nas study {esc(str(study.workdir))}</title><style>{CSS}</style></head>"
        f"<body><h1>nas study</h1><p>{esc(str(study.workdir.resolve()))}<br>"
        f"{esc(count_text)}<br>generated {esc(time.strftime('%Y-%m-%d %H:%M:%S'))}</p>"
        f'<section id="fronts"><h2>Accuracy against cost</h2>'
        f"{_recommendation_html(rec, study)}"
        f"{scatters(candidates, hl)}</section>{finals_html(hl.found, study.user_costs)}"
        f'<section id="progress"><h2>Search progress</h2>{progress(candidates)}</section>'
        f"{best_table(hl.best[:k], k)}"
        f"{table(study, listed, by_id, shown, hl.front_ids, rows_at, hl.large, len(candidates))}"
        f'<section id="front"><h2>Candidates in detail</h2><p>those on the fronts the '
        f"search ranked parents by (<code>search.selection.costs</code>): "
        f"{esc(ranked_text)}; the best {k} by validation accuracy; the seed; the "
        f"recommended candidate. {dashboard_note(study)}</p>"
        f"<p>{toc}</p>{sections}</section>"
        f'<p class="note">the same fronts as a static image: <a href="pareto.png">'
        f"pareto.png</a></p><script>{SORT_JS}</script></body></html>\n"
    )  # fmt: skip


def _with_graphs(study: Study, ids: Sequence[int], by_id: dict[int, Candidate]
                 ) -> dict[int, Candidate]:
    """`ids` and their ancestors with their graphs: taken from `by_id` when it has them,
    else read one row each (a listing without graphs leaves `graph_json` empty)."""
    out: dict[int, Candidate] = {}
    for i in ids:
        for j in lineage(i, by_id):
            if j not in out:
                c = by_id[j]
                out[j] = c if c.graph_json else study.get(j)
    return out


def _recommendation_html(rec: recommend.Recommendation, study: Study) -> str:
    """The summary's recommendation line and export command, on the page."""
    lines = recommend.recommendation_lines(rec, study.workdir)
    command = f"<pre>{esc(lines[1].strip())}</pre>" if len(lines) > 1 else ""
    return f'<div id="recommended"><p><b>{esc(lines[0])}</b></p>{command}</div>'


def write_report(study: Study, out_dir: str | os.PathLike | None = None, k: int = 10, *,
                 candidates: Sequence[Candidate] | None = None,
                 marks: Highlights | None = None) -> Path:
    """Write `pareto.png`, `report.csv` and `report.html` (default `<workdir>/report/`,
    the `k` most accurate in its best block); return the html path. `candidates` (graphs
    not needed) and `marks` (`Highlights.of(study, candidates, k)`): when the caller has
    them already."""
    out = Path(out_dir) if out_dir is not None else study.workdir / "report"
    if candidates is None:  # graphs: read only for those shown in detail
        candidates = study.candidates(with_graphs=False)
    if marks is None:
        marks = Highlights.of(study, candidates, k)
    png = io.BytesIO()  # the same fronts as the SVG ones
    pareto_figure(study, candidates, fronts=marks.fronts).savefig(png, format="png")
    atomic_write_bytes(out / "pareto.png", png.getvalue())
    rows = csv_rows(candidates, marks)

    def write_csv(f: io.BufferedIOBase) -> None:  # `to_csv`'s text, streamed
        text = io.TextIOWrapper(f, encoding="utf-8", newline="", write_through=False)
        csv.writer(text, lineterminator="\n").writerows(rows)
        text.flush()
        text.detach()  # the caller closes (and fsyncs) the file

    atomic_write_with(out / "report.csv", write_csv)
    return atomic_write_text(out / "report.html", render_html(study, candidates, k, marks))


# accuracy: on the validation split (decides); test_accuracy: reported only; *_vs_seed*:
# against the seed on the same examples (`nas.stats.paired`), in accuracy points,
# empty without per-example results; recommended: 1 for the summary's recommendation;
# start_accuracy: a child's validation accuracy with the weights it started from, before
# fine-tuning, beside its parent's; hparams: its `search.hparams`
CSV_COLUMNS = ("id", "parent_id", "generation", "status", "accuracy", "val_examples",
               "test_accuracy", "test_examples", "loss", "flops", "params",
               "im_sec_core_train", "im_sec_core_infer", "epochs", "attempts", "on_front",
               "rungs", "fingerprint", "worker", "error", "val_vs_seed_pt",
               "val_vs_seed_low_pt", "val_vs_seed_high_pt", "val_vs_seed", "test_vs_seed_pt",
               "test_vs_seed_low_pt", "test_vs_seed_high_pt", "test_vs_seed", "recommended",
               "parent_accuracy", "start_accuracy", "hparams")
_EXTRA = ("val_examples", "test_accuracy", "test_examples")


def rung_summary(c: Candidate) -> str:
    """Its rung results, e.g. "0.25ep 0.912 promoted; 1ep 0.950 final"."""
    return "; ".join(f"{r['epochs']:g}ep {r['accuracy']:.4g} {r['decision']}" for r in c.rungs)


def paired_cells(c: Candidate, seed: Candidate | None,
                 versus: dict[str, dict[int, paired.Paired]]) -> list[object]:
    """The `*_vs_seed*` cells of one candidate, in `CSV_COLUMNS` order (`versus`: per split,
    against the seed)."""
    out: list[object] = []
    for split in ("validation", "test"):
        found = versus[split].get(c.id) if seed is not None and c.id != seed.id else None
        out += [None] * 4 if found is None else [
            round(100 * found.difference, 4), round(100 * found.low, 4),
            round(100 * found.high, 4), found.decision]
    return out


_HEAD = attrgetter("id", "parent_id", "generation", "status", "accuracy")
_COSTS = attrgetter("loss", "flops", "params", "im_sec_core_train", "im_sec_core_infer",
                    "epochs", "attempts")


def csv_rows(candidates: Iterable[Candidate], marks: Highlights) -> Iterator[list]:
    """The header, then one row per candidate in `CSV_COLUMNS` order, then a column per
    cost of the search's own (and `latency_ms`, each with its spread where measured), then
    with `search.constraints` `feasible`: 1 within every bound, 0 over one, empty unless
    done; None as an empty cell."""
    candidates = candidates if isinstance(candidates, Sequence) else list(candidates)
    front, seed, user_costs = marks.front_ids, marks.seed, marks.user_costs
    bounds = marks.recommendation.bounds
    spreads = [spread_name(u) for u in user_costs
               if any(spread_name(u) in c.extra_metrics for c in candidates)]
    yield [*CSV_COLUMNS, *user_costs, *spreads, *(["feasible"] if bounds else [])]
    within = recommend.feasible_ids(candidates, bounds) if bounds else set()
    chosen_id = marks.recommended.id if marks.recommended is not None else None
    versus = {split: marks.pairs.against(seed, split) for split in ("validation", "test")}
    accuracies: dict[int, float | None] = {}  # parents are listed before their children
    for c in candidates:
        extra = c.extra_metrics
        accuracies[c.id] = c.accuracy
        row = [*_HEAD(c), *(extra.get(k) for k in _EXTRA), *_COSTS(c), int(c.id in front),
               rung_summary(c), c.fingerprint, c.worker, c.error,
               *paired_cells(c, seed, versus), int(c.id == chosen_id),
               accuracies.get(c.parent_id) if c.parent_id is not None else None,
               extra.get("start_accuracy"), hparams_text(extra.get("hparams")),
               *(cost_value(c, u) for u in user_costs), *(cost_value(c, u) for u in spreads),
               *([int(c.id in within) if c.status == Status.DONE else None] if bounds else [])]
        yield ["" if v is None else v for v in row]


def to_csv(study: Study, candidates: Sequence[Candidate] | None = None) -> str:
    """Every candidate as one CSV row (`on_front`: 1 if on a front the search ranked by)."""
    cands = list(study.candidates(with_graphs=False) if candidates is None else candidates)
    buf = io.StringIO()
    rows = csv_rows(cands, Highlights.of(study, cands, 0))
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def plot_costs(study: Study) -> list[tuple[str, str]]:
    """The (cost, label) pairs pareto.png plots: FLOPs and parameters, and each other cost
    the search ranked parents by (`search.selection.costs`, a user's own included)."""
    return [*COST_LABELS[:2], *((cost, cost_label(cost)) for cost in ranked_costs(study)
                                if cost not in ("flops", "params"))]


def pareto_figure(study: Study, candidates: Sequence[Candidate] | None = None, *,
                  fronts: dict[str, list[Candidate]] | None = None) -> Any:
    """The matplotlib `Figure` of pareto.png: accuracy against each of `plot_costs`, all
    done candidates, the front, parent -> child (past `SCALE_LIMIT`: the population as
    density, the front and the seed over it). `fronts`: fronts already found, by cost (the
    others are found here)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cands = list(study.candidates(with_graphs=False) if candidates is None else candidates)
    by_id = {c.id: c for c in cands}
    large = sum(c.status == Status.DONE for c in cands) > SCALE_LIMIT
    plots = plot_costs(study)
    fig = Figure(figsize=(5.5 * len(plots), 4.5), dpi=100)
    FigureCanvasAgg(fig)
    for ax, (cost, label) in zip(fig.subplots(1, len(plots)), plots, strict=True):
        _draw_cost(fig, ax, cands, by_id, cost, label, large, fronts)
    # fixed margins: tight_layout measures every tick label, 0.6 s of a large report
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.12, top=0.92, wspace=0.22)
    return fig


def _draw_cost(fig: Any, ax: Any, cands: Sequence[Candidate], by_id: dict[int, Candidate],
               cost: str, label: str, large: bool,
               fronts: dict[str, list[Candidate]] | None) -> None:
    """One panel of `pareto_figure`: validation accuracy against `cost`."""
    from matplotlib.ticker import MaxNLocator

    done = [c for c in cands if c.status == Status.DONE and c.accuracy is not None
            and cost_value(c, cost) is not None]
    if not done:
        ax.text(0.5, 0.5, "no finished candidates yet", ha="center", va="center")
        ax.set_axis_off()
        return
    front = (fronts or {}).get(cost)
    front = front_of(done, cost) if front is None else front
    values = [cost_value(c, cost) for c in done]
    log_x = min(values) > 0 and max(values) / min(values) > 20
    if large:  # the population as density; the front and the seed drawn over it
        sc = ax.hexbin(values, [c.accuracy for c in done], gridsize=48, bins="log",
                       cmap="Greys", xscale="log" if log_x else "linear", mincnt=1,
                       zorder=1)
        shown = front
    else:
        for c in done:  # grey parent -> child lines, under the points
            parent = by_id.get(c.parent_id) if c.parent_id is not None else None
            if parent is not None and parent.status == Status.DONE and cost_value(parent, cost):
                ax.plot([cost_value(parent, cost), cost_value(c, cost)],
                        [parent.accuracy, c.accuracy], color="0.75", linewidth=0.7, zorder=1)
        sc = ax.scatter(values, [c.accuracy for c in done],
                        c=[c.generation for c in done], cmap="viridis", s=18, zorder=2)
        shown = done
    bars = [(c, e) for c in shown if (e := error_bar(c)) is not None]
    if bars:  # 95 % Wilson intervals of the validation accuracies
        ax.errorbar([cost_value(c, cost) for c, _ in bars], [c.accuracy for c, _ in bars],
                    yerr=[[max(c.accuracy - e[0], 0.0) for c, e in bars],  # rounding
                          [max(e[1] - c.accuracy, 0.0) for c, e in bars]],  # at 0 / 1
                    fmt="none", ecolor="0.6", elinewidth=0.8, capsize=2, zorder=1.5)
    seeds = [c for c in done if c.parent_id is None]
    for c in seeds:  # the seed on top of everything (labelled below)
        ax.scatter([cost_value(c, cost)], [c.accuracy], marker="s", s=40, color="black",
                   zorder=6)
    front_xy = ([cost_value(c, cost) for c in front], [c.accuracy for c in front])
    ax.step(*front_xy, where="post", color="tab:red", linewidth=1.2, zorder=3)
    ax.scatter(*front_xy, s=60, facecolors="none", edgecolors="tab:red", linewidths=1.5,
               zorder=4)
    if log_x:
        ax.set_xscale("log")
    # labels last, once the limits are known, each turned to stay inside the plot
    for c in front:
        if c.parent_id is None:  # "seed N" names it
            continue
        _label_inside(ax, str(c.id), (cost_value(c, cost), c.accuracy), (3, 3),
                      fontsize=7)
    for c in seeds:
        _label_inside(ax, f"seed {c.id}", (cost_value(c, cost), c.accuracy), (4, -3),
                      fontsize=8, fontweight="bold", zorder=6,
                      bbox={"boxstyle": "square,pad=0.1", "fc": "white", "alpha": 0.8,
                            "lw": 0})  # legible over density
    ax.set_xlabel(label)
    ax.set_ylabel("validation accuracy")
    ax.set_title(f"validation accuracy vs {label} (red: Pareto front)")  # no legend over data
    ax.grid(alpha=0.3)
    if large:
        fig.colorbar(sc, ax=ax, label="candidates per cell")
        return
    bar = fig.colorbar(sc, ax=ax, label="generation")
    bar.locator = MaxNLocator(integer=True)  # generations are whole numbers
    bar.update_ticks()


def _label_inside(ax: Any, text: str, xy: tuple[float, float], offset: tuple[float, float],
                  **style: Any) -> None:
    """Annotate `xy` with `text` at `offset` points, mirrored where the label would run
    past the plot's right or bottom / top edge. Reads the axes' limits: call it after
    every data artist (and the scale) is set."""
    fx, fy = ax.transAxes.inverted().transform(ax.transData.transform(xy))
    dx, dy = offset
    if fx > 0.75:  # room for about a quarter of the width on the right, not a label
        dx = -dx
    if (dy < 0 and fy < 0.15) or (dy > 0 and fy > 0.88):
        dy = -dy
    ax.annotate(text, xy, xytext=(dx, dy), textcoords="offset points",
                ha="right" if dx < 0 else "left", va="top" if dy < 0 else "bottom",
                **style)

