"""One candidate's section of the report (the dashboard's candidate page too): its ops
with shapes, a diagram, its mutation, its training, how it compares with the seed.

Everything here reads only what the study stores (graph JSON, inheritance) and the
candidate's own `metrics.jsonl`; a candidate whose graph cannot be read still gets a
section saying so, never a broken page.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nas.search.reporting.report_text import fmt, front_label, lineage, start_text
from nas.search.reporting.svg import esc, line_chart, svg_open
from nas.search.store.candidate import Candidate, Inheritance
from nas.search.store.study import Study
from nas.search.strategy import recommend
from nas.search.strategy.selection import cost_value
from nas.train.config import image_shape
from nas.train.perf import read_records


@dataclass
class OpRow:
    name: str
    type: str
    inputs: list[str]
    kwargs: str
    shape: str
    symbols: dict[str, str] = field(default_factory=dict)  # symbolic kwarg text -> value


@dataclass
class Architecture:
    """What the report shows of a graph: its op rows and edges, or why it cannot."""

    ops: list[OpRow] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    error: str = ""
    constants: dict[str, Any] = field(default_factory=dict)


_MUTATED = re.compile(r"^(?:gen\d+/)+(?:edge(\d+)/[a-z_0-9]+/(\d+)|(.*))$")


def readable_op(row: OpRow, origin: str = "") -> str:
    """What an op is, for people: `gen1196444851/edge0/conv/0` becomes "CONV #0 on edge 0
    (new in candidate 7, generation 2)"; `origin` says which candidate made it."""
    match = _MUTATED.match(row.name)
    if match is None:
        what = f"{row.type} {row.name}"
    elif match.group(1) is not None:
        what = f"{row.type} #{match.group(2)} on edge {match.group(1)}"
    else:
        what = f"{row.type} {match.group(3)}"
    return f"{what} ({origin})" if origin else what


def explain_symbol(text: str, constants: Mapping[str, Any]) -> str:
    """The meaning of one symbolic kwarg value (`nas.graph.symbolic`), in words."""
    from nas.graph.symbolic import ConstRef, InitRef, ShapeRef, parse

    ref = parse(text)
    factors = ""
    if isinstance(ref, (ShapeRef, ConstRef)):
        factors = (f" ÷ {ref.div}" if ref.div != 1 else "") + (
            f" × {ref.mul}" if ref.mul != 1 else "")
    if isinstance(ref, ShapeRef):
        source = (f"tensor {ref.tensor}" if ref.tensor is not None
                  else "the op's input" if ref.input_index == 0
                  else f"the op's input {ref.input_index}")
        axis = "last axis" if ref.dim == -1 else f"axis {ref.dim}"
        return f"size of {source}'s {axis}{factors}"
    if isinstance(ref, ConstRef):
        value = constants.get(ref.key, "missing")
        return f"graph constant {ref.key} (= {value}){factors}"
    if isinstance(ref, InitRef):
        args = ", ".join(f"{k}={v}" for k, v in ref.kwargs)
        return f"flax initializer {ref.fn}({args})"
    return "the batch size" if text == "B" else str(text)


def _symbols(op: Any, shapes: Any, constants: Mapping[str, Any]) -> dict[str, str]:
    """Each symbolic kwarg text of `op` -> what it resolves to for this graph's shapes."""
    from nas.graph.symbolic import InitRef, parse, resolve

    out: dict[str, str] = {}
    values = [*op.op_kwargs.values(), *op.input_kwargs.values()]
    texts = [t for v in values for t in (v if isinstance(v, (list, tuple)) else [v])
             if isinstance(t, str) and (":" in t or t == "B")]
    for text in texts:
        try:
            if isinstance(parse(text), InitRef):
                out[text] = "initializer"
                continue
            ins = [shapes.shape(n) for n in op.input_names]
            out[text] = str(resolve(text, ins, shapes.tensors, constants))
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            out[text] = "?"
    return out


def _kwargs_text(op: Any, symbols: Mapping[str, str]) -> str:
    def show(v: Any) -> str:
        if isinstance(v, (list, tuple)):
            return "(" + ", ".join(show(x) for x in v) + ")"
        if isinstance(v, str) and v in symbols and symbols[v] not in ("?", "initializer"):
            return f"{v} (={symbols[v]})"
        return str(v)

    items = {**op.op_kwargs, **op.input_kwargs}
    return ", ".join(f"{k}={show(v)}" for k, v in sorted(items.items()) if k != "name"
                     and not callable(v))


def architecture(graph_json: str, input_shape: tuple[int, ...]) -> Architecture:
    """The ops of a stored graph with each output's shape for one `input_shape` example."""
    from nas.graph.ops import canonical_name, op_of_tensor
    from nas.graph.serialize import load
    from nas.properties.tensor_shapes import graph_shapes

    try:
        graph, constants = load(graph_json)
    except (ValueError, KeyError, TypeError) as e:
        return Architecture(error=f"graph not readable: {e}")
    shapes, error = None, ""
    try:
        shapes = graph_shapes(graph, constants, {graph.input_names[0]: input_shape})
    except (ValueError, KeyError, TypeError, IndexError) as e:
        error = f"shapes unknown: {e}"
    rows = []
    for op in graph.ops:
        shape, symbols = "", {}
        if shapes is not None:
            symbols = _symbols(op, shapes, constants)
            shape = " ".join("x".join(str(d) for d in shapes.shape(n)) for n in op.output_names
                             if canonical_name(n) in shapes)
        rows.append(OpRow(op.name, op.type.name, [op_of_tensor(n) for n in op.input_names],
                          _kwargs_text(op, symbols), shape, symbols))
    return Architecture(rows, [op_of_tensor(n) for n in graph.input_names], error,
                        dict(constants))


def origins(lineage_archs: Sequence[tuple[Candidate, Architecture]]) -> dict[str, str]:
    """Op name -> "seed model" or "new in candidate N, generation G": the oldest candidate
    of the lineage (oldest first) whose graph has it."""
    out: dict[str, str] = {}
    for cand, arch in lineage_archs:
        made = ("seed model" if cand.parent_id is None
                else f"new in candidate {cand.id}, generation {cand.generation}")
        for op in arch.ops:
            out.setdefault(op.name, made)
    return out


def symbol_legend(arch: Architecture) -> str:
    """What each symbolic size of the graph means and, per op, what it resolved to."""
    seen: dict[str, set[str]] = {}
    for op in arch.ops:
        for text, value in op.symbols.items():
            seen.setdefault(text, set()).add(value)
    if not seen:
        return ""
    items = []
    for text in sorted(seen):
        values = sorted(seen[text] - {"initializer"}, key=lambda v: (len(v), v))
        resolved = f": here {', '.join(values)}" if values else ""
        items.append(f"<li><code>{esc(text)}</code> — {esc(explain_symbol(text, arch.constants))}"
                     f"{esc(resolved)}</li>")
    return ('<div class="symbols"><b>symbolic sizes</b> (resolved for this candidate; '
            "<code>S:</code> sizes depend on each op's input)<ul>" + "".join(items)
            + "</ul></div>")


def op_table(arch: Architecture, new: set[str], made: Mapping[str, str]) -> str:
    """The op list with output shapes; ops with fresh weights marked; each op named for
    people (type, place, the candidate that made it: `made`, see `origins`) above its id."""
    if not arch.ops:
        return f'<p class="note">{esc(arch.error or "no ops")}</p>'
    depth = layers(arch)
    deepest = max(depth.values(), default=0)
    kinds = {op.name: op.type for op in arch.ops}
    rows = []
    for op in arch.ops:
        cls = ' data-new="1"' if op.name in new else ""
        after = ", ".join(kinds.get(i, "graph input") for i in op.inputs)
        where = f"depth {depth[op.name]} of {deepest}, after {after or 'nothing'}"
        rows.append(f"<tr{cls}><td class='l'><span class='op-readable'>"
                    f"{esc(readable_op(op, made.get(op.name, '')))}</span><br>"
                    f"<small class='note'>{esc(where)} · {esc(op.name)}</small></td>"
                    f"<td class='l'>{esc(op.type)}</td><td class='l'>"
                    f"{esc(op.kwargs)}</td><td class='l'>{esc(op.shape)}</td></tr>")
    note = f'<p class="note">{esc(arch.error)}</p>' if arch.error else ""
    return (note + '<table class="ops"><tr><th>op (where it sits · id)</th><th>type</th>'
            "<th>kwargs</th><th>output shape</th></tr>" + "".join(rows) + "</table>"
            + symbol_legend(arch))


def layers(arch: Architecture) -> dict[str, int]:
    """Depth of each node (graph inputs at 0, every op one below its deepest input)."""
    depth = {name: 0 for name in arch.inputs}
    for op in arch.ops:
        depth[op.name] = 1 + max((depth.get(i, 0) for i in op.inputs), default=0)
    return depth


def diagram(arch: Architecture, new: set[str]) -> str:
    """An SVG of the graph, top to bottom by depth; ops with fresh weights in green."""
    if not arch.ops:
        return ""
    depth = layers(arch)
    by_layer: dict[int, list[str]] = {}
    for name in [*arch.inputs, *(op.name for op in arch.ops)]:
        by_layer.setdefault(depth[name], []).append(name)
    box_w, box_h, gap_x, gap_y = 170, 30, 16, 22
    cols = max(len(v) for v in by_layer.values())
    width = cols * (box_w + gap_x) + gap_x
    height = len(by_layer) * (box_h + gap_y) + gap_y
    pos: dict[str, tuple[float, float]] = {}
    for level, names in by_layer.items():
        offset = (width - len(names) * (box_w + gap_x) + gap_x) / 2
        for i, name in enumerate(names):
            pos[name] = (offset + i * (box_w + gap_x), gap_y + level * (box_h + gap_y))
    kinds = {op.name: op for op in arch.ops}
    parts = [svg_open("graph-diagram", width, height)
             + '<defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" '
             'markerHeight="6" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#888"/></marker>'
             "</defs>"]
    for op in arch.ops:
        x2, y2 = pos[op.name]
        for src in op.inputs:
            if src not in pos:
                continue
            x1, y1 = pos[src]
            parts.append(f'<line x1="{x1 + box_w / 2:.1f}" y1="{y1 + box_h:.1f}" '
                         f'x2="{x2 + box_w / 2:.1f}" y2="{y2:.1f}" stroke="#888" '
                         f'marker-end="url(#arrow)"/>')
    for name, (x, y) in pos.items():
        op = kinds.get(name)
        fill = "#c7e9c0" if name in new else ("#eef" if op is None else "#fff")
        label = name if op is None else op.type
        sub = "input" if op is None else (op.shape or "")
        tip = name if op is None else f"{name} ({op.type}) {op.kwargs} -> {op.shape}"
        parts.append(f'<g class="node" data-op="{esc(name)}"><title>{esc(tip)}</title>'
                     f'<rect x="{x:.1f}" y="{y:.1f}" width="{box_w}" height="{box_h}" rx="4" '
                     f'fill="{fill}" stroke="#555"/><text x="{x + box_w / 2:.1f}" '
                     f'y="{y + 12:.1f}" font-size="10" text-anchor="middle">{esc(label)}</text>'
                     f'<text x="{x + box_w / 2:.1f}" y="{y + 24:.1f}" font-size="9" '
                     f'fill="#555" text-anchor="middle">{esc(sub)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def diff_html(child: Architecture, parent: Architecture, inheritance: Inheritance,
              metrics: Mapping[str, Any] | None) -> tuple[str, set[str]]:
    """What the mutation changed, by op name, and the names of the ops it added; the fit's
    errors come from the child's metrics (its worker fitted it), else from its inheritance
    record."""
    parent_ops = {op.name: op for op in parent.ops}
    child_ops = {op.name: op for op in child.ops}
    removed = [op for name, op in parent_ops.items() if name not in child_ops]
    added = [op for name, op in child_ops.items() if name not in parent_ops]
    metrics = metrics or {}
    fit = {k: metrics[f"fit_{k}"] for k in ("mse_before", "mse_after")
           if f"fit_{k}" in metrics} or inheritance.fit or {}
    inherited, fresh = sorted(inheritance.inherited or ()), sorted(inheritance.new or ())

    def ops(rows: Sequence[OpRow]) -> str:
        if not rows:
            return "<i>none</i>"
        return "<ol>" + "".join(f"<li>{esc(readable_op(r))} <small>{esc(r.kwargs)}</small> "
                                f"→ {esc(r.shape)} <small class='note'>{esc(r.name)}</small>"
                                "</li>" for r in rows) + "</ol>"

    def names(items: Sequence[str]) -> str:
        return ", ".join(f"<code>{esc(n)}</code>" for n in items) or "<i>none</i>"

    fitted = ""
    if "mse_before" in fit and "mse_after" in fit:
        fitted = (f'<p class="fit"><b>fresh weights fitted</b> to the replaced tensors: '
                  f"relative error {fit['mse_before']:.3g} → {fit['mse_after']:.3g}</p>")
    kind = (f'<p class="kind"><b>mutation</b>: <code>{esc(inheritance.kind)}</code></p>'
            if inheritance.kind else "")
    return ('<div class="diff">' + kind
            + '<div class="removed"><b>replaced subgraph</b>' + ops(removed)
            + '</div><div class="added"><b>new subgraph</b>' + ops(added) + "</div>"
            + f'<p class="weights"><b>inherited weights</b> ({len(inherited)} ops): '
            + names(inherited) + f"<br><b>fresh weights</b> ({len(fresh)} ops): "
            + names(fresh) + "</p>" + fitted + "</div>"), {op.name for op in added}


def training_curve(records: Sequence[Mapping[str, Any]]) -> str:
    """Training loss and training-batch accuracy every `log_training_steps` steps, and eval
    accuracy at every epoch end and rung, by step, from a metrics.jsonl."""
    def series(key: str) -> list[tuple[float, float]]:
        return [(float(r["step"]), float(r[key])) for r in records if key in r and "step" in r]

    loss, train_acc, acc = (series("training_loss"), series("training_accuracy"),
                            series("accuracy"))
    if not loss and not acc:
        return '<p class="note">no training metrics recorded</p>'
    charts = []
    if loss:
        charts.append(line_chart([("training loss", "#1f77b4", loss)], "step", "loss",
                                 "training-curve", width=340, height=220, integer_x=True))
    lines = [(name, colour, pts) for name, colour, pts in (
        ("training-batch accuracy", "#ff7f0e", train_acc),
        ("eval accuracy (epoch ends, rungs)", "#2ca02c", acc)) if pts]
    if lines:
        charts.append(line_chart(lines, "step", "accuracy", "training-curve", width=340,
                                 height=220, integer_x=True))
    return "".join(charts)


def input_shape(study: Study) -> tuple[int, ...]:
    """The shape of one input example (batch 1) the study trains on; CIFAR's if unknown."""
    try:
        return (1, *image_shape(study.config["train"]))
    except (KeyError, TypeError, ValueError):
        return (1, 32, 32, 3)


def candidate_section(study: Study, c: Candidate, by_id: dict[int, Candidate],
                      shape: tuple[int, ...], costs: Sequence[str], on: Sequence[str],
                      archs: dict[int, Architecture], pairs: recommend.Comparisons,
                      why: Sequence[str] = (), sections: set[int] | None = None,
                      rows: set[int] | None = None) -> str:
    """One candidate in detail. `by_id` holds it and its ancestors with their graphs;
    `on`: the fronts it is on; `archs`: a cache of architectures by id; `why`: why the
    report shows it; `sections` / `rows`: the ids whose section / table row the page has,
    to link to (None: link to any)."""
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
        change, added = diff_html(arch, arch_of(parent.id), c.inheritance, c.metrics)
    else:
        change = '<p class="note">seed model: no parent</p>'
    metrics = ", ".join(f"{k} {fmt(v)}" for k in ("accuracy", *costs)
                        if (v := c.accuracy if k == "accuracy" else cost_value(c, k))
                        is not None)
    metrics = ", ".join(filter(None, (metrics, start_text(c, parent))))
    up = "" if parent is None else f" from {link(parent.id, sections, 'cand-')}"
    fronts = ", ".join(front_label(cost) for cost in on) or "none"
    curve = training_curve(read_records(os.path.join(
        str(study.workdir), "candidates", str(c.id), "train", "metrics.jsonl")))
    shown = (f'<p class="shown-for"><b>shown as</b>: {esc(", ".join(why))}</p>'
             if why else "")
    return (f'<section class="candidate" id="cand-{c.id}"><h3>candidate {c.id} '
            f"(generation {c.generation}){up}</h3>"
            f'<p class="on-fronts"><b>on the fronts</b>: {esc(fronts)}</p>{shown}'
            f"{versus_html(c, by_id, pairs)}"
            f"<p>{esc(metrics)} — row {link(c.id, rows, 'c')}</p>"
            f'<h4>what the mutation changed</h4>{change}'
            f'<h4>training</h4><div class="row">{curve}</div>'
            f'<h4>architecture</h4><div class="row"><div>{op_table(arch, added | fresh, made)}'
            f"</div><div>{diagram(arch, added | fresh)}</div></div></section>")


def link(cid: int, present: set[int] | None, prefix: str) -> str:
    """`cid` as a link to `#<prefix><cid>` when the page has that target (`present` None:
    assumed), else as plain text."""
    return f'<a href="#{prefix}{cid}">{cid}</a>' if present is None or cid in present \
        else str(cid)


def versus_html(c: Candidate, by_id: dict[int, Candidate], pairs: recommend.Comparisons
                ) -> str:
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
