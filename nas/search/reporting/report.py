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

The page is assembled here from `report_html`'s parts; the text summary and the shared
texts are `report_text`, the PNG `report_figure`, the CSV `report_csv`. Their public
names are importable from here too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from nas.atomic import atomic_write_bytes, atomic_write_text
from nas.search.reporting.finals_report import finals_html
from nas.search.reporting.highlights import (  # noqa: F401 - public here too
    SCALE_LIMIT,
    Highlights,
    front_of,
    ranked_costs,
)
from nas.search.reporting.progress import progress_series  # noqa: F401 - public here too
from nas.search.reporting.report_candidate import Architecture
from nas.search.reporting.report_csv import (  # noqa: F401 - public here too
    CSV_COLUMNS,
    paired_columns,
    rung_summary,
    to_csv,
    write_csv,
)
from nas.search.reporting.report_figure import (  # noqa: F401 - public here too
    pareto_figure,
    plot_costs,
    plot_png,
)
from nas.search.reporting.report_html import (  # noqa: F401 - public here too
    BEST_COLUMNS,
    CSS,
    SORT_JS,
    best_table,
    candidate_section,
    dashboard_note,
    input_shape,
    progress,
    scatters,
    table,
)
from nas.search.reporting.report_text import (  # noqa: F401 - public here too
    COST_LABELS,
    costs_present,
    fmt,
    front_label,
    lineage,
    measured,
    reported_test_text,
    summary,
    val_accuracy_text,
    versus_seed,
)
from nas.search.reporting.svg import esc
from nas.search.store.candidate import Candidate
from nas.search.store.finals import answer
from nas.search.store.study import Study
from nas.search.strategy import recommend
from nas.search.strategy.recommend import cheapest_matching_seed  # noqa: F401 - public here too


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
    finals_costs = ("flops", "params", *study.user_costs)
    points = {seed.id: "seed"} if seed is not None else {}
    if rec.candidate is not None and seed is not None and rec.candidate.id != seed.id:
        points[rec.candidate.id] = "recommended"
    notes = {c.id: text for c in candidates if c.accuracy is not None and seed is not None
             and c.id != seed.id and (not hl.large or c.id in shown)
             and (text := recommend.versus(c, seed, pairs))}
    listed = [c for c in candidates if c.id in shown] if hl.large else list(candidates)
    rows_at = {c.id for c in listed}
    counts = study.counts()
    count_text = "; ".join([", ".join(f"{s}: {n}" for s, n in counts.items()),
                            *recommend.bounds_lines(candidates, rec.bounds)])
    order = sorted(shown, key=lambda i: (-(by_id[i].accuracy or 0.0), i))
    full = _with_graphs(study, order, by_id)
    archs: dict[int, Architecture] = {}
    sections = "".join(candidate_section(
        study, full[i], full, input_shape(study), costs,
        [cost for cost in ranked if any(c.id == i for c in hl.fronts[cost])], archs, pairs,
        why=hl.reasons(i), sections=shown, rows=rows_at)
        for i in order)
    ranked_text = ", ".join(front_label(cost) for cost in ranked)
    toc = " ".join(f'<a href="#cand-{i}">{i}</a>' for i in order) or "none yet"
    plots = scatters(candidates, by_id, front_ids, ranked, points, notes,
                      shown if hl.large else None, hl.fronts, study.user_costs)
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>nas study {esc(str(study.workdir))}</title><style>{CSS}</style></head>"
        f"<body><h1>nas study</h1><p>{esc(str(study.workdir.resolve()))}<br>"
        f"{esc(count_text)}<br>generated {esc(time.strftime('%Y-%m-%d %H:%M:%S'))}</p>"
        f'<section id="fronts"><h2>Accuracy against cost</h2>'
        f"{_recommendation_html(rec, study)}"
        f"{plots}</section>{finals_html(hl.found or answer(study, pairs), finals_costs)}"
        f'<section id="progress"><h2>Search progress</h2>{progress(candidates)}</section>'
        f"{best_table(study, k)}"
        f"{table(study, listed, by_id, shown, front_ids, rows_at, hl.large, len(candidates))}"
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

