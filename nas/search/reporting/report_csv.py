"""report.csv: every candidate of a study as one row, written as it is read.

Why: the page shows only the candidates a reader acts on (`highlights`); the CSV keeps
every candidate, for a spreadsheet or pandas. It is written row by row from a metrics-only
listing (no graphs), so its cost grows with the rows and not with their architectures.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import attrgetter
from pathlib import Path

from nas.atomic import atomic_write_with
from nas.search.reporting.highlights import Highlights
from nas.search.store.candidate import Candidate, Status
from nas.search.strategy import paired, recommend
from nas.search.strategy.selection import cost_value, spread_name

# accuracy: on the validation split (decides); test_accuracy: reported only
CSV_COLUMNS = ("id", "parent_id", "generation", "status", "accuracy", "val_examples",
               "test_accuracy", "test_examples", "loss", "flops",
               "params", "im_sec_core_train", "im_sec_core_infer", "epochs", "attempts",
               "on_front", "rungs", "fingerprint", "worker", "error",
               # against the seed on the same examples (nas.search.strategy.paired), in accuracy
               # points; empty without per-example results; recommended: 1 for the
               # summary's recommendation
               "val_vs_seed_pt", "val_vs_seed_low_pt", "val_vs_seed_high_pt", "val_vs_seed",
               "test_vs_seed_pt", "test_vs_seed_low_pt", "test_vs_seed_high_pt",
               "test_vs_seed", "recommended",
               # a child's validation accuracy with the weights it started from (inherited,
               # fitted), before fine-tuning, next to its parent's; its hparams (search.hparams)
               "parent_accuracy", "start_accuracy", "hparams")
# then a column per cost of the search's own (`search.costs`), named as the cost
_EXTRA = ("val_examples", "test_accuracy", "test_examples")


def rung_summary(c: Candidate) -> str:
    """Its rung results, e.g. "0.25ep 0.912 promoted; 1ep 0.950 final"."""
    return "; ".join(f"{r['epochs']:g}ep {r['accuracy']:.4g} {r['decision']}" for r in c.rungs)


def paired_columns(c: Candidate, seed: Candidate | None,
                   versus: dict[str, dict[int, paired.Paired]]) -> dict[str, object]:
    """The CSV's `*_vs_seed*` cells of one candidate (`versus`: per split,
    `Comparisons.against(seed, split)`)."""
    out: dict[str, object] = {}
    for split, prefix in (("validation", "val"), ("test", "test")):
        found = versus[split].get(c.id) if seed is not None and c.id != seed.id else None
        if found is not None:
            out |= {f"{prefix}_vs_seed_pt": round(100 * found.difference, 4),
                    f"{prefix}_vs_seed_low_pt": round(100 * found.low, 4),
                    f"{prefix}_vs_seed_high_pt": round(100 * found.high, 4),
                    f"{prefix}_vs_seed": found.decision}
    return out


def hparams_text(hparams: object) -> str | None:
    """A candidate's `search.hparams` values as "lr=0.001 wd=0.0001" (None: none)."""
    if not isinstance(hparams, dict) or not hparams:
        return None
    return " ".join(f"{k}={float(v):.4g}" for k, v in sorted(hparams.items()))


_HEAD = attrgetter("id", "parent_id", "generation", "status", "accuracy")
_COSTS = attrgetter("loss", "flops", "params", "im_sec_core_train", "im_sec_core_infer",
                    "epochs", "attempts")
_PAIRED = tuple(k for k in CSV_COLUMNS if "_vs_seed" in k)


def csv_rows(candidates: Iterable[Candidate], front: set[int], seed: Candidate | None,
             pairs: recommend.Comparisons, chosen: Candidate | None,
             user_costs: Sequence[str] = (), bounds: Mapping[str, float] | None = None
             ) -> Iterator[list]:
    """The header, then one row per candidate (`on_front`: 1 if its id is in `front`), in
    `CSV_COLUMNS` order, then a column per name of `user_costs` (the search's own costs,
    and `latency_ms`, each with its spread where measured), then with `bounds`
    (`search.constraints`) `feasible`: 1 within every bound, 0 over one, empty unless
    done; None as an empty cell."""
    candidates = candidates if isinstance(candidates, Sequence) else list(candidates)
    spreads = [spread_name(u) for u in user_costs
               if any(spread_name(u) in c.extra_metrics for c in candidates)]
    yield [*CSV_COLUMNS, *user_costs, *spreads, *(["feasible"] if bounds else [])]
    within = recommend.feasible_ids(candidates, bounds) if bounds else set()
    chosen_id = chosen.id if chosen is not None else None
    versus = {split: pairs.against(seed, split) for split in ("validation", "test")}
    accuracies: dict[int, float | None] = {}  # parents are listed before their children
    for c in candidates:
        extra = c.extra_metrics
        accuracies[c.id] = c.accuracy
        cells = paired_columns(c, seed, versus)
        row = [*_HEAD(c), *(extra.get(k) for k in _EXTRA), *_COSTS(c), int(c.id in front),
               rung_summary(c), c.fingerprint, c.worker, c.error,
               *(cells.get(k) for k in _PAIRED), int(c.id == chosen_id),
               accuracies.get(c.parent_id) if c.parent_id is not None else None,
               extra.get("start_accuracy"), hparams_text(extra.get("hparams")),
               *(cost_value(c, u) for u in user_costs), *(cost_value(c, u) for u in spreads),
               *([int(c.id in within) if c.status == Status.DONE else None] if bounds else [])]
        yield ["" if v is None else v for v in row]


def to_csv(study: object, candidates: Sequence[Candidate] | None = None) -> str:
    """Every candidate as one CSV row (`on_front`: 1 if on a front the search ranked by)."""
    cands = list(study.candidates(with_graphs=False) if candidates is None  # type: ignore[attr-defined]
                 else candidates)
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(_rows(cands, Highlights.of(study, cands, 0)))
    return buf.getvalue()


def _rows(candidates: Iterable[Candidate], marks: Highlights) -> Iterator[list]:
    return csv_rows(candidates, marks.front_ids, marks.seed, marks.pairs, marks.recommended,
                    marks.user_costs, marks.recommendation.bounds)


def write_csv(path: str | os.PathLike, candidates: Iterable[Candidate], marks: Highlights
              ) -> Path:
    """`to_csv`'s text streamed to `path` atomically, with the fronts, the seed and the
    recommendation already found (`marks`)."""
    rows = _rows(candidates, marks)

    def write(f: io.BufferedIOBase) -> None:
        text = io.TextIOWrapper(f, encoding="utf-8", newline="", write_through=False)
        csv.writer(text, lineterminator="\n").writerows(rows)
        text.flush()
        text.detach()  # the caller closes (and fsyncs) the file

    return atomic_write_with(path, write)
