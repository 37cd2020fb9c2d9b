"""Where candidates started: the seed's rounds, each child's accuracy before fine-tuning
next to its parent's, and the training hyperparameters a search evolves.

Why a module of its own: the summary and the candidate pages say the same things, from
the metrics a worker stored (`rounds`, `curve`, `start_accuracy`, `hparams`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nas.search.reporting.report_csv import hparams_text
from nas.search.strategy import recommend


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
    out = []
    for c in shown:
        text = hparams_text(c.extra_metrics.get("hparams"))
        if text:
            out.append(f"  candidate {c.id}: {text}")
    return ["training hyperparameters (search.hparams):", *out] if out else []


def summary_lines(done: Sequence[Any], shown: Sequence[Any], seed: Any,
                  config: Mapping[str, Any] | None = None) -> list[str]:
    """The summary's lines about starts: the seed's rounds, children's starts, hparams."""
    lines = [line for line in (seed_line(seed), children_start_line(
        done, recommend.margin_pt(config or {}))) if line]
    return lines + hparams_lines(shown)
