"""Results of a study for people: Pareto plot (PNG), a self-contained HTML page, a text table.

Written to `<workdir>/report/` atomically, so a report being rewritten while someone
has it open is never half a file. Uses matplotlib's object API with the Agg canvas
(no pyplot global state, no display needed).
"""

from __future__ import annotations

import base64
import html
import io
import os
import time
from collections.abc import Sequence
from pathlib import Path

from nas.search._atomic import atomic_write_bytes, atomic_write_text
from nas.search.candidate import STATUSES, Candidate
from nas.search.study import Study

_PLOTS = (("flops", "FLOPs"), ("params", "parameters"))


def lineage(cid: int, by_id: dict[int, Candidate]) -> list[int]:
    """Ids from the oldest ancestor down to `cid` (stops at a missing or cyclic parent)."""
    chain, seen = [cid], {cid}
    parent = by_id[cid].parent_id if cid in by_id else None
    while parent is not None and parent not in seen:
        chain.append(parent)
        seen.add(parent)
        parent = by_id[parent].parent_id if parent in by_id else None
    return chain[::-1]


def plot_png(study: Study, candidates: Sequence[Candidate] | None = None) -> bytes:
    """PNG of accuracy vs FLOPs and vs params: all done candidates, front, parent->child."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cands = list(study.candidates() if candidates is None else candidates)
    by_id = {c.id: c for c in cands}
    fig = Figure(figsize=(11, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    for ax, (cost, label) in zip(fig.subplots(1, 2), _PLOTS, strict=True):
        done = [c for c in cands if c.status == "done" and getattr(c, cost) is not None]
        if not done:
            ax.text(0.5, 0.5, "no finished candidates yet", ha="center", va="center")
            ax.set_axis_off()
            continue
        for c in done:  # lineage edges under the points
            parent = by_id.get(c.parent_id) if c.parent_id is not None else None
            if parent is not None and parent.status == "done" and getattr(parent, cost):
                ax.plot(
                    [getattr(parent, cost), getattr(c, cost)],
                    [parent.accuracy, c.accuracy],
                    color="0.75", linewidth=0.7, zorder=1,
                )  # fmt: skip
        sc = ax.scatter(
            [getattr(c, cost) for c in done],
            [c.accuracy for c in done],
            c=[c.generation for c in done],
            cmap="viridis", s=18, zorder=2,
        )  # fmt: skip
        front = sorted(study.pareto_front(cost), key=lambda c: getattr(c, cost))
        ax.step(
            [getattr(c, cost) for c in front],
            [c.accuracy for c in front],
            where="post", color="tab:red", linewidth=1.2, zorder=3,
        )  # fmt: skip
        ax.scatter(
            [getattr(c, cost) for c in front],
            [c.accuracy for c in front],
            s=60, facecolors="none", edgecolors="tab:red", linewidths=1.5, zorder=4,
            label="Pareto front",
        )  # fmt: skip
        for c in front:
            ax.annotate(str(c.id), (getattr(c, cost), c.accuracy), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")  # fmt: skip
        values = [getattr(c, cost) for c in done]
        if min(values) > 0 and max(values) / min(values) > 20:
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("accuracy")
        ax.set_title(f"accuracy vs {label}")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
        fig.colorbar(sc, ax=ax, label="generation")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _fmt(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def summary(study: Study, k: int = 5) -> str:
    """Plain-text status counts and best-candidates table (for the CLI)."""
    counts = study.counts()
    lines = [
        f"study {study.workdir}: " + ", ".join(f"{s} {counts[s]}" for s in STATUSES),
    ]
    best = study.best(k)
    if not best:
        lines.append("no finished candidates yet")
        return "\n".join(lines)
    header = ("id", "parent", "gen", "accuracy", "loss", "flops", "params", "im/s/core")
    rows = [
        (c.id, c.parent_id, c.generation, c.accuracy, c.loss, c.flops, c.params,
         c.im_sec_core_train)
        for c in best
    ]  # fmt: skip
    table = [header] + [tuple(_fmt(v) for v in r) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines.append(f"best {len(best)}:")
    for r in table:
        lines.append("  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)))
    return "\n".join(lines)


_CSS = """
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:13px}
th,td{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#eee} td.l{text-align:left}
tr.done{} tr.failed td,tr.infeasible td{color:#a33} tr.pending td,tr.running td{color:#777}
tr.front{background:#fff3d6}
img{max-width:100%}
"""


def render_html(study: Study, png: bytes, candidates: Sequence[Candidate]) -> str:
    """The report page; the plot is inlined as base64 so the file stands alone."""
    by_id = {c.id: c for c in candidates}
    front_ids = {c.id for cost, _ in _PLOTS for c in study.pareto_front(cost)}
    counts = study.counts()
    esc = html.escape
    cols = ("id", "parent", "gen", "status", "accuracy", "loss", "flops", "params",
            "im/s/core train", "im/s/core infer", "epochs", "attempts", "worker",
            "lineage", "error")  # fmt: skip
    rows = []
    for c in candidates:
        cells = [
            f'<td id="c{c.id}">{c.id}</td>',
            f'<td><a href="#c{c.parent_id}">{c.parent_id}</a></td>'
            if c.parent_id is not None else "<td></td>",
            *(f"<td>{esc(_fmt(v))}</td>" for v in (
                c.generation, c.status, c.accuracy, c.loss, c.flops, c.params,
                c.im_sec_core_train, c.im_sec_core_infer, c.epochs, c.attempts)),
            f'<td class="l">{esc(c.worker or "")}</td>',
            '<td class="l">' + " → ".join(
                f'<a href="#c{i}">{i}</a>' for i in lineage(c.id, by_id)) + "</td>",
            f'<td class="l" title="{esc(c.error or "")}">{esc((c.error or "")[:120])}</td>',
        ]  # fmt: skip
        cls = f"{c.status} front" if c.id in front_ids else c.status
        rows.append(f'<tr class="{cls}">' + "".join(cells) + "</tr>")
    img = base64.b64encode(png).decode("ascii")
    count_text = ", ".join(f"{s}: {counts[s]}" for s in STATUSES)
    best = esc(summary(study, k=10))
    return (
        "<!doctype html>\n<html><head><meta charset='utf-8'>"
        f"<title>nas study {esc(str(study.workdir))}</title><style>{_CSS}</style></head>"
        f"<body><h1>nas study</h1><p>{esc(str(study.workdir.resolve()))}<br>"
        f"{esc(count_text)}<br>generated {esc(time.strftime('%Y-%m-%d %H:%M:%S'))}</p>"
        f'<img alt="Pareto front" src="data:image/png;base64,{img}">'
        f"<h2>Best</h2><pre>{best}</pre>"
        "<h2>Candidates</h2><p>highlighted rows are on a Pareto front</p><table><tr>"
        + "".join(f"<th>{h}</th>" for h in cols)
        + "</tr>\n" + "\n".join(rows) + "\n</table></body></html>\n"
    )  # fmt: skip


def write_report(study: Study, out_dir: str | os.PathLike | None = None) -> Path:
    """Write `pareto.png` and `report.html` (default `<workdir>/report/`); return the html path."""
    out = Path(out_dir) if out_dir is not None else study.workdir / "report"
    candidates = study.candidates()
    png = plot_png(study, candidates)
    atomic_write_bytes(out / "pareto.png", png)
    return atomic_write_text(out / "report.html", render_html(study, png, candidates))
