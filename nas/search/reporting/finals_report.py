"""The finals table as the summary prints it (and the report and dashboard show it).

One row per architecture of the finals: the epochs each of its runs trained, its mean
accuracy over the repeats with its interval beside its validation accuracy in the search
(so a reader sees whether the finals trained it as far as the search did), its paired
difference with the seed with its interval, and its costs; then what the finals cost,
what the search alone would have picked where it differs, and which trained model of the
recommended architecture is taken home.
"""

from __future__ import annotations

from nas.search.reporting.cells import fmt
from nas.search.store.finals import Answer
from nas.search.strategy import intervals
from nas.search.strategy.selection import cost_value


def finals_lines(found: Answer, costs: tuple[str, ...] = ("flops", "params")) -> list[str]:
    """The summary's finals section: a table and two lines ([] without finals)."""
    table = found.table
    if table is None:
        return [f"finals: {found.note}"] if found.note else []
    recipe = table.recipe
    how = (f"{recipe.folds}-fold cross-validation over train plus validation"
           if recipe.folds > 1 else "the validation split")
    start = ("from scratch" if recipe.start == "scratch"
             else "on from their own weights, to the same total")
    lines = [f"finals ({table.repeats} repeat(s) of {recipe.epochs:g} epochs {start}, "
             f"decided on {how}; 95% intervals over repeats and examples):"]
    rows = [finals_header(costs), *finals_rows(found, costs)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  " + "  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True))
              for r in rows]
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


def finals_html(found: Answer, costs: tuple[str, ...] = ("flops", "params")) -> str:
    """The report's finals section: the summary's table and lines as HTML ("" without
    finals)."""
    from html import escape

    lines = finals_lines(found, costs)
    if not lines:
        return ""
    if found.table is None:
        return f'<section id="finals"><h2>Finals</h2><p>{escape(lines[0])}</p></section>'
    def cells(row: tuple[str, ...], tag: str) -> str:
        return "".join(f"<{tag}>{escape(c)}</{tag}>" for c in row)

    body = "".join(f"<tr>{cells(r, 'td')}</tr>" for r in finals_rows(found, costs))
    notes = "".join(f"<p>{escape(line)}</p>" for line in lines[2 + len(found.table.rows):])
    return (f'<section id="finals"><h2>Finals</h2><p>{escape(lines[0])}</p><table>'
            f"<tr>{cells(finals_header(costs), 'th')}</tr>{body}</table>{notes}</section>")

