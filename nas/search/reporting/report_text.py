"""The study as plain text: the summary the CLI prints, the finals table, and the small
texts every view of a study shares (table cells, accuracies with their intervals, "vs
seed", the cost labels, a candidate's lineage, where children started), so that the
summary, the page, the figure and the dashboard say them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nas.search.reporting.highlights import Highlights, best_of
from nas.search.reporting.svg import esc
from nas.search.store.candidate import STATUSES, Candidate, Status
from nas.search.store.finals import Answer, answer
from nas.search.store.study import Study
from nas.search.strategy import move_mix, recommend
from nas.search.strategy.recommend import cheapest_matching_seed
from nas.search.strategy.selection import OBJECTIVES, cost_value
from nas.stats import intervals
from nas.stats.intervals import wilson

# Every cost a candidate is measured by, in the order the report shows them.
COST_LABELS = (("flops", "FLOPs"), ("params", "parameters"),
               ("im_sec_core_train", "train images/s/core"),
               ("im_sec_core_infer", "inference images/s/core"))


def fmt(value: object) -> str:
    """A table cell: empty for None, 4 significant digits for a float."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


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


def error_bar(c: Candidate) -> tuple[float, float] | None:
    """The 95 % Wilson interval of its validation accuracy (None when n is unknown)."""
    n = c.extra_metrics.get("val_examples")
    return wilson(float(c.accuracy), int(n)) if n and c.accuracy is not None else None


def aligned(rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Text rows as right-aligned columns two spaces apart."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True))
            for r in rows]


def summary(study: Study, k: int = 5, *, candidates: Sequence[Candidate] | None = None,
            marks: Highlights | None = None) -> str:
    """Plain-text status counts and best-candidates table (for the CLI). `candidates` (a
    listing without graphs) and `marks` (its highlights): when the caller has them, so
    that a report and its summary find each once."""
    counts = study.counts()
    lines = [f"study {study.workdir}: " + ", ".join(f"{s} {counts[s]}" for s in STATUSES)]
    rungs = study.rung_counts()
    if rungs:  # multi-fidelity: results per rung, and the children stopped at one
        lines.append("rungs: " + ", ".join(f"{e:g} epochs {n} result(s)"
                                          for e, n in rungs.values()))

    def listed(status: str) -> list[Candidate]:  # metrics only: a large study
        return ([c for c in candidates if c.status == status] if candidates is not None
                else study.candidates(status, with_graphs=False))

    best = study.best(k) if candidates is None else best_of(candidates, k)
    stopped = listed(Status.STOPPED)
    if stopped:
        lines.append(f"stopped at a rung ({len(stopped)}): " + ", ".join(
            f"{c.id} ({fmt(c.epochs)} epochs, accuracy {fmt(c.accuracy)})"
            for c in stopped[-k:]) + (" ..." if len(stopped) > k else ""))
    if not best:
        lines.append("no finished candidates yet")
        return "\n".join(lines)
    users = study.user_costs  # the search's own costs, a column each
    header = ("id", "parent", "gen", "val accuracy [95%]", "test accuracy [95%]",
              "val vs seed", "test vs seed", "val loss", "flops", "params", "im/s/core",
              *users)
    done = listed(Status.DONE)
    seed = next((c for c in done if c.parent_id is None), None)
    pairs = marks.pairs if marks is not None else recommend.Comparisons.of(study)
    # by id: `best` rows may be read whole, `done` without graphs, so the same candidate's
    # two records need not be equal, and the seed among the best would be printed twice
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
    only = f" (only {len(best)} done)" if len(best) < k else ""
    last = "the last row is the seed; " if len(shown) > len(best) else ""
    lines.append(f"best {k} by validation accuracy{only} (it decides; the test split is only "
                 f"reported; {last}[95% Wilson interval] n=examples; vs seed: difference in "
                 f"accuracy points [95% paired score interval, Tango's] on the same examples, "
                 f"where both have per-example results):")
    lines += aligned([header, *(tuple(fmt(v) for v in r) for r in rows)])
    margin = recommend.margin_pt(study.config)
    lines += [line for line in (seed_line(seed), children_start_line(done, margin)) if line]
    lines += hparams_lines(shown)
    # what the proposals cost and which kinds of move paid, below the table it explains
    lines += refusal_lines(study)
    lines += move_mix.move_lines(move_mix.move_counts(study, study.last_id(), None, margin))
    if seed is not None and seed.id not in pairs.validation:  # no per-example results: Wilson
        cheap = cheapest_matching_seed(done, seed)
        if cheap is not None:
            lines.append(f"cheapest child tied with the seed on validation: candidate "
                         f"{cheap.id} at {cheap.flops / seed.flops:.3f} of the seed's FLOPs; "
                         f"on test: {versus_seed(cheap, seed) or 'not measured'}")
    found = marks.found if marks is not None else answer(study, pairs)
    lines += recommend.bounds_lines(done, recommend.constraints(study.config))
    lines += finals_lines(found, users)
    rec = found.recommendation
    home = (rec.candidate is not None and found.take_home is not None
            and found.take_home.candidate.id == rec.candidate.id)
    lines += recommend.recommendation_lines(rec, study.workdir, take_home=home)
    return "\n".join(lines)


def refusal_lines(study: Study) -> list[str]:
    """The refused proposals, by move kind: children that could not start near their
    parent (not candidates: others were proposed in their place), and moves that raised,
    with the last one's cause; none when nothing was refused."""
    counts = study.refusal_counts()
    lines = []
    for stage, label in (("start", "proposals refused at their start"),
                         ("move", "proposals whose move raised")):
        kinds = counts.get(stage) or {}
        if not kinds:
            continue
        ranked = sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
        line = (f"{label}: {sum(kinds.values())} (kinds: "
                + ", ".join(f"{k} {n}" for k, n in ranked) + ")")
        if stage == "move":
            line += f"; the last: {study.refusals('move')[-1].cause}"
        lines.append(line)
    return lines


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
    """On test: the paired difference and its decision where `pairs` holds both candidates'
    examples, else "within noise" where the two intervals overlap, else "better" /
    "worse"; "seed" for the seed; empty without test accuracies."""
    if seed is None or c.id == seed.id:
        return "seed" if seed is not None else ""
    if pairs is not None and pairs.pair(c, seed, "test") is not None:
        return recommend.versus(c, seed, pairs, "test")
    mine, theirs = c.extra_metrics, seed.extra_metrics
    if mine.get("test_accuracy") is None or theirs.get("test_accuracy") is None:
        return ""
    return intervals.compare((mine["test_accuracy"], mine.get("test_examples")),
                             (theirs["test_accuracy"], theirs.get("test_examples")))


def cost_label(cost: str) -> str:
    """ "FLOPs" for flops; a user's cost by its name."""
    return dict(COST_LABELS).get(cost, cost)


def front_label(cost: str) -> str:
    """ "accuracy vs FLOPs": the objectives of one front."""
    return f"accuracy vs {cost_label(cost)}"


def costs_present(candidates: Sequence[Candidate], user_costs: Sequence[str] = ()
                  ) -> list[tuple[str, str]]:
    """The (cost, label) pairs some done candidate has a value for: the built-in costs,
    then the search's own (`user_costs`, labelled by name)."""
    pairs = [*COST_LABELS, *((u, u) for u in user_costs)]
    return [(cost, label) for cost, label in pairs
            if any(c.status == Status.DONE and measured(c, cost) is not None for c in candidates)]


def seed_line(seed: Any) -> str | None:
    """How long the seed trained, e.g. "the seed trained 9 epochs in 3 rounds ..."
    (None when it trained one run: `search.seed_max_epochs` 0)."""
    metrics = seed.extra_metrics if seed is not None else {}
    if "rounds" not in metrics:
        return None
    finals = ", ".join(f"{a:.3f}" for a in metrics.get("round_accuracies", ()))
    curve = metrics.get("curve") or ()
    return (f"the seed trained {seed.epochs if seed.epochs is not None else '?'} epochs in "
            f"{metrics['rounds']} round(s), validation accuracy at their ends {finals} "
            f"(best: round {int(metrics.get('best_round', 0)) + 1}; "
            f"{len(curve)} evaluations); it stopped: {metrics.get('rounds_stopped', '?')}")


def start_text(child: Any, parent: Any) -> str:
    """"started at 0.951 (parent 0.983)": a child's validation accuracy with its starting
    weights (inherited, fitted) before fine-tuning, next to its parent's; "" if unknown."""
    start = child.extra_metrics.get("start_accuracy")
    if start is None or parent is None or child.parent_id is None:
        return ""
    of = f" (parent {parent.accuracy:.3f})" if parent.accuracy is not None else ""
    return f"started at {float(start):.3f}{of}"


def children_start_line(done: Sequence[Any], margin_pt: float = 2.0) -> str | None:
    """How many children started (before fine-tuning) and ended within `margin_pt`
    points of their parent, among those with a recorded start."""
    by_id = {c.id: c for c in done}
    pairs = [(c, by_id[c.parent_id]) for c in done
             if c.parent_id in by_id and "start_accuracy" in c.extra_metrics
             and by_id[c.parent_id].accuracy is not None and c.accuracy is not None]
    if not pairs:
        return None
    margin = margin_pt / 100
    started = sum(float(c.extra_metrics["start_accuracy"]) >= p.accuracy - margin
                  for c, p in pairs)
    ended = sum(c.accuracy >= p.accuracy - margin for c, p in pairs)
    return (f"children within {margin_pt:g} pt of their parent on validation: {started} of "
            f"{len(pairs)} before fine-tuning, {ended} of {len(pairs)} after")


def hparams_lines(shown: Sequence[Any]) -> list[str]:
    """One line per shown candidate that carries `search.hparams` values."""
    out = [f"  candidate {c.id}: {text}" for c in shown
           if (text := hparams_text(c.extra_metrics.get("hparams")))]
    return ["training hyperparameters (search.hparams):", *out] if out else []


def hparams_text(hparams: object) -> str | None:
    """A candidate's `search.hparams` values as "lr=0.001 wd=0.0001" (None: none)."""
    if not isinstance(hparams, dict) or not hparams:
        return None
    return " ".join(f"{k}={float(v):.4g}" for k, v in sorted(hparams.items()))


def finals_lines(found: Answer, user_costs: Sequence[str] = ()) -> list[str]:
    """The summary's finals section: a table and two lines ([] without finals)."""
    table, costs = found.table, ("flops", "params", *user_costs)
    if table is None:
        return [f"finals: {found.note}"] if found.note else []
    recipe = table.recipe
    how = (f"{recipe.folds}-fold cross-validation over train plus validation"
           if recipe.folds > 1 else "the validation split")
    start = ("from scratch" if recipe.start == "scratch"
             else "on from their own weights, to the same total")
    lines = [f"finals ({table.repeats} repeat(s) of {recipe.epochs:g} epochs {start}, "
             f"decided on {how}; 95% intervals over repeats and examples):"]
    lines += aligned([finals_header(costs), *finals_rows(found, costs)], "  ")
    wall = f", {table.wall_s:.0f} s" if table.wall_s else ""
    lines.append(f"finals cost: {table.trainings} trainings{wall}"
                 + (f"; failed: {'; '.join(table.failed)}" if table.failed else ""))
    pick, chosen = found.search_pick.candidate, found.recommendation.candidate
    if pick is not None and chosen is not None and pick.id != chosen.id:
        lines.append(f"the search alone would have picked candidate {pick.id}; the finals "
                     f"pick candidate {chosen.id}")
    lines += take_home_lines(found)
    return lines


def take_home_lines(found: Answer) -> list[str]:
    """Which trained model of the recommended architecture is taken home, and why; its
    test accuracy (reported only) beside the search's seed's."""
    kept = found.take_home
    if kept is None:
        return []
    lines = [f"taken home for candidate {kept.candidate.id}: {kept.reason}"]
    tested = kept.metrics.get("test_accuracy")
    if tested is None:
        return lines
    text = f"  test (reported only): {intervals.text(tested, kept.metrics.get('test_examples'))}"
    seed = found.recommendation.seed
    if seed is not None and "test_accuracy" in seed.metrics:
        text += (f"; the search's seed, candidate {seed.id}: "
                 + intervals.text(seed.metrics["test_accuracy"],
                                  seed.metrics.get("test_examples")))
    if found.recommendation.test is not None:
        text += f"; {found.recommendation.test.text()}"
    return [*lines, text]


def finals_header(costs: tuple[str, ...]) -> tuple[str, ...]:
    return ("id", "epochs", "accuracy [95%]", "in the search", "vs seed [95%]", *costs)


def finals_rows(found: Answer, costs: tuple[str, ...]) -> list[tuple[str, ...]]:
    """One row of text cells per architecture of the finals table."""
    rows = []
    for row in found.table.rows if found.table is not None else ():
        acc = row.accuracy
        versus = ("seed" if row.vs_seed is None else
                  f"{100 * row.vs_seed.difference:+.2f} pt [{100 * row.vs_seed.low:+.2f}, "
                  f"{100 * row.vs_seed.high:+.2f}] {row.vs_seed.decision}")
        searched = row.candidate.accuracy
        rows.append((str(row.candidate.id),
                     "?" if row.epochs is None else f"{row.epochs:g}",
                     f"{acc.difference:.4f} [{acc.low:.4f}, {acc.high:.4f}]",
                     "-" if searched is None else f"{searched:.4f}", versus,
                     *(fmt(cost_value(row.candidate, c)) for c in costs)))
    return rows


def finals_html(found: Answer, user_costs: Sequence[str] = ()) -> str:
    """The report's finals section: the summary's table and lines as HTML ("" without
    finals)."""
    lines, costs = finals_lines(found, user_costs), ("flops", "params", *user_costs)
    if not lines:
        return ""
    if found.table is None:
        return f'<section id="finals"><h2>Finals</h2><p>{esc(lines[0])}</p></section>'
    def cells(row: tuple[str, ...], tag: str) -> str:
        return "".join(f"<{tag}>{esc(c)}</{tag}>" for c in row)

    body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in finals_rows(found, costs))
    notes = "".join(f"<p>{esc(line)}</p>" for line in lines[2 + len(found.table.rows):])
    return (f'<section id="finals"><h2>Finals</h2><p>{esc(lines[0])}</p><table>'
            f"<tr>{cells(finals_header(costs), 'th')}</tr>{body}</table>{notes}</section>")

