"""Small inline-SVG charts for the study report (no JavaScript, no external files).

Why our own: the report must be one self-contained page whose every point is a link to
the candidate it stands for and carries a tooltip; matplotlib's PNGs can do neither.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_PALETTE = ("#440154", "#3b528b", "#21918c", "#5ec962", "#b5de2b", "#fde725")


def esc(text: object) -> str:
    """`text` as HTML text or attribute value."""
    return html.escape(str(text), quote=True)


def generation_colour(generation: int, top: int) -> str:
    """A viridis-like colour for an integer generation out of `top`."""
    if top <= 0:
        return _PALETTE[0]
    return _PALETTE[round(min(max(generation / top, 0.0), 1.0) * (len(_PALETTE) - 1))]


def nice_ticks(lo: float, hi: float) -> list[float]:
    """About 5 round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    out, value = [], first
    while value <= hi + step * 1e-9:
        out.append(round(value, 12))
        value += step
    return out


def fmt_number(value: float) -> str:
    """1.2e6 -> '1.2M': short axis labels."""
    for limit, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


@dataclass
class Point:
    x: float
    y: float
    label: str  # tooltip text
    href: str = ""  # link target, e.g. "#cand-3"
    colour: str = "#3b528b"
    ring: bool = False  # drawn with a red ring (on the Pareto front)
    ident: str = ""  # data-id attribute
    err: tuple[float, float] | None = None  # (low, high) of y: drawn as an error bar
    mark: str = ""  # "seed": drawn last, on top, labelled; "recommended": a labelled star


class Axes:
    """Maps data to pixels inside a margin; log scale on x when asked."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float], width: int, height: int,
                 log_x: bool = False, margin: tuple[int, int, int, int] = (12, 14, 42, 56)):
        self.width, self.height, self.log_x = width, height, log_x
        self.top, self.right, self.bottom, self.left = margin
        x = np.asarray(xs, dtype=float).reshape(-1)  # arrays: a density plot's
        y = np.asarray(ys, dtype=float).reshape(-1)  # population is 100,000 points
        if self.log_x:
            x = np.where(x > 0, np.log10(np.where(x > 0, x, 1.0)), x)
        if not x.size:
            x = np.array([0.0, 1.0])
        if not y.size:
            y = np.array([0.0, 1.0])
        self.x0, self.x1 = _padded(float(x.min()), float(x.max()))
        self.y0, self.y1 = _padded(float(y.min()), float(y.max()))

    def px(self, x: float) -> float:
        span = self.width - self.left - self.right
        tx = math.log10(x) if self.log_x and x > 0 else x
        return self.left + (tx - self.x0) / (self.x1 - self.x0) * span

    def py(self, y: float) -> float:
        span = self.height - self.top - self.bottom
        return self.height - self.bottom - (y - self.y0) / (self.y1 - self.y0) * span

    def frame(self, xlabel: str, ylabel: str, integer_x: bool = False) -> list[str]:
        out = [f'<rect x="{self.left}" y="{self.top}" width="{self.width - self.left - self.right}"'
               f' height="{self.height - self.top - self.bottom}" fill="none" stroke="#999"/>']
        if self.log_x:
            xticks = [10.0 ** e for e in range(math.ceil(self.x0), math.floor(self.x1) + 1)]
        else:
            xticks = nice_ticks(self.x0, self.x1)
            if integer_x:
                xticks = sorted({round(t) for t in xticks if abs(t - round(t)) < 1e-9})
        base = self.height - self.bottom
        for t in xticks:
            x = self.px(t)
            text = str(int(t)) if integer_x else fmt_number(t)
            out.append(f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 4}" '
                       f'stroke="#999"/><text x="{x:.1f}" y="{base + 16}" font-size="10" '
                       f'text-anchor="middle">{esc(text)}</text>')
        for t in nice_ticks(self.y0, self.y1):
            y = self.py(t)
            out.append(f'<line x1="{self.left - 4}" y1="{y:.1f}" x2="{self.left}" y2="{y:.1f}" '
                       f'stroke="#999"/><text x="{self.left - 6}" y="{y + 3:.1f}" font-size="10"'
                       f' text-anchor="end">{esc(fmt_number(t))}</text>')
        out.append(f'<text x="{(self.left + self.width - self.right) / 2:.0f}" '
                   f'y="{self.height - 8}" font-size="11" text-anchor="middle">{esc(xlabel)}'
                   f"</text>")
        out.append(f'<text transform="translate(13,{(self.top + base) / 2:.0f}) rotate(-90)" '
                   f'font-size="11" text-anchor="middle">{esc(ylabel)}</text>')
        return out


def _padded(lo: float, hi: float) -> tuple[float, float]:
    pad = (hi - lo) * 0.06 if hi - lo >= 1e-12 else abs(lo) * 0.05 or 1.0
    return lo - pad, hi + pad


def scatter(points: Sequence[Point], xlabel: str, ylabel: str, css_class: str,
            front: Sequence[Point] = (), width: int = 460, height: int = 320,
            edges: Sequence[tuple[Point, Point]] = (),
            density: Sequence[tuple[float, float]] | np.ndarray = ()) -> str:
    """A scatter plot; each point a link with a tooltip; the front joined by a red step.
    `density` (x, y pairs, or an (n, 2) array) is drawn under the points as a binned 2-D
    histogram: how a large population lies, at a size that does not grow with it."""
    dens = np.asarray(density, dtype=float).reshape(-1, 2)  # arrays: 100,000 pairs
    xs = np.concatenate([np.array([p.x for p in points], dtype=float), dens[:, 0]])
    log_x = bool(xs.size) and xs.min() > 0 and xs.max() / xs.min() > 20
    ys = np.concatenate([np.array([p.y for p in points] + [v for p in points if p.err
                                                            for v in p.err], dtype=float),
                         dens[:, 1]])
    ax = Axes(xs, ys, width, height, log_x=bool(log_x))
    parts = [svg_open(css_class, width, height)]
    parts += ax.frame(xlabel + (" (log)" if log_x else ""), ylabel)
    if len(dens):
        parts.append(density_bins(ax, dens))
    for a, b in edges:
        parts.append(f'<line x1="{ax.px(a.x):.1f}" y1="{ax.py(a.y):.1f}" x2="{ax.px(b.x):.1f}" '
                     f'y2="{ax.py(b.y):.1f}" stroke="#ccc" stroke-width="0.8"/>')
    if len(front) > 1:
        pts = []
        for a, b in zip(front, front[1:], strict=False):
            pts += [(ax.px(a.x), ax.py(a.y)), (ax.px(b.x), ax.py(a.y))]
        pts.append((ax.px(front[-1].x), ax.py(front[-1].y)))
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#d62728" '
                     f'stroke-width="1.2"/>')
    for p in points:  # error bars under every point
        if p.err is not None:
            x, lo, hi = ax.px(p.x), ax.py(p.err[0]), ax.py(p.err[1])
            parts.append(f'<path class="errorbar" data-id="{esc(p.ident)}" d="M{x:.1f},'
                         f'{lo:.1f}V{hi:.1f}M{x - 3:.1f},{lo:.1f}h6M{x - 3:.1f},{hi:.1f}h6" '
                         f'stroke="#888" stroke-width="1" fill="none"/>')
    # the seed last, so no child's point hides it
    for p in sorted(points, key=lambda p: p.mark == "seed"):
        x, y = ax.px(p.x), ax.py(p.y)
        mark = f' data-mark="{esc(p.mark)}"' if p.mark else ""
        circle = (f'<circle class="point" data-id="{esc(p.ident)}"{mark} cx="{x:.1f}" '
                  f'cy="{y:.1f}" r="{6 if p.ring or p.mark == "seed" else 4}" '
                  f'fill="{"#000" if p.mark == "seed" else p.colour}" '
                  + ('stroke="#d62728" stroke-width="2"' if p.ring else 'stroke="none"')
                  + f"><title>{esc(p.label)}</title></circle>")
        parts.append(f'<a href="{esc(p.href)}">{circle}</a>' if p.href else circle)
        if p.mark == "recommended":
            star = " ".join(
                f"{x + r * math.sin(k * math.pi / 5):.1f},{y - r * math.cos(k * math.pi / 5):.1f}"
                for k, r in zip(range(10), [10, 4] * 5, strict=True))
            parts.append(f'<polygon class="mark recommended" data-id="{esc(p.ident)}" '
                         f'points="{star}" fill="none" stroke="#ff7f0e" stroke-width="1.5">'
                         f"<title>recommended: {esc(p.label)}</title></polygon>"
                         + label(ax, x, y, (9, 14), f"recommended {p.ident}", "mark-label",
                                 'fill="#ff7f0e"'))
        elif p.mark == "seed":
            parts.append(label(ax, x, y, (8, 14), f"seed {p.ident}", "mark-label seed-label",
                               'font-weight="bold"'))
        elif p.ring:
            parts.append(label(ax, x, y, (7, -5), p.ident, "ring-label"))
    return _close(parts, width, height,
                  "" if points or len(dens) else "no finished candidates yet")


def label(ax: Axes, x: float, y: float, offset: tuple[float, float], text: str,
          css_class: str, style: str = "", size: int = 10) -> str:
    """A `size`-px label `offset` px (right, down: baseline) from the point at pixel (x, y),
    mirrored where it would leave the plot area. Its width is estimated at 0.62 em per
    character (no layout engine here), enough for sans-serif digits and letters."""
    dx, dy = offset
    anchor = "start"
    if x + dx + 0.62 * size * len(text) > ax.width - ax.right:
        dx, anchor = -dx, "end"
    if dy > 0 and y + dy > ax.height - ax.bottom - 2:  # below the bottom: above the point
        dy = -(dy - size)
    elif dy < 0 and y + dy - size < ax.top + 2:  # above the top: below the point
        dy = -dy + size
    return (f'<text class="{esc(css_class)}" x="{x + dx:.1f}" y="{y + dy:.1f}" '
            f'font-size="{size}" text-anchor="{anchor}"'
            + (f" {style}" if style else "") + f">{esc(text)}</text>")


DENSITY_BINS = (48, 32)  # columns, rows of a density plot's grid


def density_bins(ax: Axes, data: Sequence[tuple[float, float]]) -> str:
    """A grey cell per occupied bin of the plot area, darker the more (x, y) pairs fall
    in it (log scale, so a lone candidate stays visible), its count as its tooltip."""
    nx, ny = DENSITY_BINS
    left, right = ax.left, ax.width - ax.right
    top, bottom = ax.top, ax.height - ax.bottom
    cw, ch = (right - left) / nx, (bottom - top) / ny
    xy = np.asarray(data, dtype=float).reshape(-1, 2)
    x = np.log10(xy[:, 0], where=xy[:, 0] > 0, out=xy[:, 0].copy()) if ax.log_x else xy[:, 0]
    px = left + (x - ax.x0) / (ax.x1 - ax.x0) * (right - left)
    py = bottom - (xy[:, 1] - ax.y0) / (ax.y1 - ax.y0) * (bottom - top)
    i = np.clip(((px - left) / cw).astype(int), 0, nx - 1)
    j = np.clip(((py - top) / ch).astype(int), 0, ny - 1)
    cells_at, counts = np.unique(i * ny + j, return_counts=True)
    most = int(counts.max(initial=1))
    cells = []
    for cell, n in zip(cells_at.tolist(), counts.tolist(), strict=True):
        shade = 0.15 + 0.85 * (math.log1p(n) / math.log1p(most) if most > 1 else 1.0)
        cells.append(f'<rect x="{left + cell // ny * cw:.1f}" y="{top + cell % ny * ch:.1f}" '
                     f'width="{cw:.1f}" height="{ch:.1f}" fill-opacity="{shade:.2f}">'
                     f"<title>{n} candidate{'s' if n != 1 else ''}</title></rect>")
    return (f'<g class="density" data-n="{len(data)}" fill="#7a7a7a">' + "".join(cells)
            + "</g>")


def line_chart(series: Sequence[tuple[str, str, Sequence[tuple[float, float]]]],
               xlabel: str, ylabel: str, css_class: str, width: int = 460,
               height: int = 260, integer_x: bool = False, steps: bool = False) -> str:
    """Lines (name, colour, [(x, y), ...]) on shared axes; the legend sits above the plot
    area, so it never covers a point."""
    xs = [x for _, _, pts in series for x, _ in pts]
    ys = [y for _, _, pts in series for _, y in pts]
    legend_h = 14 * len(series)
    ax = Axes(xs, ys, width, height + legend_h, margin=(12 + legend_h, 14, 42, 56))
    parts = [svg_open(css_class, width, height + legend_h),
             *ax.frame(xlabel, ylabel, integer_x=integer_x)]
    for i, (name, colour, pts) in enumerate(series):
        coords = []
        for j, (x, y) in enumerate(pts):
            if steps and j:
                coords.append((ax.px(x), ax.py(pts[j - 1][1])))
            coords.append((ax.px(x), ax.py(y)))
        if len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" '
                         f'stroke-width="1.5"><title>{esc(name)}</title></polyline>')
        for x, y in pts if len(pts) <= 60 else ():
            parts.append(f'<circle class="datum" cx="{ax.px(x):.1f}" cy="{ax.py(y):.1f}" '
                         f'r="2.5" fill="{colour}"><title>{esc(name)}: {esc(fmt_number(x))}, '
                         f"{esc(f'{y:.4g}')}</title></circle>")
        ly = 12 + 14 * i
        parts.append(f'<g class="legend"><line x1="{ax.left}" y1="{ly - 4}" '
                     f'x2="{ax.left + 14}" y2="{ly - 4}" stroke="{colour}" '
                     f'stroke-width="2"/><text x="{ax.left + 18}" y="{ly}" '
                     f'font-size="10">{esc(name)}</text></g>')
    return _close(parts, width, height + legend_h, "" if xs else "no data")


def svg_open(css_class: str, width: int, height: int) -> str:
    """An `<svg>` start tag of `width` x `height` px."""
    return (f'<svg class="{esc(css_class)}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{width}" height="{height}" viewBox="0 0 {width} {height}">')


def _close(parts: list[str], width: int, height: int, empty: str) -> str:
    """The finished SVG; `empty`, when given, is centred where the data would be."""
    if empty:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">'
                     f"{esc(empty)}</text>")
    parts.append("</svg>")
    return "".join(parts)
