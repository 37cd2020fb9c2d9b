"""Which examples each candidate got right: the `examples` table of a study.

Why apart: paired comparisons (`nas.search.strategy.paired`) read a candidate's
per-example correctness on validation; it is stored packed, one row per candidate and
split, beside the candidate's metrics (`split_examples` takes it out of them).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from nas.io import examples
from nas.search.store.study_rows import StudyRows

# Metric names that carry per-example correctness (`nas.io.examples.to_text`) -> the split
# stored in the `examples` table.
EXAMPLE_SPLITS = {"val_correct": "validation", "test_correct": "test"}


class StudyExamples(StudyRows):
    """`Study.correctness`: the per-example results of its candidates."""

    def correctness(self, candidate_ids: Iterable[int] | None = None,
                    split: str = "validation") -> dict[int, np.ndarray]:
        """candidate id -> which examples of `split` ("validation" or "test") it got
        right, in the split's order (boolean vector); candidates without a record (an
        older study, a failed run) are absent. Read in one query."""
        if split not in EXAMPLE_SPLITS.values():
            raise ValueError(f"split: expected one of {sorted(EXAMPLE_SPLITS.values())}, "
                             f"got {split!r}")
        query, args = "SELECT candidate_id, count, bits FROM examples WHERE split=?", [split]
        ids = None if candidate_ids is None else {int(i) for i in candidate_ids}
        if ids is not None and len(ids) <= 500:  # else all rows, filtered below: SQLite
            if not ids:                          # caps the parameters of one statement
                return {}
            query += f" AND candidate_id IN ({', '.join('?' * len(ids))})"
            args += sorted(ids)
        with self._db.read() as c:
            rows = c.execute(query + " ORDER BY candidate_id", args).fetchall()
        out = {}
        for cid, count, bits in rows:
            if ids is not None and cid not in ids:
                continue
            try:
                out[int(cid)] = examples.unpack(bytes(bits), int(count))
            except ValueError as e:
                raise ValueError(f"{self.path}: candidate {cid}: {split} examples are "
                                 f"damaged ({e})") from None
        return out


def split_examples(extra: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(metrics without the per-example fields, {split: boolean vector}); a malformed
    field is a ValueError naming it."""
    rest = {k: v for k, v in extra.items() if k not in EXAMPLE_SPLITS}
    bits = {EXAMPLE_SPLITS[k]: examples.from_text(v, f"metrics.{k}")
            for k, v in extra.items() if k in EXAMPLE_SPLITS and v}
    return rest, bits


def insert_examples(c: sqlite3.Connection, candidate_id: int,
                    bits: Mapping[str, np.ndarray]) -> None:
    """Store `bits` ({split: boolean vector}) as the candidate's rows, in transaction `c`."""
    c.executemany(
        "INSERT OR REPLACE INTO examples(candidate_id, split, count, bits) VALUES (?, ?, ?, ?)",
        [(candidate_id, split, int(v.size), examples.pack(v)) for split, v in bits.items()])
