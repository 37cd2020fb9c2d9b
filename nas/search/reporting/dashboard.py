"""`nas-search dashboard`: the study served read-only over HTTP while the search runs.

Why: a long search is watched, not re-reported by hand. The overview page polls a JSON
summary and updates in place as candidates finish; any candidate's page (as in the static
report) is rendered when asked for; the CSV downloads. The study is opened read-only
(SQLite `mode=ro`): in WAL mode a reader never blocks the search's writes, and no route
writes. The overview is recomputed only when the database changed (`PRAGMA data_version`).

The overview answers every 2 s, at 100,000 candidates too, so its pictures of the fronts
(`LiveFronts`) read each finished row and its per-example results once, without its graph
(`population.DoneCache`), and draw again only when the number of done candidates changed;
past `SCALE_LIMIT` as density, as in the report.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
from aiohttp import web

from nas.io import examples
from nas.search.reporting.highlights import SCALE_LIMIT, best_of, ranked_costs
from nas.search.reporting.report import (
    CSS,
    accuracy_scatter,
    front_point,
    point_marks,
    to_csv,
)
from nas.search.reporting.report_candidate import candidate_section, input_shape
from nas.search.reporting.report_text import (
    COST_LABELS,
    cost_label,
    finals_html,
    fmt,
    front_label,
    lineage,
    measured,
    reported_test_text,
    val_accuracy_text,
)
from nas.search.reporting.svg import esc
from nas.search.store.candidate import FINISHED, Candidate, Status
from nas.search.store.finals import FINALS_STATE, answer
from nas.search.store.study import Study
from nas.search.strategy import recommend
from nas.search.strategy.constraints import bounds_text
from nas.search.strategy.pareto import front_rows
from nas.search.strategy.population import DoneCache
from nas.search.strategy.selection import (
    cost_columns,
    cost_value,
    higher_better,
    spreads_of,
)

POLL_MS = 2000  # how often the overview asks for news


class LiveFronts:
    """The overview's front pictures of one study, kept up to date as candidates finish.
    Owned by a long-lived `Dashboard`; not shared between threads (its caller locks)."""

    def __init__(self, study: Any, k: int = 10) -> None:
        self.study = study
        self.k = k
        self.costs = ranked_costs(study)  # search.selection.costs
        self._done = DoneCache(study)  # each finished row read once, without its graph
        self._validation: dict[int, np.ndarray] = {}  # per-example results, read once each
        self._test: dict[int, np.ndarray] = {}
        self._read: set[int] = set()  # ids whose results are read
        self._drawn: tuple[int, dict[str, Any]] | None = None  # (done count, pictures)
        self._whole: dict[int, Candidate] = {}  # rows read whole for the last pictures

    def pictures(self) -> dict[str, Any]:
        """{"plots": [{"cost", "label", "svg"}, ...], "seed": id, "recommended": id,
        "done": n, "large": bool}: one plot per ranked cost, redrawn only when a candidate
        finished."""
        self._done.refresh()
        done = self._done.done()
        if self._drawn is None or self._drawn[0] != len(done):
            new = [r for r in done if r.id not in self._read]  # with their per-example results
            if new:
                self._validation.update(_unpacked(new))
                self._test.update(self.study.correctness([r.id for r in new], "test"))
                self._read.update(r.id for r in new)
            self._drawn = (len(done), self._draw(done))
        return self._drawn[1]

    def _draw(self, done: list[Any]) -> dict[str, Any]:
        config = getattr(self.study, "config", None)
        pairs = recommend.Comparisons(self._validation, self._test)  # counted afresh
        rec = recommend.recommend_for(done, pairs, config).candidate
        seed = recommend.seed_of(done)
        marks = point_marks(seed, rec)
        ids = np.array([r.id for r in done], dtype=np.int64)
        accuracy = np.array([r.accuracy for r in done], dtype=float)
        values = cost_columns(done, self.costs)
        on = {cost: ids[front_rows(accuracy, values[cost], higher_better(cost),
                                   spreads_of(done, cost))].tolist() for cost in self.costs}
        large = len(done) > SCALE_LIMIT
        if large:  # the highlighted candidates as points, read whole (a few rows, each
            wanted = set(marks) | {c.id for c in best_of(done, self.k)}  # once: a
            wanted |= {i for front in on.values() for i in front}  # finished row is final)
            shown = {i: self._whole.get(i) or self.study.get(i) for i in sorted(wanted)}
            self._whole = shown  # bounded: only what the pictures show now
        else:
            kept = {r.id for r in done}
            shown = {c.id: c for c in self.study.candidates(Status.DONE, with_graphs=False)
                     if c.id in kept}
        top = max((c.generation for c in shown.values()), default=0)
        plots = []
        for cost in self.costs:
            label = cost_label(cost)
            points = {c.id: front_point(c, cost_value(c, cost), label, marks, top,
                                        f"/candidates/{c.id}") for c in shown.values()
                      if c.accuracy is not None and cost_value(c, cost) is not None}
            ringed = sorted((i for i in on[cost] if i in points),
                            key=lambda i: (points[i].x, i))
            ok = np.isfinite(values[cost]) & np.isfinite(accuracy)
            density = (np.column_stack([values[cost][ok], accuracy[ok]]) if large
                       else np.zeros((0, 2)))
            plots.append({"cost": cost, "label": front_label(cost), "svg": accuracy_scatter(
                points, ringed, () if large else shown.values(), label,
                f"scatter live-front scatter-{cost}", density)})
        return {"plots": plots, "done": len(done), "large": large,
                "seed": seed.id if seed is not None else None,
                "recommended": rec.id if rec is not None else None}


def _unpacked(rows: Sequence[Any]) -> dict[int, np.ndarray]:
    """id -> validation correctness of the rows that have it, unpacked a group of equal
    sizes at a time (100,000 rows: one `unpackbits`, not 100,000)."""
    by_size: dict[int, list[Any]] = {}
    for r in rows:
        if r.val_bits is not None and r.val_count:
            by_size.setdefault(int(r.val_count), []).append(r)
    out: dict[int, np.ndarray] = {}
    for n, group in by_size.items():
        width = (n + 7) // 8
        if any(len(r.val_bits) != width for r in group):  # damaged: its own error line
            out.update((r.id, examples.unpack(r.val_bits, n)) for r in group)
            continue
        packed = np.frombuffer(b"".join(r.val_bits for r in group), np.uint8)
        bits = np.unpackbits(packed.reshape(len(group), width), axis=1, count=n)
        out.update(zip((r.id for r in group), bits.astype(bool), strict=True))
    return out


def _row(c: Candidate) -> dict[str, Any]:
    """What the overview shows of one candidate."""
    return {"id": c.id, "parent": c.parent_id, "gen": c.generation, "status": c.status,
            "val": val_accuracy_text(c), "test": reported_test_text(c),
            "flops": fmt(c.flops), "params": fmt(c.params),
            "ims": fmt(c.im_sec_core_train), "error": (c.error or "")[:200]}


def overview(study: Study, k: int = 10, recent: int = 10,
             live: LiveFronts | None = None) -> dict[str, Any]:
    """Counts, progress, the fronts the search ranks by, the best k and the latest finished
    candidates: indexed reads, whose rows are read whole only for what is shown. With
    `live`, the fronts drawn too ("pictures": SVG plots, the seed's and the recommended
    candidate's ids)."""
    counts = study.counts()
    limits = recommend.constraints(study.config)  # search.constraints
    bounds = ({"bounds": bounds_text(limits), "feasible": study.feasible_count(limits)}
              if limits else {})
    users = study.user_costs  # a front of the search's own cost shows it as a column
    fronts = [{"cost": cost, "label": front_label(cost),
               "rows": [{**_row(c), "cost_value": fmt(cost_value(c, cost))}
                        if cost in users else _row(c) for c in study.pareto_front(cost)],
               "extra": [["cost_value", cost]] if cost in users else []}
              for cost in ranked_costs(study)]
    return {"workdir": str(study.workdir.resolve()), "counts": counts,
            "finished": study.finished_count(counts),
            "max_candidates": study.max_candidates,
            "best": [_row(c) for c in study.best(k)],
            "recent": [_row(c) for c in study.latest(recent, FINISHED)],
            "fronts": fronts, "k": k,
            # the finals table as escaped HTML, once the finals have started
            "finals": (finals_html(answer(study), study.user_costs)
                       if study.get_state(FINALS_STATE, None) else ""), **bounds,
            **({"pictures": live.pictures()} if live is not None else {})}


class Dashboard:
    """The read-only views of one study, with the overview cached until the file changes."""

    def __init__(self, study: Study, k: int = 10):
        self.study = study
        self.k = k
        self._lock = threading.Lock()
        self._cached: tuple[int, bytes] | None = None
        self.live = LiveFronts(study, k)  # the overview's front pictures, kept up to date

    def overview_json(self) -> bytes:
        with self._lock:
            with self.study._db.read() as c:  # changed by every other connection's commit
                version = int(c.execute("PRAGMA data_version").fetchone()[0])
            if self._cached is None or self._cached[0] != version:
                body = json.dumps(overview(self.study, self.k, live=self.live)).encode()
                self._cached = (version, body)
            return self._cached[1]

    def candidate_html(self, cid: int) -> str:
        """One candidate's page: what its mutation changed, its training, its architecture."""
        c = self.study.get(cid)  # ValueError when there is none
        by_id = {c.id: c}
        parent = c.parent_id
        while parent is not None and parent not in by_id:
            by_id[parent] = self.study.get(parent)
            parent = by_id[parent].parent_id
        on = [cost for cost in ranked_costs(self.study)
              if any(f.id == cid for f in self.study.pareto_front(cost))]
        costs = [cost for cost in (*(k for k, _ in COST_LABELS), *self.study.user_costs)
                 if measured(c, cost) is not None]
        # paired with the seed and the parent, as the summary compares them; only their
        # and its own results are read: a lineage thousands deep would read every row
        compared = {cid, lineage(cid, by_id)[0], c.parent_id} - {None}
        pairs = recommend.Comparisons.of(self.study, sorted(compared))
        section = candidate_section(self.study, c, by_id, input_shape(self.study), costs,
                                    on, {}, pairs)
        section = section.replace('href="#cand-', 'href="/candidates/').replace(
            'href="#c', 'href="/candidates/')
        chain = " → ".join(f'<a href="/candidates/{i}">{i}</a>' for i in lineage(cid, by_id))
        return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>candidate {cid}"
                f"</title><style>{CSS}</style></head><body><p><a href='/'>overview</a> · "
                f"status {esc(c.status)} · lineage {chain}</p>"
                f"{_status_line(c)}{section}</body></html>\n")

    def csv(self) -> str:
        return to_csv(self.study, self.study.candidates(with_graphs=False))


def _status_line(c: Candidate) -> str:
    if c.status == Status.DONE:
        return (f"<p>validation accuracy {esc(val_accuracy_text(c))}; test accuracy "
                f"{esc(reported_test_text(c) or '-')} (reported only)</p>")
    return f"<p>{esc(c.status)}{': ' + esc(c.error) if c.error else ''}</p>"


def make_app(dashboard: Dashboard) -> web.Application:
    """GET-only routes; aiohttp answers any other method with 405."""

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=_OVERVIEW_HTML, content_type="text/html")

    async def api_overview(request: web.Request) -> web.Response:
        body = await asyncio.to_thread(dashboard.overview_json)
        return web.Response(body=body, content_type="application/json",
                            headers={"Cache-Control": "no-store"})

    async def candidate(request: web.Request) -> web.Response:
        try:
            cid = int(request.match_info["cid"])
            html = await asyncio.to_thread(dashboard.candidate_html, cid)
        except ValueError as e:
            raise web.HTTPNotFound(text=str(e).splitlines()[0]) from None
        return web.Response(text=html, content_type="text/html")

    async def csv(request: web.Request) -> web.Response:
        text = await asyncio.to_thread(dashboard.csv)
        return web.Response(text=text, content_type="text/csv", headers={
            "Content-Disposition": 'attachment; filename="report.csv"'})

    app = web.Application()
    app.add_routes([web.get("/", index), web.get("/api/overview", api_overview),
                    web.get(r"/candidates/{cid:\d+}", candidate),
                    web.get("/report.csv", csv)])
    return app


async def serve(dashboard: Dashboard, host: str, port: int,
                started: Sequence[Any] = ()) -> None:
    """Serve until cancelled (Ctrl-C). A port that cannot be bound is one ValueError line."""
    runner = web.AppRunner(make_app(dashboard), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as e:
            raise ValueError(f"--port={port}: cannot listen on {host}:{port}: "
                             f"{e.strerror or e}") from None
        bound = runner.addresses[0][1] if runner.addresses else port
        print(f"dashboard of {dashboard.study.workdir}: http://{host}:{bound}/ (read-only; "
              f"Ctrl-C stops it)", flush=True)
        for callback in started:
            callback(bound)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


_OVERVIEW_HTML = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>nas dashboard</title><style>{CSS}
#bar {{ width: 30em; height: 1em; border: 1px solid #888; display: inline-block; }}
#bar > span {{ display: block; height: 100%; background: #2ca02c; width: 0; }}
</style></head><body>
<h1>nas study <small id="workdir"></small></h1>
<p><span id="bar"><span></span></span> <span id="progress">loading…</span></p>
<p id="counts"></p>
<p><a id="csv-link" href="/report.csv" download>download CSV</a> ·
updates every {POLL_MS / 1000:g} s without a reload · <span id="updated"></span></p>
<section id="front-pictures"><h2>Validation accuracy against each cost the search ranks by
</h2><div id="front-plots" class="plots"></div><p class="note" id="front-note">red rings and
line: the Pareto front; black: the seed (drawn on top); orange star: the recommended
candidate; colour: generation; every point links to its candidate's page<span
id="front-density"></span></p></section>
<div id="finals-box"></div>
<section id="recent"><h2>Latest finished</h2><table id="recent-table"></table></section>
<section id="best"><h2 id="best-head">Best by validation accuracy</h2>
<table id="best-table"></table></section>
<section id="fronts"><h2>Fronts the search ranks parents by</h2><div id="front-tables">
</div></section>
<script>
const COLS = [["id", "id"], ["parent", "parent"], ["gen", "gen"], ["status", "status"],
  ["val", "val accuracy [95%]"], ["test", "test accuracy [95%] (reported only)"],
  ["flops", "FLOPs"], ["params", "params"], ["ims", "train im/s/core"], ["error", "error"]];
function link(id) {{
  const a = document.createElement("a"); a.href = "/candidates/" + id; a.textContent = id;
  return a;
}}
function fill(table, rows, extra = []) {{
  table.replaceChildren();
  const cols = COLS.slice(0, -1).concat(extra, COLS.slice(-1));  // extra: a user's cost
  const head = table.createTHead().insertRow();
  for (const [, label] of cols) {{
    const th = document.createElement("th"); th.textContent = label; head.appendChild(th);
  }}
  const body = table.createTBody();
  for (const r of rows) {{
    const tr = body.insertRow(); tr.dataset.id = r.id; tr.className = r.status;
    for (const [key] of cols) {{
      const td = tr.insertCell();
      if ((key === "id" || key === "parent") && r[key] !== null) td.appendChild(link(r[key]));
      else td.textContent = r[key] === null ? "" : r[key];
    }}
  }}
}}
function drawFronts(p, k) {{
  const box = document.getElementById("front-plots");
  if (box.dataset.done === String(p.done)) return;  // no candidate finished: keep it still
  box.replaceChildren();
  for (const plot of p.plots) {{  // SVG drawn by the server, every text in it escaped
    const fig = document.createElement("figure");
    fig.className = "front"; fig.dataset.cost = plot.cost;
    const caption = document.createElement("figcaption"); caption.textContent = plot.label;
    fig.appendChild(caption); fig.insertAdjacentHTML("beforeend", plot.svg);
    box.appendChild(fig);
  }}
  box.dataset.done = p.done;
  box.dataset.seed = p.seed === null ? "" : p.seed;
  box.dataset.recommended = p.recommended === null ? "" : p.recommended;
  document.getElementById("front-density").textContent = p.large ? "; grey cells: all " +
    p.done + " finished candidates (darker: more), the points: the fronts, the best " +
    k + ", the seed and the recommended candidate" : "";
}}
async function refresh() {{
  try {{
    const response = await fetch("/api/overview", {{cache: "no-store"}});
    const o = await response.json();
    document.getElementById("workdir").textContent = o.workdir;
    const total = o.max_candidates || o.finished || 1;
    document.getElementById("progress").textContent =
      o.finished + " of " + (o.max_candidates === null ? "?" : o.max_candidates) +
      " candidates finished";
    document.querySelector("#bar > span").style.width =
      Math.min(100, 100 * o.finished / total) + "%";
    document.getElementById("counts").textContent =
      Object.entries(o.counts).map(([s, n]) => s + " " + n).join(", ") +
      (o.bounds ? "; within the bounds (" + o.bounds + "): " + o.feasible : "");
    document.getElementById("best-head").textContent =
      "Best " + o.k + " by validation accuracy (it decides; test is only reported)";
    fill(document.getElementById("recent-table"), o.recent);
    fill(document.getElementById("best-table"), o.best);
    if (o.pictures) drawFronts(o.pictures, o.k);
    // server-rendered, every text in it escaped (report_text.finals_html)
    document.getElementById("finals-box").innerHTML = o.finals || "";
    const fronts = document.getElementById("front-tables");
    fronts.replaceChildren();
    for (const f of o.fronts) {{
      const h = document.createElement("h3"); h.textContent = f.label; fronts.appendChild(h);
      const t = document.createElement("table"); t.className = "front";
      t.dataset.cost = f.cost; fronts.appendChild(t); fill(t, f.rows, f.extra);
    }}
    document.getElementById("updated").textContent =
      "updated " + new Date().toLocaleTimeString();
  }} catch (e) {{
    document.getElementById("updated").textContent = "cannot reach the dashboard: " + e;
  }}
}}
refresh();
setInterval(refresh, {POLL_MS});
</script></body></html>
"""
