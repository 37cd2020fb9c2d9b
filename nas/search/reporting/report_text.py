"""The study as plain text: the summary table the CLI prints, and the small texts and
values every view of a study shares (accuracies with their intervals, "vs seed", the cost
labels, a candidate's lineage).

Why apart: the summary, the HTML page, the figure and the dashboard all say these the same
way, so they live below them all.
"""

from __future__ import annotations

from collections.abc import Sequence

from nas.search.reporting.cells import fmt
from nas.search.reporting.finals_report import finals_lines
from nas.search.reporting.highlights import Highlights
from nas.search.reporting.starts import summary_lines
from nas.search.store.candidate import STATUSES, Candidate, Status
from nas.search.store.finals import answer
from nas.search.store.study import Study
from nas.search.strategy import intervals, move_mix, recommend
from nas.search.strategy.recommend import cheapest_matching_seed
from nas.search.strategy.selection import OBJECTIVES, cost_value
from nas.train.intervals import wilson

# Every cost a candidate is measured by, in the order the report shows them.
COST_LABELS = (("flops", "FLOPs"), ("params", "parameters"),
               ("im_sec_core_train", "train images/s/core"),
               ("im_sec_core_infer", "inference images/s/core"))


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
    return wilson(float(c.accuracy), int(n)) if n and c.accuracy is not None \
        else None


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
    stopped = ([c for c in candidates if c.status == Status.STOPPED] if candidates is not None
               else study.candidates(Status.STOPPED, with_graphs=False))
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
    done = ([c for c in candidates if c.status == Status.DONE] if candidates is not None
            else study.candidates(Status.DONE, with_graphs=False))  # metrics only: a large study
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
    table = [header] + [tuple(fmt(v) for v in r) for r in rows]
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
    # what the proposals cost and which kinds of move paid, below the table it explains
    lines += refusal_lines(study)
    lines += move_mix.move_lines(move_mix.move_counts(study, study.last_id(), None,
                                                      recommend.margin_pt(study.config)))
    if seed is not None and seed.id not in pairs.validation:  # an older study: Wilson
        cheap = cheapest_matching_seed(done, seed)
        if cheap is not None:
            lines.append(f"cheapest child tied with the seed on validation: candidate "
                         f"{cheap.id} at {cheap.flops / seed.flops:.3f} of the seed's FLOPs; "
                         f"on test: {versus_seed(cheap, seed) or 'not measured'}")
    found = (marks.found if marks is not None and marks.found is not None
             else answer(study, pairs))
    lines += recommend.bounds_lines(done, recommend.constraints(study.config))
    lines += finals_lines(found, ("flops", "params", *users))
    rec = marks.recommendation if marks is not None else found.recommendation
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
            if any(c.status == Status.DONE and measured(c, cost) is not None for c in candidates)]

