"""Results of a study for people: a self-contained HTML page, a CSV, a Pareto PNG, a text table.

The page shows accuracy against every measured cost (SVG, each point a link to its
candidate), best accuracy and front size as the search went on, a sortable candidate table,
and for each candidate on a front, in the best k, the seed and the recommended one its
mutation, its training curve, its op list with shapes and a diagram of its graph (see
`report_candidate`). Past `SCALE_LIMIT` finished candidates only those are points and
rows, over the population drawn as density (`highlights`): the page stays a few hundred
KB at 100,000 candidates, and report.csv, written row by row, keeps every candidate.

Written to `<workdir>/report/` atomically, so a report being rewritten while someone
has it open is never half a file. Uses matplotlib's object API with the Agg canvas
(no pyplot global state, no display needed).
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nas.atomic import atomic_write_bytes, atomic_write_text
from nas.search.reporting.highlights import (  # noqa: F401 - public here too
    SCALE_LIMIT,
    Highlights,
    front_of,
    ranked_costs,
)
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
from nas.search.reporting.report_csv import (  # noqa: F401 - public here too
    CSV_COLUMNS,
    paired_columns,
    rung_summary,
    to_csv,
    write_csv,
)
from nas.search.reporting.starts import start_text, summary_lines
from nas.search.reporting.svg import Point, esc, generation_colour, line_chart, scatter
from nas.search.store import recommend
from nas.search.store.candidate import STATUSES, Candidate
from nas.search.store.recommend import cheapest_matching_seed  # noqa: F401 - public here too
from nas.search.store.study import Study
from nas.search.strategy import intervals
from nas.search.strategy.selection import OBJECTIVES, cost_value
from nas.train.config import image_shape

_PLOTS = (("flops", "FLOPs"), ("params", "parameters"))
# Every cost a candidate is measured by, in the order the report shows them.
COST_LABELS = (("flops", "FLOPs"), ("params", "parameters"),
               ("im_sec_core_train", "train images/s/core"),
               ("im_sec_core_infer", "inference images/s/core"))


def plot_costs(study: Study) -> list[tuple[str, str]]:
    """The (cost, label) pairs pareto.png plots: FLOPs and parameters, and each other cost
    the search ranked parents by (`search.selection.costs`, a user's own included)."""
    labels = dict(COST_LABELS)
    return [*_PLOTS, *((cost, labels.get(cost, cost)) for cost in ranked_costs(study)
                       if cost not in dict(_PLOTS))]


def measured(c: Candidate, cost: str) -> float | None:
    """`cost` of `c` where it was measured: a built-in cost that is nonzero (0: not
    measured, e.g. throughput without a timing), or a user's cost that is a number."""
    value = cost_value(c, cost)
    return value if value or (value is not None and cost not in OBJECTIVES) else None


def lineage(cid: int, by_id: dict[int, Candidate]) -> list[int]:
    """Ids from the oldest ancestor down to `cid` (stops at a missing or cyclic parent)."""
    chain, seen = [cid], {cid}
    parent = by_id[cid].parent_id if cid in by_id else None
    while parent is not None and parent not in seen:
        chain.append(parent)
        seen.add(parent)
        parent = by_id[parent].parent_id if parent in by_id else None
    return chain[::-1]


def plot_png(study: Study, candidates: Sequence[Candidate] | None = None, *,
             fronts: dict[str, list[Candidate]] | None = None) -> bytes:
    """PNG of accuracy vs FLOPs, vs params and vs each other cost the search ranked by
    (`plot_costs`): all done candidates, front, parent->child
    (past `SCALE_LIMIT`: the population as density, the front and the seed over it).
    `fronts`: fronts already found, by cost (the others are found here)."""
    buf = io.BytesIO()
    pareto_figure(study, candidates, fronts=fronts).savefig(buf, format="png")
    return buf.getvalue()


def pareto_figure(study: Study, candidates: Sequence[Candidate] | None = None, *,
                  fronts: dict[str, list[Candidate]] | None = None) -> Any:
    """The matplotlib `Figure` that `plot_png` saves (its labels are measurable)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    cands = list(study.candidates(with_graphs=False) if candidates is None else candidates)
    by_id = {c.id: c for c in cands}
    large = sum(c.status == "done" for c in cands) > SCALE_LIMIT
    plots = plot_costs(study)
    fig = Figure(figsize=(5.5 * len(plots), 4.5), dpi=100)
    FigureCanvasAgg(fig)
    for ax, (cost, label) in zip(fig.subplots(1, len(plots)), plots, strict=True):
        done = [c for c in cands if c.status == "done" and c.accuracy is not None
                and cost_value(c, cost) is not None]
        if not done:
            ax.text(0.5, 0.5, "no finished candidates yet", ha="center", va="center")
            ax.set_axis_off()
            continue
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
            _lineage_png(ax, done, by_id, cost)
            sc = ax.scatter(values, [c.accuracy for c in done],
                            c=[c.generation for c in done], cmap="viridis", s=18, zorder=2)
            shown = done
        bars = [(c, _error_bar(c)) for c in shown]
        bars = [(c, e) for c, e in bars if e is not None]
        if bars:  # 95 % Wilson intervals of the validation accuracies
            ax.errorbar([cost_value(c, cost) for c, _ in bars], [c.accuracy for c, _ in bars],
                        yerr=[[max(c.accuracy - e[0], 0.0) for c, e in bars],  # rounding
                              [max(e[1] - c.accuracy, 0.0) for c, e in bars]],  # at 0 / 1
                        fmt="none", ecolor="0.6", elinewidth=0.8, capsize=2, zorder=1.5)
        seeds = [c for c in done if c.parent_id is None]
        for c in seeds:  # the seed on top of everything (labelled below)
            ax.scatter([cost_value(c, cost)], [c.accuracy], marker="s", s=40, color="black",
                       zorder=6)
        ax.step(
            [cost_value(c, cost) for c in front],
            [c.accuracy for c in front],
            where="post", color="tab:red", linewidth=1.2, zorder=3,
        )  # fmt: skip
        ax.scatter(
            [cost_value(c, cost) for c in front],
            [c.accuracy for c in front],
            s=60, facecolors="none", edgecolors="tab:red", linewidths=1.5, zorder=4,
        )  # fmt: skip
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
            continue
        bar = fig.colorbar(sc, ax=ax, label="generation")
        bar.locator = MaxNLocator(integer=True)  # generations are whole numbers
        bar.update_ticks()
    # fixed margins: tight_layout measures every tick label, 0.6 s of a large report
    fig.subplots_adjust(left=0.06, right=0.98, bottom=0.12, top=0.92, wspace=0.22)
    return fig


def _label_inside(ax: Any, text: str, xy: tuple[float, float], offset: tuple[float, float],
                  **style: Any) -> None:
    """Annotate `xy` with `text` at `offset` points, mirrored to the other side of the
    point where the label would run past the plot's right or bottom / top edge (a seed
    with the most FLOPs is at the right edge). Reads the axes' limits: call it after
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


def _lineage_png(ax: object, done: Sequence[Candidate], by_id: dict[int, Candidate],
                 cost: str) -> None:
    """Grey parent -> child lines, under the points."""
    for c in done:
        parent = by_id.get(c.parent_id) if c.parent_id is not None else None
        if parent is not None and parent.status == "done" and cost_value(parent, cost):
            ax.plot([cost_value(parent, cost), cost_value(c, cost)],  # type: ignore[attr-defined]
                    [parent.accuracy, c.accuracy], color="0.75", linewidth=0.7, zorder=1)


def _fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def summary(study: Study, k: int = 5, *, candidates: Sequence[Candidate] | None = None,
            marks: Highlights | None = None) -> str:
    """Plain-text status counts and best-candidates table (for the CLI). `candidates`: a
    listing of the study already read (graphs not needed), and `marks` its highlights
    (comparisons with the seed, recommendation), so that a report and its summary find
    each once."""
    counts = study.counts()
    lines = [
        f"study {study.workdir}: " + ", ".join(f"{s} {counts[s]}" for s in STATUSES),
    ]
    rungs = study.rung_counts()
    if rungs:  # multi-fidelity: results per rung, and the children stopped at one
        lines.append("rungs: " + ", ".join(f"{e:g} epochs {n} result(s)"
                                          for e, n in rungs.values()))
    best = study.best(k)
    stopped = ([c for c in candidates if c.status == "stopped"] if candidates is not None
               else study.candidates("stopped", with_graphs=False))
    if stopped:
        lines.append(f"stopped at a rung ({len(stopped)}): " + ", ".join(
            f"{c.id} ({_fmt(c.epochs)} epochs, accuracy {_fmt(c.accuracy)})"
            for c in stopped[-k:]) + (" ..." if len(stopped) > k else ""))
    if not best:
        lines.append("no finished candidates yet")
        return "\n".join(lines)
    users = study.user_costs  # the search's own costs, a column each
    header = ("id", "parent", "gen", "val accuracy [95%]", "test accuracy [95%]",
              "val vs seed", "test vs seed", "val loss", "flops", "params", "im/s/core",
              *users)
    done = ([c for c in candidates if c.status == "done"] if candidates is not None
            else study.candidates("done", with_graphs=False))  # metrics only: a large study
    seed = next((c for c in done if c.parent_id is None), None)
    pairs = marks.pairs if marks is not None else recommend.Comparisons.of(study)
    # by id: `best` rows are read whole, `done` without graphs, so the same candidate's two
    # records are not equal, and the seed among the best would be printed twice
    shown = list(best) + ([seed] if seed is not None
                          and seed.id not in {c.id for c in best} else [])
    rows = [
        (f"{c.id} (seed)" if seed is not None and c.id == seed.id else c.id, c.parent_id,
         c.generation, val_accuracy_text(c), reported_test_text(c),
         "seed" if seed is not None and c.id == seed.id else
         recommend.versus(c, seed, pairs, "validation"),
         versus_seed(c, seed, pairs), c.loss, c.flops, c.params, c.im_sec_core_train,
         *(cost_value(c, u) for u in users))
        for c in shown
    ]  # fmt: skip
    table = [header] + [tuple(_fmt(v) for v in r) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines.append(f"best {k} by validation accuracy" + (f" (only {len(best)} done)" if len(best) < k
                 else "") + " (it decides; the test split is only reported; "
                 + ("the last row is the seed; " if len(shown) > len(best) else "")
                 + "[95% Wilson "
                 "interval] n=examples; vs seed: difference in accuracy points [95% paired "
                 "score interval, Tango's] on the same examples, where both have "
                 "per-example results):")
    for r in table:
        lines.append("  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)))
    lines += summary_lines(done, shown, seed, study.config)
    if seed is not None and seed.id not in pairs.validation:  # an older study: Wilson
        cheap = cheapest_matching_seed(done, seed)
        if cheap is not None:
            lines.append(f"cheapest child tied with the seed on validation: candidate "
                         f"{cheap.id} at {cheap.flops / seed.flops:.3f} of the seed's FLOPs; "
                         f"on test: {versus_seed(cheap, seed) or 'not measured'}")
    rec = (marks.recommendation if marks is not None
           else recommend.recommend(done, pairs, recommend.margin_pt(study.config),
                                    recommend.recommend_cost(study.config)))
    lines += recommend.recommendation_lines(rec, study.workdir)
    return "\n".join(lines)


def val_accuracy_text(c: Candidate) -> str:
    """Validation accuracy (what the search decided on) with its interval."""
    return "" if c.accuracy is None else intervals.text(c.accuracy,
                                                        c.extra_metrics.get("val_examples"))


def reported_test_text(c: Candidate) -> str:
    """Test accuracy (reported only) with its interval; empty when not measured."""
    acc = c.extra_metrics.get("test_accuracy")
    return "" if acc is None else intervals.text(acc, c.extra_metrics.get("test_examples"))


def versus_seed(c: Candidate, seed: Candidate | None,
                pairs: recommend.Comparisons | None = None) -> str:
    """"within noise" where the child's and the seed's test intervals overlap, else
    "better" / "worse"; "seed" for the seed; empty without test accuracies. With `pairs`
    holding both candidates' test examples: the paired difference and its decision
    (`nas.search.strategy.paired`) instead."""
    if seed is None or c.id == seed.id:
        return "seed" if seed is not None else ""
    if pairs is not None and pairs.pair(c, seed, "test") is not None:
        return recommend.versus(c, seed, pairs, "test")
    mine, theirs = c.extra_metrics, seed.extra_metrics
    if mine.get("test_accuracy") is None or theirs.get("test_accuracy") is None:
        return ""
    return intervals.compare((mine["test_accuracy"], mine.get("test_examples")),
                             (theirs["test_accuracy"], theirs.get("test_examples")))


def front_label(cost: str) -> str:
    """ "accuracy vs FLOPs": the objectives of one front."""
    return f"accuracy vs {dict(COST_LABELS).get(cost, cost)}"


def costs_present(candidates: Sequence[Candidate], user_costs: Sequence[str] = ()
                  ) -> list[tuple[str, str]]:
    """The (cost, label) pairs some done candidate has a value for: the built-in costs,
    then the search's own (`user_costs`, labelled by name)."""
    pairs = [*COST_LABELS, *((u, u) for u in user_costs)]
    return [(cost, label) for cost, label in pairs
            if any(c.status == "done" and measured(c, cost) is not None for c in candidates)]


_CSS = """
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

_SORT_JS = """
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


def _input_shape(study: Study) -> tuple[int, ...]:
    try:
        return (1, *image_shape(study.config["train"]))
    except (KeyError, TypeError, ValueError):
        return (1, 32, 32, 3)


def _error_bar(c: Candidate) -> tuple[float, float] | None:
    """The 95 % Wilson interval of its validation accuracy (None when n is unknown)."""
    n = c.extra_metrics.get("val_examples")
    return intervals.wilson(float(c.accuracy), int(n)) if n and c.accuracy is not None \
        else None


def _scatters(candidates: Sequence[Candidate], by_id: dict[int, Candidate],
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
    done = [c for c in candidates if c.status == "done" and c.accuracy is not None]
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
            err=_error_bar(c), mark=marks.get(c.id, "")) for c in drawn}
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


def _progress(candidates: Sequence[Candidate]) -> str:
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


def _candidate_section(study: Study, c: Candidate, by_id: dict[int, Candidate],
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
    fresh = set((c.inheritance or {}).get("new", []))
    added: set[str] = set()
    if parent is not None:
        parent_arch = arch_of(parent.id)
        diff = mutation_diff(arch, parent_arch, c.inheritance, c.metrics)
        added = {op.name for op in diff.added}
        change = diff_html(diff)
    else:
        change = '<p class="note">seed model: no parent</p>'
    metrics = ", ".join(f"{k} {_fmt(v)}" for k in ("accuracy", *costs)
                        if (v := c.accuracy if k == "accuracy" else cost_value(c, k))
                        is not None)
    metrics = ", ".join(filter(None, (metrics, start_text(c, parent))))
    up = "" if parent is None else f" from {_link(parent.id, sections, 'cand-')}"
    fronts = ", ".join(front_label(cost) for cost in on) or "none"
    shown = (f'<p class="shown-for"><b>shown as</b>: {esc(", ".join(why))}</p>'
             if why else "")
    return (f'<section class="candidate" id="cand-{c.id}"><h3>candidate {c.id} '
            f"(generation {c.generation}){up}</h3>"
            f'<p class="on-fronts"><b>on the fronts</b>: {esc(fronts)}</p>{shown}'
            f"{_versus_html(c, by_id, pairs)}"
            f"<p>{esc(metrics)} — row {_link(c.id, rows, 'c')}</p>"
            f'<h4>what the mutation changed</h4>{change}'
            f'<h4>training</h4><div class="row">'
            f"{training_curve(read_metrics(metrics_path(str(study.workdir), c)))}</div>"
            f'<h4>architecture</h4><div class="row"><div>{op_table(arch, added | fresh, made)}'
            f"</div><div>{diagram(arch, added | fresh)}</div></div></section>")


def _link(cid: int, present: set[int] | None, prefix: str) -> str:
    """`cid` as a link to `#<prefix><cid>` when the page has that target (`present` None:
    assumed), else as plain text."""
    return f'<a href="#{prefix}{cid}">{cid}</a>' if present is None or cid in present \
        else str(cid)


def _versus_html(c: Candidate, by_id: dict[int, Candidate],
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
    ("parent", lambda c: _fmt(c.parent_id)),
    ("gen", lambda c: _fmt(c.generation)),
    ("val accuracy [95%]", val_accuracy_text),
    ("test accuracy [95%]", reported_test_text),
    ("loss", lambda c: _fmt(c.loss)),
    ("flops", lambda c: _fmt(c.flops)),
    ("params", lambda c: _fmt(c.params)),
    ("im/s/core", lambda c: _fmt(c.im_sec_core_train)),
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


def render_html(study: Study, png: bytes, candidates: Sequence[Candidate], k: int = 10,
                marks: Highlights | None = None) -> str:
    """The report page: everything inline (plots as SVG), so it stands alone.

    `candidates` may come without graphs (`Study.candidates(with_graphs=False)`): the
    graphs of the candidates shown in detail and of their ancestors are read here. Above
    `SCALE_LIMIT` finished candidates the plots draw the population as density and the
    table lists only the highlighted candidates (`highlights`); report.csv has them all."""
    del png  # written beside the page (pareto.png); the SVG fronts show the same
    hl = marks if marks is not None else Highlights.of(study, candidates, k)
    by_id = {c.id: c for c in candidates}
    costs = [cost for cost, _ in costs_present(candidates, study.user_costs)]
    ranked = list(hl.fronts)
    front_ids, shown = hl.front_ids, hl.ids()
    seed, rec, pairs = hl.seed, hl.recommendation, hl.pairs
    points = {seed.id: "seed"} if seed is not None else {}
    if rec.candidate is not None and seed is not None and rec.candidate.id != seed.id:
        points[rec.candidate.id] = "recommended"
    notes = {c.id: text for c in candidates if c.accuracy is not None and seed is not None
             and c.id != seed.id and (not hl.large or c.id in shown)
             and (text := recommend.versus(c, seed, pairs))}
    listed = [c for c in candidates if c.id in shown] if hl.large else list(candidates)
    rows_at = {c.id for c in listed}
    counts = study.counts()
    count_text = ", ".join(f"{s}: {n}" for s, n in counts.items())
    order = sorted(shown, key=lambda i: (-(by_id[i].accuracy or 0.0), i))
    full = _with_graphs(study, order, by_id)
    archs: dict[int, Architecture] = {}
    sections = "".join(_candidate_section(
        study, full[i], full, _input_shape(study), costs,
        [cost for cost in ranked if any(c.id == i for c in hl.fronts[cost])], archs, pairs,
        why=hl.reasons(i), sections=shown, rows=rows_at)
        for i in order)
    ranked_text = ", ".join(front_label(cost) for cost in ranked)
    toc = " ".join(f'<a href="#cand-{i}">{i}</a>' for i in order) or "none yet"
    plots = _scatters(candidates, by_id, front_ids, ranked, points, notes,
                      shown if hl.large else None, hl.fronts, study.user_costs)
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>nas study {esc(str(study.workdir))}</title><style>{_CSS}</style></head>"
        f"<body><h1>nas study</h1><p>{esc(str(study.workdir.resolve()))}<br>"
        f"{esc(count_text)}<br>generated {esc(time.strftime('%Y-%m-%d %H:%M:%S'))}</p>"
        f'<section id="fronts"><h2>Accuracy against cost</h2>'
        f"{_recommendation_html(rec, study)}"
        f"{plots}</section>"
        f'<section id="progress"><h2>Search progress</h2>{_progress(candidates)}</section>'
        f"{best_table(study, k)}"
        f"{_table(study, listed, by_id, shown, front_ids, rows_at, hl.large, len(candidates))}"
        f'<section id="front"><h2>Candidates in detail</h2><p>those on the fronts the '
        f"search ranked parents by (<code>search.selection.costs</code>): "
        f"{esc(ranked_text)}; the best {k} by validation accuracy; the seed; the "
        f"recommended candidate. {_dashboard_note(study)}</p>"
        f"<p>{toc}</p>{sections}</section>"
        f'<p class="note">the same fronts as a static image: <a href="pareto.png">'
        f"pareto.png</a></p><script>{_SORT_JS}</script></body></html>\n"
    )  # fmt: skip


_COLUMNS = ("id", "parent", "gen", "status", "val accuracy [95%]", "test accuracy [95%]",
            "loss", "flops", "params", "im/s/core train", "im/s/core infer", "epochs",
            "attempts", "rungs", "worker", "lineage", "error")


def _table(study: Study, listed: Sequence[Candidate], by_id: dict[int, Candidate],
           shown: set[int], front_ids: set[int], rows_at: set[int], large: bool,
           total: int) -> str:
    """The sortable candidate table: every candidate, or (`large`) those shown in detail,
    with a pointer to report.csv and the dashboard for the rest."""
    rows, users = [], study.user_costs  # a column per cost of the search's own
    for c in listed:
        cells = [
            f'<td id="c{c.id}">{_link(c.id, shown, "cand-")}</td>',
            f"<td>{_link(c.parent_id, rows_at, 'c')}</td>" if c.parent_id is not None
            else "<td></td>",
            *(f"<td>{esc(_fmt(v))}</td>" for v in (
                c.generation, c.status, val_accuracy_text(c), reported_test_text(c), c.loss,
                c.flops, c.params, c.im_sec_core_train, c.im_sec_core_infer, c.epochs,
                c.attempts, *(cost_value(c, u) for u in users))),
            f'<td class="l" title="{esc(" | ".join(r["reason"] or "" for r in c.rungs))}">'
            f'{esc(rung_summary(c))}</td>',
            f'<td class="l">{esc(c.worker or "")}</td>',
            '<td class="l">' + " → ".join(_link(i, rows_at, "c")
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
                f"report.csv ({csv_link}). {_dashboard_note(study)} Highlighted rows are on "
                f"a Pareto front; click a column to sort.</p>")
    else:
        head = (f"<p>highlighted rows are on a Pareto front; click a column to sort; "
                f"{csv_link}</p>")
    return (f'<section id="candidates"><h2>Candidates</h2>{head}'
            f'<table id="candidates-table" class="sortable"><thead><tr>'
            + "".join(f"<th>{esc(h)}</th>" for h in (*_COLUMNS[:13], *users, *_COLUMNS[13:]))
            + "</tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table></section>")


def _dashboard_note(study: Study) -> str:
    """Where any other candidate's page is: the dashboard renders it on demand."""
    return (f"Any candidate's page (mutation, training, architecture): <code>nas-search "
            f"dashboard --workdir={esc(str(study.workdir))}</code>, then "
            f"<code>/candidates/&lt;id&gt;</code>.")


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
    the `k` most accurate in its best block); return the html path. `candidates`: the
    study's listing when the caller has read it already (graphs not needed); `marks`:
    `Highlights.of(study, candidates, k)` when the caller has it."""
    out = Path(out_dir) if out_dir is not None else study.workdir / "report"
    if candidates is None:  # graphs: read only for those shown in detail
        candidates = study.candidates(with_graphs=False)
    if marks is None:
        marks = Highlights.of(study, candidates, k)
    png = plot_png(study, candidates, fronts=marks.fronts)
    atomic_write_bytes(out / "pareto.png", png)
    write_csv(out / "report.csv", candidates, marks)
    return atomic_write_text(out / "report.html",
                             render_html(study, png, candidates, k, marks))
