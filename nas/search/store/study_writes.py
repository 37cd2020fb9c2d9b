"""Writing candidates: new ones (`add`), results (`tell`, `record_rung`), failures, and
the driver's state saved beside them.

Every write is one transaction, and a result arrives once: the first wins, and a worker
that no longer holds its claim records nothing.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Callable, Mapping
from typing import Any

from nas.search.store.candidate import (
    FINISHED,
    METRICS,
    Candidate,
    Inheritance,
    dumps,
    split_metrics,
)
from nas.search.store.study_examples import insert_examples, split_examples
from nas.search.store.study_rows import STATE_PREFIX, StudyRows, rung_cost
from nas.search.strategy.fidelity import RungResult

# decide(result, peers at the same rung, parent's accuracy) -> (promoted, reason)
Decide = Callable[[RungResult, list[RungResult], float | None], tuple[bool, str]]


class DuplicateCandidateError(ValueError):
    """A candidate with the same fingerprint is already in the study."""

    def __init__(self, fingerprint: str, existing_id: int):
        super().__init__(
            f"fingerprint: {fingerprint} is already candidate {existing_id} "
            "(pass allow_duplicate=True to add it anyway)"
        )
        self.fingerprint = fingerprint
        self.existing_id = existing_id

    def __reduce__(self) -> tuple[Any, ...]:
        """Rebuilt from its own arguments, so it crosses a process pool intact."""
        return type(self), (self.fingerprint, self.existing_id)


class StudyWrites(StudyRows):
    """`Study.add`, `tell`, `record_rung`, `fail` and `set_state`."""

    def add(
        self,
        graph_json: str,
        *,
        parent_id: int | None = None,
        generation: int | None = None,
        fingerprint: str | None = None,
        seed: int | None = None,
        spec: Any = None,
        properties: Any = None,
        inheritance: Inheritance | Mapping[str, Any] | None = None,
        blocks: Any = None,
        status: str = "pending",
        error: str | None = None,
        allow_duplicate: bool = False,
        state: Mapping[str, Any] | None = None,
        replaces: int | None = None,
    ) -> int:
        """Record a new candidate and return its id.

        `generation` defaults to the parent's + 1 (0 for a seed). A fingerprint already in
        the study (any status: a failed architecture fails again) raises
        `DuplicateCandidateError` carrying `existing_id`, unless `allow_duplicate`.
        `status` may be "infeasible" or "failed" to record a child that never reaches
        training. `state` entries are saved with `set_state` in the same transaction, so
        the driver's RNG/counters always match the candidates they produced. `blocks` is
        any JSON value (the driver stores how to rebuild the architecture from blocks).
        `inheritance`: its `Inheritance` record (or that record's JSON object).
        `replaces`: the id of the refused proposal (`Study.refusals`) this one takes the
        place of, marked in the same transaction.
        """
        check_new_candidate(graph_json, status, fingerprint, seed)
        fields = {
            "spec_json": dumps(spec, "spec"),
            "properties_json": dumps(properties, "properties"),
            "inheritance_json": dumps(Inheritance.from_json(inheritance).to_json(),
                                      "inheritance"),
            "blocks_json": dumps(blocks, "blocks"),
        }
        state_rows = self._state_rows(state)
        with self._db.write() as c:
            if parent_id is not None:
                row = c.execute("SELECT generation FROM candidates WHERE id=?", (parent_id,))
                parent = row.fetchone()
                if parent is None:
                    raise ValueError(f"parent_id: no candidate {parent_id} in {self.path}")
                if generation is None:
                    generation = parent[0] + 1
            if generation is None:
                generation = 0
            if fingerprint is not None and not allow_duplicate:
                row = c.execute(
                    "SELECT id FROM candidates WHERE fingerprint=? ORDER BY id LIMIT 1",
                    (fingerprint,),
                ).fetchone()
                if row is not None:
                    raise DuplicateCandidateError(fingerprint, row[0])
            now = time.time()
            cur = c.execute(
                "INSERT INTO candidates(parent_id, generation, status, graph_json, fingerprint,"
                " seed, spec_json, properties_json, inheritance_json, error, created_at,"
                " finished_at, blocks_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    parent_id, int(generation), status, graph_json, fingerprint, seed,
                    fields["spec_json"], fields["properties_json"], fields["inheritance_json"],
                    error, now, None if status == "pending" else now, fields["blocks_json"],
                ),
            )  # fmt: skip
            c.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", state_rows)
            if replaces is not None:
                c.execute("UPDATE refusals SET replaced_by=? WHERE id=?",
                          (int(cur.lastrowid), int(replaces)))
            return int(cur.lastrowid)

    def tell(
        self, candidate_id: int, metrics: Any, *, checkpoint_path: str | None = None,
        worker: str | None = None, rung_epochs: float | None = None,
    ) -> Candidate:
        """Record a finished training: status done, with its metrics.

        `metrics` is a mapping or dataclass with at least `accuracy`; see
        `candidate.split_metrics`. The first result wins: telling a finished candidate (or,
        with `worker`, one that worker no longer holds) changes nothing and logs why.
        With `rung_epochs` (a multi-fidelity child at its last rung) the result is also
        recorded as that rung's, decision "final".
        """
        known, extra = split_metrics(metrics)
        extra, bits = split_examples(extra)
        cols = ", ".join(f"{k}=?" for k in METRICS)
        values = [known.get(k) for k in METRICS]
        with self._db.write() as c:
            if not self._may_record(c, candidate_id, "result", worker):
                return self._get(c, candidate_id)
            insert_examples(c, candidate_id, bits)
            if rung_epochs is not None:
                rung = c.execute("SELECT rung FROM candidates WHERE id=?",
                                 (candidate_id,)).fetchone()[0]
                self._insert_rung(c, candidate_id, rung, rung_epochs, known, extra,
                                  "final", None, worker)
            c.execute(
                f"UPDATE candidates SET status='done', {cols}, metrics_json=?, checkpoint_path=?,"
                " error=NULL, finished_at=?, lease_until=NULL WHERE id=?",
                (*values, dumps(extra, "metrics"), checkpoint_path, time.time(), candidate_id),
            )
            return self._get(c, candidate_id)

    def record_rung(
        self, candidate_id: int, rung: int, epochs: float, metrics: Any, decide: Decide, *,
        checkpoint_path: str | None = None, worker: str | None = None,
        cost: str = "flops",
    ) -> Candidate:
        """Record a multi-fidelity child's result at `rung` (not its last) and decide, in
        the same transaction, whether it goes on: `decide(result, peers, parent_accuracy)`
        sees every result recorded earlier at this rung (same epochs). Promoted: pending
        again at rung + 1 (its claim and attempt count reset; it resumes from its own
        checkpoint). Not promoted: status `stopped`, with these metrics and
        `checkpoint_path`. Like `tell`, a no-op (logged) on a finished candidate, one
        `worker` no longer holds, or one not at `rung`.
        """
        known, extra = split_metrics(metrics)
        extra, bits = split_examples(extra)
        with self._db.write() as c:
            if not self._may_record(c, candidate_id, "rung result", worker):
                return self._get(c, candidate_id)
            at, parent_id = c.execute("SELECT rung, parent_id FROM candidates WHERE id=?",
                                      (candidate_id,)).fetchone()
            if at != rung:
                logging.info("%s: candidate %d is at rung %d; a result for rung %d is "
                             "ignored", self.path, candidate_id, at, rung)
                return self._get(c, candidate_id)
            peers = [RungResult(int(i), float(a), None if v is None else float(v))
                     for i, a, v in c.execute(
                         f"SELECT candidate_id, accuracy, {rung_cost(cost)} FROM rungs "
                         "WHERE rung=? AND epochs=? AND candidate_id!=? ORDER BY "
                         "candidate_id", (rung, float(epochs), candidate_id))]
            parent_acc = None
            if parent_id is not None:
                parent_acc = c.execute("SELECT accuracy FROM candidates WHERE id=?",
                                       (parent_id,)).fetchone()[0]
            me = RungResult(candidate_id, known["accuracy"], known.get(cost))
            promoted, reason = decide(me, peers, parent_acc)
            decision = "promoted" if promoted else "stopped"
            self._insert_rung(c, candidate_id, rung, epochs, known, extra, decision, reason,
                              worker)
            if promoted:
                c.execute(
                    "UPDATE candidates SET status='pending', rung=?, worker=NULL,"
                    " started_at=NULL, lease_until=NULL, attempts=0 WHERE id=?",
                    (rung + 1, candidate_id))
            else:  # its metrics are this rung's, epochs included
                insert_examples(c, candidate_id, bits)
                known = {**known, "epochs": float(epochs)}
                cols = ", ".join(f"{k}=?" for k in METRICS)
                c.execute(
                    f"UPDATE candidates SET status='stopped', {cols}, metrics_json=?,"
                    " checkpoint_path=?, error=NULL, finished_at=?, lease_until=NULL"
                    " WHERE id=?",
                    (*[known.get(k) for k in METRICS], dumps(extra, "metrics"),
                     checkpoint_path, time.time(), candidate_id))
            return self._get(c, candidate_id)

    def fail(
        self, candidate_id: int, error: str | BaseException, *, infeasible: bool = False,
        worker: str | None = None,
    ) -> Candidate:
        """Record that a candidate failed (or is infeasible: it can never run, e.g. OOM).

        Failed candidates are never retried automatically. Like `tell`, a no-op (logged)
        on a finished candidate or one that `worker` no longer holds.
        """
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}"
        status = "infeasible" if infeasible else "failed"
        with self._db.write() as c:
            if not self._may_record(c, candidate_id, "failure", worker):
                return self._get(c, candidate_id)
            c.execute(
                "UPDATE candidates SET status=?, error=?, finished_at=?, lease_until=NULL"
                " WHERE id=?",
                (status, str(error), time.time(), candidate_id),
            )
            return self._get(c, candidate_id)

    def set_state(self, key: str, value: Any) -> None:
        """Save a JSON value for the driver (RNG state, generation counter, ...)."""
        rows = self._state_rows({key: value})
        with self._db.write() as c:
            c.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", rows)

    def _may_record(self, c: sqlite3.Connection, candidate_id: int, what: str,
                    worker: str | None) -> bool:
        """Whether a result may be written now; logs why not (never raises for races)."""
        row = c.execute("SELECT status, worker FROM candidates WHERE id=?",
                        (candidate_id,)).fetchone()
        if row is None:
            raise ValueError(f"candidate_id: no candidate {candidate_id!r} in {self.path}")
        status, holder = row
        if status in FINISHED:
            logging.info("%s: candidate %d is already %s; %s of %s ignored", self.path,
                         candidate_id, status, what, worker or "this process")
            return False
        if worker is not None and (status != "running" or holder != worker):
            logging.info("%s: %s no longer holds candidate %d (it is %s, held by %s); its %s "
                         "is ignored", self.path, worker, candidate_id, status, holder, what)
            return False
        return True

    @staticmethod
    def _insert_rung(c: sqlite3.Connection, candidate_id: int, rung: int, epochs: float,
                     known: Mapping[str, float], extra: Mapping[str, Any], decision: str,
                     reason: str | None, worker: str | None) -> None:
        steps = extra.get("steps")
        c.execute(
            "INSERT OR REPLACE INTO rungs(candidate_id, rung, epochs, steps, accuracy, loss,"
            " flops, params, decision, reason, worker, recorded_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (candidate_id, int(rung), float(epochs),
             int(steps) if isinstance(steps, int | float) else None, known["accuracy"],
             known.get("loss"), known.get("flops"), known.get("params"), decision, reason,
             worker, time.time()))

    @staticmethod
    def _state_rows(state: Mapping[str, Any] | None) -> list[tuple[str, str]]:
        rows = []
        for key, value in (state or {}).items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"state: keys must be non-empty strings, got {key!r}")
            rows.append((STATE_PREFIX + key, dumps(value, f"state.{key}") or "null"))
        return rows


def check_new_candidate(graph_json: Any, status: str, fingerprint: Any, seed: Any) -> None:
    """`Study.add`'s checks of its arguments, before anything is written: each bad one is
    a ValueError naming it."""
    if not isinstance(graph_json, str):
        raise ValueError(f"graph_json: expected JSON text, got {type(graph_json).__name__}")
    try:
        json.loads(graph_json)
    except ValueError as e:
        raise ValueError(f"graph_json: not valid JSON ({e})") from e
    except RecursionError:
        raise ValueError("graph_json: nested too deeply to be a graph") from None
    if status not in ("pending", "failed", "infeasible"):
        raise ValueError(
            f"status: new candidates are pending/failed/infeasible, not {status!r}"
        )
    if fingerprint is not None and not isinstance(fingerprint, str):
        kind = type(fingerprint).__name__
        raise ValueError(f"fingerprint: expected a hex string, got {kind}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"seed: expected an integer, got {seed!r}")
