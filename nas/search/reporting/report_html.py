"""The parts of the HTML report page: its style and script, the SVG fronts, the progress
charts, the candidate tables and one candidate's section (which the dashboard shows too).

Why apart: `report.render_html` assembles the page from these; the dashboard renders a
candidate's page with the same section and style.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from nas.search.reporting.highlights import SCALE_LIMIT, front_of
from nas.search.reporting.progress import changes, progress_series
from nas.search.reporting.report_candidate import (
    Architecture,
    architecture,
    diagram,
    diff_html,
    metrics_path,
    mutation_diff,
    op_table,
    origins,
    read_metrics,
    training_curve,
)
from nas.search.reporting.report_csv import rung_summary
from nas.search.reporting.report_text import (
    COST_LABELS,
    costs_present,
    error_bar,
    fmt,
    front_label,
    lineage,
    measured,
    reported_test_text,
    val_accuracy_text,
)
from nas.search.reporting.starts import start_text
from nas.search.reporting.svg import Point, esc, generation_colour, line_chart, scatter
from nas.search.store.candidate import Candidate, Status
from nas.search.store.study import Study
from nas.search.strategy import recommend
from nas.search.strategy.selection import cost_value
from nas.train.config import image_shape

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


def input_shape(study: Study) -> tuple[int, ...]:
    """The shape of one input example (batch 1) the study trains on; CIFAR's if unknown."""
    try:
        return (1, *image_shape(study.config["train"]))
    except (KeyError, TypeError, ValueError):
        return (1, 32, 32, 3)


def scatters(candidates: Sequence[Candidate], by_id: dict[int, Candidate],
              front_ids: set[int], ranked: Sequence[str],
              marks: dict[int, str] | None = None,
              notes: dict[int, str] | None = None,
              shown: set[int] | None = None,
              fronts: dict[str, list[Candidate]] | None = None,
              user_costs: Sequence[str] = ()) -> str:
    """The fronts; `marks` ("seed", "recommended" by id) and `notes` (each candidate
    against the seed) come from the recommendation. With `shown`, only those candidates
    are points (each linking to its section) and the population is drawn as density.
    `fronts`: the ranked fronts when already found (else found here); `user_costs`: the
    search's own costs, drawn after the built-in ones."""
    marks, notes, fronts = marks or {}, notes or {}, fronts or {}
    done = [c for c in candidates if c.status == Status.DONE and c.accuracy is not None]
    top = max((c.generation for c in done), default=0)
    charts = []
    for cost, label in costs_present(candidates, user_costs) or COST_LABELS[:1]:
        have = [c for c in done if measured(c, cost) is not None]
        drawn = have if shown is None else [c for c in have if c.id in shown]
        points = {c.id: Point(
            float(measured(c, cost)), float(c.accuracy),
            f"candidate {c.id} (generation {c.generation}, parent {c.parent_id}"
            + (f", {marks[c.id]}" if c.id in marks else "") + "): validation accuracy "
            f"{val_accuracy_text(c)}, {label} {measured(c, cost):.4g}"
            + (f"; vs the seed: {notes[c.id]}" if c.id in notes else ""),
            href=f"#cand-{c.id}" if c.id in front_ids or shown is not None else f"#c{c.id}",
            colour=generation_colour(c.generation, top), ident=str(c.id),
            err=error_bar(c), mark=marks.get(c.id, "")) for c in drawn}
        front = ([c for c in fronts.get(cost) or front_of(have, cost) if c.id in points]
                 if cost in ranked else [])
        for c in front:
            points[c.id].ring = True
        edges = [(points[c.parent_id], points[c.id]) for c in drawn
                 if c.parent_id in points]
        density = [] if shown is None else [(float(measured(c, cost)), float(c.accuracy))
                                            for c in have]
        title = ("front the search ranked by" if cost in ranked
                 else "measured, not ranked by the search")
        charts.append(f'<figure class="front" data-cost="{esc(cost)}"><figcaption>'
                      f"{esc(front_label(cost))} ({title})</figcaption>"
                      + scatter(list(points.values()), label, "validation accuracy",
                                f"scatter scatter-{cost}", [points[c.id] for c in front],
                                edges=edges, density=density) + "</figure>")
    legend = " ".join(f'<span style="color:{generation_colour(g, top)}">&#9679;</span> {g}'
                      for g in range(top + 1)) if done else ""
    if shown is not None:
        return (f'<div class="plots">{"".join(charts)}</div><p class="note">{len(done):,} '
                f"finished candidates: grey cells count them (darker: more; hover for the "
                f"number); points: the candidates on a front, the best, the seed and the "
                f"recommended one, each linking to its section; colour: generation "
                f"{legend}; red rings: on that Pareto front; grey lines: parent → child; "
                f"bars: 95 % Wilson interval of each validation accuracy; black: the seed "
                f"(drawn on top); orange star: the recommended candidate</p>")
    return (f'<div class="plots">{"".join(charts)}</div><p class="note">colour: generation '
            f"{legend}; red rings: on that Pareto front; grey lines: parent → child; bars: "
            f"95 % Wilson interval of each validation accuracy; black: the seed (drawn on "
            f"top); orange star: the recommended candidate; every point links to its "
            f"candidate</p>")


def progress(candidates: Sequence[Candidate]) -> str:
    """Best validation accuracy and front size as candidates finished, as SVG charts."""
    series = progress_series(candidates)
    if not series:
        return '<p class="note">no finished candidates yet</p>'
    if len(series) > SCALE_LIMIT:  # the same steps, drawn from the points that change
        series = changes(series)
    acc = line_chart([("best validation accuracy", "#2ca02c",
                       [(n, a) for n, a, _ in series])],
                     "candidates finished", "validation accuracy", "progress progress-accuracy",
                     integer_x=True, steps=True)
    size = line_chart([("front size (FLOPs)", "#d62728",
                        [(n, float(f)) for n, _, f in series])],
                      "candidates finished", "candidates on front", "progress progress-front",
                      integer_x=True, steps=True)
    return f'<div class="plots">{acc}{size}</div>'


def candidate_section(study: Study, c: Candidate, by_id: dict[int, Candidate],
                       shape: tuple[int, ...], costs: Sequence[str], on: Sequence[str],
                       archs: dict[int, Architecture],
                       pairs: recommend.Comparisons | None = None,
                       why: Sequence[str] = (), sections: set[int] | None = None,
                       rows: set[int] | None = None) -> str:
    """One candidate in detail. `by_id` holds it and its ancestors with their graphs;
    `on`: the fronts it is on; `why`: why the report shows it; `sections` / `rows`: the
    ids whose section / table row the page has, to link to (None: link to any)."""
    def arch_of(cid: int) -> Architecture:
        if cid not in archs:
            archs[cid] = architecture(by_id[cid].graph_json, shape)
        return archs[cid]

    arch = arch_of(c.id)
    made = origins([(by_id[i], arch_of(i)) for i in lineage(c.id, by_id)])
    parent = by_id.get(c.parent_id) if c.parent_id is not None else None
    fresh = set(c.inheritance.new or ())
    added: set[str] = set()
    if parent is not None:
        parent_arch = arch_of(parent.id)
        diff = mutation_diff(arch, parent_arch, c.inheritance, c.metrics)
        added = {op.name for op in diff.added}
        change = diff_html(diff)
    else:
        change = '<p class="note">seed model: no parent</p>'
    metrics = ", ".join(f"{k} {fmt(v)}" for k in ("accuracy", *costs)
                        if (v := c.accuracy if k == "accuracy" else cost_value(c, k))
                        is not None)
    metrics = ", ".join(filter(None, (metrics, start_text(c, parent))))
    up = "" if parent is None else f" from {link(parent.id, sections, 'cand-')}"
    fronts = ", ".join(front_label(cost) for cost in on) or "none"
    shown = (f'<p class="shown-for"><b>shown as</b>: {esc(", ".join(why))}</p>'
             if why else "")
    return (f'<section class="candidate" id="cand-{c.id}"><h3>candidate {c.id} '
            f"(generation {c.generation}){up}</h3>"
            f'<p class="on-fronts"><b>on the fronts</b>: {esc(fronts)}</p>{shown}'
            f"{versus_html(c, by_id, pairs)}"
            f"<p>{esc(metrics)} — row {link(c.id, rows, 'c')}</p>"
            f'<h4>what the mutation changed</h4>{change}'
            f'<h4>training</h4><div class="row">'
            f"{training_curve(read_metrics(metrics_path(str(study.workdir), c)))}</div>"
            f'<h4>architecture</h4><div class="row"><div>{op_table(arch, added | fresh, made)}'
            f"</div><div>{diagram(arch, added | fresh)}</div></div></section>")


def link(cid: int, present: set[int] | None, prefix: str) -> str:
    """`cid` as a link to `#<prefix><cid>` when the page has that target (`present` None:
    assumed), else as plain text."""
    return f'<a href="#{prefix}{cid}">{cid}</a>' if present is None or cid in present \
        else str(cid)


def versus_html(c: Candidate, by_id: dict[int, Candidate],
                 pairs: recommend.Comparisons | None) -> str:
    """"within noise / better / worse" against the seed (and the parent), per split."""
    seed = recommend.seed_of(list(by_id.values()))
    if seed is None:
        return ""
    if c.id == seed.id:
        return '<p class="vs-seed"><b>the seed</b>: every other candidate is compared to it</p>'
    parts = []
    for name, other in (("vs the seed", seed), ("vs its parent", by_id.get(c.parent_id))):
        if other is None or (name == "vs its parent" and other.id == seed.id):
            continue
        cells = [f"{split} accuracy {text}" for split in ("validation", "test")
                 if (text := recommend.versus(c, other, pairs, split))]
        if cells:
            parts.append(f'<p class="{"vs-seed" if other is seed else "vs-parent"}"><b>'
                         f"{name}</b> (candidate {other.id}): {esc('; '.join(cells))}</p>")
    return "".join(parts)


BEST_COLUMNS: tuple[tuple[str, Callable[[Candidate], str]], ...] = (
    ("id", lambda c: str(c.id)),
    ("parent", lambda c: fmt(c.parent_id)),
    ("gen", lambda c: fmt(c.generation)),
    ("val accuracy [95%]", val_accuracy_text),
    ("test accuracy [95%]", reported_test_text),
    ("loss", lambda c: fmt(c.loss)),
    ("flops", lambda c: fmt(c.flops)),
    ("params", lambda c: fmt(c.params)),
    ("im/s/core", lambda c: fmt(c.im_sec_core_train)),
)


def best_table(study: Study, k: int) -> str:
    """The k candidates of best validation accuracy as a table; the heading says k and how
    many there are (fewer when fewer are done). One row per candidate, one column per
    `BEST_COLUMNS` entry, so a further column is one entry."""
    best = study.best(k)
    head = f"Best {k} by validation accuracy" + (
        f" (only {len(best)} done)" if len(best) < k else "")
    rows = "".join(
        f'<tr data-best="{c.id}"><td><a href="#c{c.id}">{c.id}</a></td>'
        + "".join(f"<td>{esc(cell(c))}</td>" for _, cell in BEST_COLUMNS[1:])
        + "</tr>" for c in best)
    return (f'<section id="best" data-k="{k}"><h2>{esc(head)}</h2>'
            f'<table id="best-table"><thead><tr>'
            + "".join(f"<th>{esc(h)}</th>" for h, _ in BEST_COLUMNS)
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

