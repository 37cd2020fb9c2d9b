"""`pareto.png`: accuracy against each plotted cost as a matplotlib figure (the Agg
canvas, no pyplot global state, no display needed).

Why apart: only the PNG needs matplotlib, which is imported when a figure is drawn; the
page's plots are SVG (`report_html`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from nas.search.reporting.highlights import SCALE_LIMIT, front_of, ranked_costs
from nas.search.reporting.report_text import COST_LABELS, error_bar
from nas.search.store.candidate import Candidate, Status
from nas.search.store.study import Study
from nas.search.strategy.selection import cost_value

_PLOTS = (("flops", "FLOPs"), ("params", "parameters"))


def plot_costs(study: Study) -> list[tuple[str, str]]:
    """The (cost, label) pairs pareto.png plots: FLOPs and parameters, and each other cost
    the search ranked parents by (`search.selection.costs`, a user's own included)."""
    labels = dict(COST_LABELS)
    return [*_PLOTS, *((cost, labels.get(cost, cost)) for cost in ranked_costs(study)
                       if cost not in dict(_PLOTS))]


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
        _lineage_png(ax, done, by_id, cost)
        sc = ax.scatter(values, [c.accuracy for c in done],
                        c=[c.generation for c in done], cmap="viridis", s=18, zorder=2)
        shown = done
    bars = [(c, error_bar(c)) for c in shown]
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
        return
    bar = fig.colorbar(sc, ax=ax, label="generation")
    bar.locator = MaxNLocator(integer=True)  # generations are whole numbers
    bar.update_ticks()


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
        if parent is not None and parent.status == Status.DONE and cost_value(parent, cost):
            ax.plot([cost_value(parent, cost), cost_value(c, cost)],  # type: ignore[attr-defined]
                    [parent.accuracy, c.accuracy], color="0.75", linewidth=0.7, zorder=1)

