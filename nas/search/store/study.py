"""`Study`: the durable, multi-process store of a search, one SQLite file per workdir.

Every state change is one SQLite transaction in WAL mode, so a process killed at any
moment leaves a consistent file that the next run resumes from; two processes never claim
the same candidate. WAL needs all processes on one host (or a filesystem with working
shared memory and locks, which NFS is not).

    study = Study.open(workdir, config)          # create or resume
    cid = study.add(graph_json, parent_id=p, fingerprint=fp, seed=s)
    cand = study.claim(worker="host:123")        # None when nothing is pending
    study.tell(cand.id, {"accuracy": .93, "flops": 1.2e6, ...})   # or study.fail(...)

A result arrives once: the first wins, and a worker that no longer holds its claim
records nothing. A claim is a lease of `lease_s` seconds that its worker renews
(`LeaseKeeper`) while it trains; one that expires, or whose worker process on this host
has exited, is re-queued by the next claim, and after `max_attempts` claims the
candidate fails instead.

A refused proposal is not a candidate. A child refused at its start in a worker leaves
the candidates table in the transaction that records its refusal, so it takes none of
`search.max_candidates`, and the driver proposes another child in its place
(`open_refusal`, `add(replaces=...)`); a slot refused `search.max_refusals` times fails
with its last cause, so a search that cannot start any child ends.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import ml_collections
import numpy as np
from absl import logging as absl_logging

from nas.io import examples
from nas.search.store import database
from nas.search.store.candidate import (
    COLUMNS,
    FINISHED,
    METRICS,
    RUNG_COLUMNS,
    STATUSES,
    Candidate,
    Inheritance,
    Status,
    candidate_from_row,
    dumps,
    split_metrics,
    status_of,
)
from nas.search.store.database import STATE_PREFIX, Database, Key, StudyNotFoundError
from nas.search.strategy import hparams as hparams_lib
from nas.search.strategy.fidelity import RungResult
from nas.search.strategy.pareto import front_rows
from nas.search.strategy.population import Finished
from nas.search.strategy.selection import (
    MEASURED_COSTS,
    check_cost,
    higher_better,
    spread_name,
)
from nas.search.strategy.settings import (
    SearchSettings,
    measured_costs,
    stored_setting,
)

__all__ = ["DB_NAME", "EXAMPLE_SPLITS", "Candidate", "Decide", "DuplicateCandidateError",
           "LeaseKeeper", "Refusal", "Study", "StudyNotFoundError", "default_worker",
           "split_examples"]

DB_NAME = "study.db"

# Keys of the search's state (`set_state`), read back by a resumed driver, the workers
# and the reports. A module's own state (`finals.FINALS_STATE`) is named in that module.
PROPOSALS = "proposals"  # the next proposal's RNG stream and init folder
STOPPED = "stopped"  # the driver ended its run: external workers stop claiming
MAX_CANDIDATES = "max_candidates"  # of the driver's last run, which workers count to
# A study with several seeds: how many it starts from, and how many of them are in it
# (a study without them has one seed, in once it has a candidate).
SEEDS = "seeds"
SEEDS_ADDED = "seeds_added"

SELECT = f"SELECT {', '.join(COLUMNS)} FROM candidates"
LARGE = {"graph_json": "''", "spec_json": "NULL", "properties_json": "NULL",
         "inheritance_json": "NULL", "blocks_json": "NULL"}
SELECT_METRICS = (f"SELECT {', '.join(LARGE.get(c, c) for c in COLUMNS)} "
                  f"FROM candidates")
SELECT_RUNGS = f"SELECT {', '.join(RUNG_COLUMNS)} FROM rungs"
PUT_META = "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)"
# a claimed candidate back to pending, unclaimed
UNCLAIM = f"status='{Status.PENDING}', worker=NULL, started_at=NULL, lease_until=NULL"

# Metric names that carry per-example correctness (`nas.io.examples.to_text`) -> the split
# stored in the `examples` table.
EXAMPLE_SPLITS = {"val_correct": "validation", "test_correct": "test"}

# decide(result, peers at the same rung, parent's accuracy) -> (promoted, reason)
Decide = Callable[[RungResult, list[RungResult], float | None], tuple[bool, str]]

# Where a proposal was refused: "start": its child could not start near its parent (in a
# worker, or found by the driver before the child was added); "move": the move raised.
STAGES = ("start", "move")


@dataclasses.dataclass(frozen=True)
class Refusal:
    """One refused proposal. `candidate_id`: the id its child had (None when it was refused
    before it was added); `slot_refusals`: how many proposals its slot has had refused,
    this one included; `replaced_by`: the candidate proposed in its place."""

    id: int
    proposal: int | None
    candidate_id: int | None
    parent_id: int | None
    kind: str | None
    stage: str
    cause: str
    slot_refusals: int
    replaced_by: int | None
    worker: str | None
    recorded_at: float


SELECT_REFUSALS = f"SELECT {', '.join(f.name for f in dataclasses.fields(Refusal))} FROM refusals"


class DuplicateCandidateError(ValueError):
    """A candidate with the same fingerprint is already in the study."""

    def __init__(self, fingerprint: str, existing_id: int):
        super().__init__(f"fingerprint: {fingerprint} is already candidate {existing_id} "
                         "(pass allow_duplicate=True to add it anyway)")
        self.fingerprint = fingerprint
        self.existing_id = existing_id

    def __reduce__(self) -> tuple[Any, ...]:
        """Rebuilt from its own arguments, so it crosses a process pool intact."""
        return type(self), (self.fingerprint, self.existing_id)


class Study:
    """A search's candidates and state in `<workdir>/study.db`. Use create/load/open."""

    def __init__(self, workdir: str | os.PathLike, *, _token: object = None,
                 read_only: bool = False):
        if _token is not _PRIVATE:
            raise TypeError("use Study.create, Study.load or Study.open")
        self.workdir = Path(workdir)
        self.path = self.workdir / DB_NAME
        self._db = Database(self.path, read_only=read_only)
        self.config: dict[str, Any] = {}
        self._counted = True  # the file keeps its status counts (`database.STATUS_COUNTS`)

    # ----------------------------------------------------------------- opening

    @classmethod
    def create(cls, workdir: str | os.PathLike, config: Any = None) -> Study:
        """Create a new study, storing `config` (a dict or a ConfigDict) as JSON;
        ValueError if one already exists in `workdir`."""
        plain = _plain_config(config)
        study = cls(workdir, _token=_PRIVATE)
        if not database.is_empty(study.path):
            raise ValueError(f"{study.path}: a study already exists (use Study.load or Study.open)")
        study.workdir.mkdir(parents=True, exist_ok=True)
        conn = study._db.connect(create=True)
        conn.execute("PRAGMA journal_mode=WAL")
        with study._db.write() as c:
            if c.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
                raise ValueError(f"{study.path}: a study already exists (created concurrently)")
            for statement in database.statements(database.SCHEMA):
                c.execute(statement)  # not executescript: it would commit early
            database.add_status_counts(c)
            meta = {Key.FORMAT: database.FORMAT, Key.SCHEMA_VERSION: str(database.SCHEMA_VERSION),
                    Key.CONFIG: dumps(plain, "config"), Key.CREATED_AT: repr(time.time())}
            c.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", meta.items())
        study.config = plain
        return study

    @classmethod
    def load(cls, workdir: str | os.PathLike, read_only: bool = False) -> Study:
        """Open an existing study; ValueError if missing, corrupt, foreign or too new.

        `read_only` opens it for a reader beside a running search (the dashboard): SQLite
        refuses every write, and in WAL mode its reads never block the search's writes."""
        study = cls(workdir, _token=_PRIVATE, read_only=read_only)
        if not study.path.is_file():
            raise StudyNotFoundError(f"{study.path}: no study here")
        conn = study._db.connect()
        try:
            database.check_study(conn, study.path)
            study._counted = database.ensure_status_counts(conn, study.path)
            row = conn.execute("SELECT value FROM meta WHERE key=?", (Key.CONFIG,)).fetchone()
            try:
                study.config = json.loads(row[0]) if row else {}
            except ValueError as e:
                raise ValueError(f"{study.path}: meta 'config' holds damaged JSON ({e})") from None
        except (ValueError, sqlite3.DatabaseError) as e:
            study.close()
            if isinstance(e, ValueError):
                raise
            raise ValueError(f"{study.path}: study database is damaged: {e}") from e
        return study

    @classmethod
    def open(cls, workdir: str | os.PathLike, config: Any = None) -> Study:
        """Load the study in `workdir` if there is one (its stored config wins), else create."""
        path = Path(workdir) / DB_NAME
        if path.is_file():
            try:
                study = cls.load(workdir)
            except StudyNotFoundError:  # empty: its creation was interrupted; create it now
                pass
            else:
                if config is not None and not study.holds_config(config):
                    logging.warning("%s: resuming with the stored config; the given one "
                                    "differs", path)
                return study
        try:
            return cls.create(workdir, config)
        except ValueError:
            if path.is_file():  # another process created it first
                return cls.load(workdir)
            raise

    def holds_config(self, config: Any) -> bool:
        """Whether `config` (a dict or a ConfigDict) is the one the study stores."""
        return _plain_config(config) == self.config

    def replace_config(self, config: Any) -> bool:
        """Store `config` in place of the study's own while it has no candidates (nothing
        was decided with the old config); False once it has some."""
        plain = _plain_config(config)
        with self._db.write() as c:
            if c.execute("SELECT 1 FROM candidates LIMIT 1").fetchone():
                return False
            c.execute("UPDATE meta SET value=? WHERE key=?", (dumps(plain, "config"), Key.CONFIG))
        self.config = plain
        return True

    def close(self) -> None:
        """Close the connection (the study stays usable: the next call reconnects)."""
        self._db.close()

    def __enter__(self) -> Study:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Study({str(self.workdir)!r})"

    # -------------------------------------------------------------- the config

    @property
    def user_costs(self) -> tuple[str, ...]:
        """The names of the costs measured in the worker (`settings.measured_costs`: the
        keys of `search.costs`, and `latency_ms` where it is timed): numbers in each done
        candidate's metrics, lower is better, ranked like the built-in costs."""
        search = self.config.get("search") if isinstance(self.config, Mapping) else None
        return tuple(k for k in measured_costs(search) if k.isidentifier())

    @property
    def max_refusals(self) -> int:
        """`search.max_refusals` of the study's config (its default where it has none),
        checked as the settings declare it."""
        return int(stored_setting(self.config, "max_refusals"))

    @property
    def max_candidates(self) -> int:
        """The budget the driver last ran to (`MAX_CANDIDATES`), else the stored config's
        `search.max_candidates`: what workers, reruns and the dashboard count to."""
        value = self.get_state(MAX_CANDIDATES)
        return int(stored_setting(self.config, "max_candidates") if value is None else value)

    # ----------------------------------------------------------------- writing

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
        status: Status | str = Status.PENDING,
        error: str | None = None,
        allow_duplicate: bool = False,
        state: Mapping[str, Any] | None = None,
        replaces: int | None = None,
    ) -> int:
        """Record a new candidate and return its id.

        `generation` defaults to the parent's + 1 (0 for a seed). A fingerprint already in
        the study (any status: a failed architecture fails again) raises
        `DuplicateCandidateError`, unless `allow_duplicate`. `status` may be "infeasible"
        or "failed" for a child that never reaches training. `state` entries are saved as
        `set_state` does, and `replaces` (a refused proposal's id this one takes the place
        of) is marked, in the same transaction, so the driver's counters always match the
        candidates they produced. `blocks`: any JSON value.
        """
        check_new_candidate(graph_json, status, fingerprint, seed)
        encoded = (dumps(spec, "spec"), dumps(properties, "properties"),
                   dumps(Inheritance.from_json(inheritance).to_json(), "inheritance"),
                   dumps(blocks, "blocks"))
        state_rows = self._state_rows(state)
        with self._db.write() as c:
            if parent_id is not None:
                parent = c.execute("SELECT generation FROM candidates WHERE id=?",
                                   (parent_id,)).fetchone()
                if parent is None:
                    raise ValueError(f"parent_id: no candidate {parent_id} in {self.path}")
                if generation is None:
                    generation = parent[0] + 1
            generation = 0 if generation is None else generation
            if fingerprint is not None and not allow_duplicate:
                row = c.execute("SELECT id FROM candidates WHERE fingerprint=? ORDER BY id"
                                " LIMIT 1", (fingerprint,)).fetchone()
                if row is not None:
                    raise DuplicateCandidateError(fingerprint, row[0])
            now = time.time()
            candidate_id = int(c.execute(
                "INSERT INTO candidates(parent_id, generation, status, graph_json, fingerprint,"
                " seed, spec_json, properties_json, inheritance_json, blocks_json, error,"
                " created_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (parent_id, int(generation), status, graph_json, fingerprint, seed, *encoded,
                 error, now, None if status == Status.PENDING else now)).lastrowid)
            c.executemany(PUT_META, state_rows)
            if replaces is not None:
                c.execute("UPDATE refusals SET replaced_by=? WHERE id=?",
                          (candidate_id, int(replaces)))
            return candidate_id

    def tell(
        self, candidate_id: int, metrics: Any, *, checkpoint_path: str | None = None,
        worker: str | None = None, rung_epochs: float | None = None,
    ) -> Candidate:
        """Record a finished training: status done, with its metrics (as
        `candidate.split_metrics` reads them). The first result wins: telling a finished
        candidate (or, with `worker`, one that worker no longer holds) changes nothing and
        logs why. With `rung_epochs` (a multi-fidelity child at its last rung) the result
        is also that rung's, decision "final"."""
        known, extra = split_metrics(metrics)
        extra, bits = split_examples(extra)
        with self._db.write() as c:
            if self._may_record(c, candidate_id, "result", worker):
                if rung_epochs is not None:
                    rung = self._row(c, candidate_id, "rung")[0]
                    self._insert_rung(c, candidate_id, rung, rung_epochs, known, extra,
                                      "final", None, worker)
                self._finish(c, candidate_id, Status.DONE, known, extra, bits, checkpoint_path)
            return self._get(c, candidate_id)

    def record_rung(
        self, candidate_id: int, rung: int, epochs: float, metrics: Any, decide: Decide, *,
        checkpoint_path: str | None = None, worker: str | None = None,
        cost: str = "flops",
    ) -> Candidate:
        """Record a multi-fidelity child's result at `rung` (not its last) and decide, in
        the same transaction, whether it goes on: `decide` sees every result recorded
        earlier at this rung (same epochs). Promoted: pending again at rung + 1, its claim
        and attempts reset, to resume from its own checkpoint. Not promoted: `stopped`,
        with these metrics. Like `tell`, a no-op (logged) on a finished candidate, one
        `worker` no longer holds, or one not at `rung`."""
        known, extra = split_metrics(metrics)
        extra, bits = split_examples(extra)
        with self._db.write() as c:
            if not self._may_record(c, candidate_id, "rung result", worker):
                return self._get(c, candidate_id)
            at, parent_id = self._row(c, candidate_id, "rung, parent_id")
            if at != rung:
                logging.info("%s: candidate %d is at rung %d; a result for rung %d is "
                             "ignored", self.path, candidate_id, at, rung)
                return self._get(c, candidate_id)
            # promotions rank by a cost the rungs table records, or by accuracy alone
            rung_column = cost if cost in ("flops", "params") else "NULL"
            peers = [RungResult(int(i), float(a), None if v is None else float(v))
                     for i, a, v in c.execute(
                         f"SELECT candidate_id, accuracy, {rung_column} FROM rungs "
                         "WHERE rung=? AND epochs=? AND candidate_id!=? ORDER BY "
                         "candidate_id", (rung, float(epochs), candidate_id))]
            parent_acc = None if parent_id is None else self._row(c, parent_id, "accuracy")[0]
            me = RungResult(candidate_id, known["accuracy"], known.get(cost))
            promoted, reason = decide(me, peers, parent_acc)
            self._insert_rung(c, candidate_id, rung, epochs, known, extra,
                              "promoted" if promoted else "stopped", reason, worker)
            if promoted:
                c.execute(f"UPDATE candidates SET {UNCLAIM}, rung=?, attempts=0 WHERE id=?",
                          (rung + 1, candidate_id))
            else:  # its metrics are this rung's, epochs included
                self._finish(c, candidate_id, Status.STOPPED, {**known, "epochs": float(epochs)},
                             extra, bits, checkpoint_path)
            return self._get(c, candidate_id)

    def fail(
        self, candidate_id: int, error: str | BaseException, *, infeasible: bool = False,
        worker: str | None = None,
    ) -> Candidate:
        """Record that a candidate failed (or is infeasible: it can never run, e.g. OOM),
        never to be retried. Like `tell`, a no-op (logged) on a finished candidate or one
        that `worker` no longer holds."""
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}"
        status = Status.INFEASIBLE if infeasible else Status.FAILED
        with self._db.write() as c:
            if self._may_record(c, candidate_id, "failure", worker):
                self._fail(c, candidate_id, str(error), status)
            return self._get(c, candidate_id)

    def set_state(self, key: str, value: Any) -> None:
        """Save a JSON value for the driver (RNG state, generation counter, ...)."""
        rows = self._state_rows({key: value})
        with self._db.write() as c:
            c.executemany(PUT_META, rows)

    # ------------------------------------------------------------------ claims

    def claim(self, worker: str | None = None, candidate_id: int | None = None, *,
              lease_s: float | None = None) -> Candidate | None:
        """Atomically mark the oldest pending candidate (or `candidate_id`) running and
        return it (None: nothing, or not that one, is pending); one without a parent (a
        seed, an enqueued architecture) comes before any proposed child. The claim is a
        lease of `lease_s` seconds (default: the config's) that the worker must `renew`;
        expired claims are re-queued first, in the same transaction. Each claim counts one
        attempt."""
        worker = worker or default_worker()
        lease_s = self._lease_s(lease_s)
        with self._db.write() as c:
            self._requeue(c, self._max_attempts(None), expired=True)
            if candidate_id is None:
                row = c.execute(f"SELECT id FROM candidates WHERE status='{Status.PENDING}'"
                                " ORDER BY parent_id IS NOT NULL, id LIMIT 1").fetchone()
                candidate_id = None if row is None else row[0]
            elif self._row(c, candidate_id, "status")[0] != Status.PENDING:
                candidate_id = None
            if candidate_id is None:
                return None
            now = time.time()
            c.execute(f"UPDATE candidates SET status='{Status.RUNNING}', worker=?, started_at=?,"
                      " finished_at=NULL, attempts=attempts+1, lease_until=? WHERE id=?",
                      (worker, now, now + lease_s, candidate_id))
            return self._get(c, candidate_id)

    def renew(self, candidate_id: int, worker: str, lease_s: float | None = None) -> bool:
        """Extend `worker`'s lease on a running candidate; False if it no longer holds it
        (its lease expired): the worker must then stop training it and record nothing."""
        lease_s = self._lease_s(lease_s)
        with self._db.write() as c:
            cur = c.execute(f"UPDATE candidates SET lease_until=? WHERE id=? AND"
                            f" status='{Status.RUNNING}' AND worker=?",
                            (time.time() + lease_s, candidate_id, worker))
            return cur.rowcount == 1

    def release(self, candidate_id: int, worker: str) -> bool:
        """Give a claim back (e.g. on Ctrl-C): pending again, the attempt not counted."""
        with self._db.write() as c:
            cur = c.execute(f"UPDATE candidates SET {UNCLAIM}, attempts=MAX(attempts-1, 0)"
                            f" WHERE id=? AND status='{Status.RUNNING}' AND worker=?",
                            (candidate_id, worker))
            return cur.rowcount == 1

    def requeue_expired(self, max_attempts: int | None = None) -> tuple[list[int], list[int]]:
        """Re-queue running candidates whose lease expired, or fail those whose attempts
        reached `max_attempts`; live claims are left alone. Returns (requeued, failed)."""
        max_attempts = self._max_attempts(max_attempts)
        with self._db.write() as c:
            return self._requeue(c, max_attempts, expired=True)

    def holds(self, candidate_id: int, worker: str) -> bool:
        """Whether `worker` holds the running claim on `candidate_id`."""
        rows = self._rows("SELECT status, worker FROM candidates WHERE id=?", (candidate_id,))
        return rows == [(Status.RUNNING, worker)]

    def requeue_running(
        self, max_attempts: int | None = None, *, worker: str | None = None
    ) -> tuple[list[int], list[int]]:
        """Return every running candidate (or `worker`'s), live or not, to pending, or fail
        those whose attempts reached `max_attempts`: only for a study no live worker uses
        (tests, repair). Returns (requeued, failed)."""
        max_attempts = self._max_attempts(max_attempts)
        with self._db.write() as c:
            return self._requeue(c, max_attempts, worker=worker)

    # ----------------------------------------------------------------- reading

    def get_state(self, key: str, default: Any = None) -> Any:
        """A value saved with `set_state` (or `add(state=...)`), else `default`."""
        rows = self._rows("SELECT value FROM meta WHERE key=?", (STATE_PREFIX + key,))
        if not rows:
            return default
        try:
            return json.loads(rows[0][0])
        except ValueError as e:
            raise ValueError(f"{self.path}: state {key!r} holds damaged JSON ({e})") from None

    def get(self, candidate_id: int) -> Candidate:
        """The candidate with this id; ValueError if there is none."""
        with self._db.read() as c:
            return self._get(c, candidate_id)

    def candidates(self, status: str | Iterable[str] | None = None, *,
                   with_graphs: bool = True) -> list[Candidate]:
        """All candidates (or those with the given status/statuses), by id; `with_graphs=
        False` leaves out the large fields (graph, spec, properties, inheritance, blocks),
        for listings of metrics over a large study."""
        query, args, where = (SELECT if with_graphs else SELECT_METRICS), [], ""
        if status is not None:
            statuses = _statuses(status)
            where = f" WHERE status IN ({', '.join('?' * len(statuses))})"
            query, args = query + where, statuses
        with self._db.read() as c:
            rows = c.execute(query + " ORDER BY id", args).fetchall()
            rungs = self._rungs(c, where and f" WHERE candidate_id IN (SELECT id FROM candidates"
                                f"{where})", args)
        return [self._with_rungs(candidate_from_row(r, self.path), rungs) for r in rows]

    def latest(self, k: int, status: str | Iterable[str]) -> list[Candidate]:
        """The `k` newest candidates with the given status(es), newest first."""
        statuses = _statuses(status)
        with self._db.read() as c:
            ids = sorted((i for s in statuses for (i,) in c.execute(
                "SELECT id FROM candidates WHERE status=? ORDER BY id DESC LIMIT ?", (s, k))),
                reverse=True)[:k]
            return [self._get(c, i) for i in ids]

    def last_id(self) -> int:
        """The newest id given to a candidate, 0 in an empty study, a refused child's
        included (its row left the table, its id is not given again): the driver's next
        proposal reads results by id (`search.pipeline_depth`), which must not depend on
        whether the newest child was refused yet."""
        newest = self._rows("SELECT MAX(id) FROM candidates")[0][0] or 0
        given = self._rows("SELECT seq FROM sqlite_sequence WHERE name='candidates'")
        return max(int(newest), int(given[0][0]) if given else 0)

    def first_unfinished_id(self) -> int | None:
        """The oldest pending or running candidate's id; None when every one is finished."""
        ids = [i for status in (Status.PENDING, Status.RUNNING) for (i,) in self._rows(
            "SELECT id FROM candidates WHERE status=? ORDER BY id LIMIT 1", (status,))]
        return min(ids, default=None)

    def done_rows(self, after: int = 0, through: int | None = None) -> list[Finished]:
        """Done candidates with `after` < id <= `through` (no bound: every later one), by
        id, with only what selection reads (no graph; the packed validation results), so
        the driver reads each finished candidate once (`nas.search.strategy.population`)."""
        measured = self.user_costs  # read from the metrics' JSON, only those configured
        users = (*measured, *map(spread_name, measured))  # with their spreads
        query = (f"SELECT id, parent_id, accuracy, {', '.join(database.LIGHT_COSTS)}, "
                 f"{database.VAL_EXAMPLES}, e.count, e.bits"
                 + "".join(", json_extract(metrics_json, ?)" for _ in users)
                 + " FROM candidates LEFT JOIN examples e ON e.candidate_id = id AND "
                 "e.split = 'validation' WHERE id > ?")
        args: list[Any] = [*(json_path(u) for u in users), int(after)]
        if through is not None:
            query += " AND id <= ?"
            args.append(int(through))
        rows = self._rows(query + f" AND status='{Status.DONE}' ORDER BY id", args)
        return [Finished(*row[:8], val_count=row[8],
                         val_bits=None if row[9] is None else bytes(row[9]),
                         user_costs={u: v for u, v in zip(users, row[10:], strict=True)
                                     if v is not None}) for row in rows]

    def move_rows(self, through: int) -> list[tuple[int, int | None, str, float | None,
                                                    float | None, str | None]]:
        """(id, parent id, status, accuracy, flops, move kind) of every candidate with id
        <= `through`, by id: what `nas.search.strategy.move_mix` counts."""
        return [tuple(r) for r in self._rows(
            "SELECT id, parent_id, status, accuracy, flops,"
            " json_extract(inheritance_json, '$.kind') FROM candidates WHERE id <= ?"
            " ORDER BY id", (int(through),))]

    def has_candidate(self, candidate_id: int) -> bool:
        """Whether the study has a candidate `candidate_id` (a refused child's id has none)."""
        return bool(self._rows("SELECT 1 FROM candidates WHERE id=?", (int(candidate_id),)))

    def find(self, fingerprint: str) -> list[int]:
        """Ids of candidates with this fingerprint."""
        return [i for (i,) in self._rows(
            "SELECT id FROM candidates WHERE fingerprint=? ORDER BY id", (fingerprint,))]

    def counts(self) -> dict[str, int]:
        """Number of candidates per status (every status present, zeros included)."""
        query = ("SELECT status, n FROM status_counts" if self._counted else
                 "SELECT status, COUNT(*) FROM candidates GROUP BY status")
        return {**dict.fromkeys(STATUSES, 0), **dict(self._rows(query))}

    def finished_count(self, counts: Mapping[str, int] | None = None) -> int:
        """How many candidates finished (`FINISHED`: done, failed, infeasible, stopped),
        what `search.max_candidates` counts; `counts`: this study's `counts()`, where the
        caller read them already (one snapshot for both)."""
        counts = self.counts() if counts is None else counts
        return sum(counts[s] for s in FINISHED)

    def rung_counts(self) -> dict[int, tuple[float, int]]:
        """rung index -> (its epochs, number of results recorded there)."""
        rows = self._rows("SELECT rung, MAX(epochs), COUNT(*) FROM rungs GROUP BY rung"
                          " ORDER BY rung")
        return {int(r): (float(e), int(n)) for r, e, n in rows}

    def feasible_count(self, bounds: Mapping[str, float]) -> int:
        """How many done candidates are within every bound ({cost: upper bound}, as
        `search.constraints`)."""
        where, args = [], []
        for cost, bound in bounds.items():
            column, cost_args = self._cost_column(cost)
            where.append(f"{column} <= ?")
            args += [*cost_args, float(bound)]
        return int(self._rows(f"SELECT COUNT(*) FROM candidates WHERE status='{Status.DONE}'"
                              " AND accuracy IS NOT NULL"
                              + "".join(f" AND {w}" for w in where), args)[0][0])

    def pareto_front(self, cost: str = "flops") -> list[Candidate]:
        """Done candidates on the accuracy/`cost` front, from most accurate to cheapest,
        those tied with a front point included (a measured cost: within its spread, as
        selection ranks it). Only the front's rows are read whole."""
        column, args = self._cost_column(cost)
        if args:  # a number in the metrics' JSON, its spread beside it
            spread = "json_extract(metrics_json, ?)"
            where = "json_type(metrics_json, ?) IN ('integer', 'real')"
            args = [*args, json_path(spread_name(cost)), *args]
        else:
            spread, where = "NULL", f"{cost} IS NOT NULL"
        done = self._rows(f"SELECT id, accuracy, {column}, {spread} FROM candidates WHERE "
                          f"status='{Status.DONE}' AND accuracy IS NOT NULL AND {where}"
                          " ORDER BY id", args)
        spreads = np.array([s if isinstance(s, int | float) else np.nan for *_, s in done],
                           dtype=float)
        rows = front_rows(np.array([r[1] for r in done], dtype=float),
                          np.array([r[2] for r in done], dtype=float), higher_better(cost),
                          spreads)
        with self._db.read() as c:
            return [self._get(c, done[row][0]) for row in rows.tolist()]

    def best(self, k: int = 5) -> list[Candidate]:
        """The `k` most accurate done candidates (ties: fewer FLOPs, then older)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k: must be an integer >= 0, got {k!r}")
        with self._db.read() as c:
            ids = c.execute(f"SELECT id FROM candidates WHERE status='{Status.DONE}'"
                            " ORDER BY accuracy DESC, flops IS NULL, flops, id LIMIT ?",
                            (k,)).fetchall()
            return [self._get(c, i) for (i,) in ids]

    def export(self, candidate_id: int, path: str | os.PathLike) -> Path:
        """Write one candidate as a self-contained file, atomically (`export.export_candidate`);
        `nas.load_candidate` and `nas-train --graph` read it."""
        from nas.search.store.export import export_candidate

        return export_candidate(self, candidate_id, path)

    def correctness(self, candidate_ids: Iterable[int] | None = None,
                    split: str = "validation") -> dict[int, np.ndarray]:
        """candidate id -> which examples of `split` ("validation" or "test") it got
        right, in the split's order (boolean vector); candidates without a record (an
        older study, a failed run) are absent."""
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
        out = {}
        for cid, count, bits in self._rows(query + " ORDER BY candidate_id", args):
            if ids is not None and cid not in ids:
                continue
            try:
                out[int(cid)] = examples.unpack(bytes(bits), int(count))
            except ValueError as e:
                raise ValueError(f"{self.path}: candidate {cid}: {split} examples are "
                                 f"damaged ({e})") from None
        return out

    # ------------------------------------------------------- refused proposals

    def refuse(self, candidate_id: int, cause: str, *, worker: str | None = None
               ) -> Refusal | None:
        """Records that a claimed child could not start near its parent (`cause`, one
        line): its row leaves the candidates table and the refusal is returned; or, when
        its slot already had `max_refusals` proposals refused, it fails (None). Like
        `fail`, a no-op (None) on a finished candidate or one `worker` no longer holds."""
        with self._db.write() as c:
            if not self._may_record(c, candidate_id, "refusal", worker):
                return None
            parent_id, text = self._row(c, candidate_id, "parent_id, inheritance_json")
            try:
                inheritance = Inheritance.from_json(json.loads(text) if text else None)
            except ValueError:  # a damaged record counts as none: the refusal is still kept
                inheritance = Inheritance()
            before = inheritance.slot_refusals or 0
            limit = self.max_refusals
            if before + 1 > limit:
                self._fail(c, candidate_id, f"its slot's proposals were refused at their "
                           f"start {before + 1} time(s) (search.max_refusals={limit}); the "
                           f"last: {cause}")
                return None
            refusal = self._insert_refusal(
                c, proposal=inheritance.proposal, candidate_id=candidate_id,
                parent_id=parent_id, kind=inheritance.kind, stage="start", cause=cause,
                slot_refusals=before + 1, worker=worker)
            for table in ("examples", "rungs"):  # nothing refers to the row any more
                c.execute(f"DELETE FROM {table} WHERE candidate_id=?", (candidate_id,))
            c.execute("DELETE FROM candidates WHERE id=?", (candidate_id,))
            return refusal

    def record_refusal(self, *, stage: str, cause: str, kind: str | None = None,
                       proposal: int | None = None, parent_id: int | None = None,
                       state: Mapping[str, Any] | None = None) -> Refusal:
        """Records a proposal refused before its child was added (a move that raised, a
        constant output), with `state` (the driver's counters) in the same transaction."""
        if stage not in STAGES:
            raise ValueError(f"stage: expected one of {STAGES}, got {stage!r}")
        rows = self._state_rows(state)
        with self._db.write() as c:
            refusal = self._insert_refusal(c, proposal=proposal, candidate_id=None,
                                           parent_id=parent_id, kind=kind, stage=stage,
                                           cause=cause, slot_refusals=0, worker=None)
            c.executemany(PUT_META, rows)
            return refusal

    def refusals(self, stage: str | None = None) -> list[Refusal]:
        """The refused proposals (of one `stage`, or all), oldest first."""
        where, args = ("", ()) if stage is None else (" WHERE stage=?", (stage,))
        return self._refusals(f"{where} ORDER BY id", args)

    def open_refusal(self, through: int) -> Refusal | None:
        """The oldest child refused at its start, with an id up to `through` (what the
        driver's next proposal reads, so the slot it fills is decided by counts too), that
        nothing was proposed in place of yet (None: none)."""
        found = self._refusals(" WHERE replaced_by IS NULL AND candidate_id IS NOT NULL AND"
                               " candidate_id <= ? ORDER BY candidate_id LIMIT 1",
                               (int(through),))
        return found[0] if found else None

    def refusal_counts(self) -> dict[str, dict[str, int]]:
        """{stage: {move kind: refused proposals}}, every stage present."""
        out: dict[str, dict[str, int]] = {s: {} for s in STAGES}
        if self._has_refusals():
            for stage, kind, n in self._rows("SELECT stage, COALESCE(kind, '?'), COUNT(*) FROM"
                                             " refusals GROUP BY stage, kind ORDER BY stage, kind"):
                out.setdefault(stage, {})[kind] = int(n)
        return out

    # -------------------------------------------------- enqueued architectures

    def enqueue(self, architecture: Any, constants: dict[str, Any] | None = None, *,
                variables: dict[str, Any] | None = None) -> int:
        """Adds `architecture` (a user's model worth trying) as a pending candidate, trained
        as a seed is, before any proposed child, when the search next runs; returns its id.

        architecture: what `nas.load_candidate` or `nas.from_flax` returns (with its
        weights, if it has them), the path of an exported candidate or graph JSON, or a
        `nas.graph.Graph` with its `constants`. variables: weights for a graph (or in
        place of a candidate's own); None trains it from scratch.

        Each mistake (a study without its seeds yet, other outputs or input shape than the
        study's, weights that do not fit, an architecture already in the study) is one
        ValueError line, and nothing is written."""
        from nas.graph.serialize import graph_to_json
        from nas.mutation import fingerprint_at
        from nas.train import preflight
        from nas.train.checkpoint import save_variables
        from nas.train.config import image_shape, with_defaults

        config = self.config or {}
        if "train" not in config or "search" not in config:
            raise ValueError(f"enqueue: {self.path} is not a search's study (its config has "
                             f"no train and search sections)")
        planned, added = seeding(self)
        if planned is None or added < planned:
            raise ValueError(f"enqueue: the study in {self.workdir} has no seed yet (expected "
                             f"a search that ran once; a model to start from is its seed)")
        graph, constants, variables = _architecture_parts(architecture, constants, variables)
        train = with_defaults(ml_collections.ConfigDict(config["train"]))
        search = SearchSettings.from_stored(config)
        preflight.check_outputs(graph, constants, train, "enqueue: the architecture")
        shape = image_shape(train)
        if variables is not None:
            _check_weights(graph, constants, variables, shape)
        fingerprint = fingerprint_at(graph, constants, (1, *shape))
        existing = self.find(fingerprint)
        if existing:
            raise ValueError(f"enqueue: the architecture is already candidate {existing[0]} "
                             f"of {self.workdir}")
        hparams = hparams_lib.seed_values(train, search)
        inheritance = Inheritance(enqueued=True, hparams=hparams or None)
        path = None
        if variables is not None:  # complete on disk before the candidate exists
            path = os.path.join(os.path.abspath(self.workdir), "inits",
                                f"enqueued-{fingerprint[:16]}")
            shutil.rmtree(path, ignore_errors=True)
            save_variables(path, variables)
            inheritance = dataclasses.replace(inheritance, init_path=path)
        try:
            return self.add(graph_to_json(graph, constants), generation=0,
                            seed=search.seed, fingerprint=fingerprint,
                            inheritance=inheritance)
        except DuplicateCandidateError as e:  # added meanwhile by another process
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
            raise ValueError(f"enqueue: the architecture is already candidate "
                             f"{e.existing_id} of {self.workdir}") from None

    # --------------------------------------------------------------- internals

    def _rows(self, sql: str, args: Iterable[Any] = ()) -> list[tuple]:
        with self._db.read() as c:
            return c.execute(sql, tuple(args)).fetchall()

    def _row(self, c: sqlite3.Connection, candidate_id: int, columns: str) -> tuple:
        """`columns` of one candidate's row; ValueError when there is none."""
        row = c.execute(f"SELECT {columns} FROM candidates WHERE id=?",
                        (candidate_id,)).fetchone()
        if row is None:
            raise ValueError(f"candidate_id: no candidate {candidate_id!r} in {self.path}")
        return row

    def _get(self, c: sqlite3.Connection, candidate_id: int) -> Candidate:
        row = self._row(c, candidate_id, ", ".join(COLUMNS))
        return self._with_rungs(candidate_from_row(row, self.path),
                                self._rungs(c, " WHERE candidate_id=?", (candidate_id,)))

    @staticmethod
    def _rungs(c: sqlite3.Connection, where: str, args: Iterable[Any]
               ) -> dict[int, list[dict[str, Any]]]:
        """Recorded rung results by candidate id (those `where` selects, or all)."""
        out: dict[int, list[dict[str, Any]]] = {}
        for row in c.execute(SELECT_RUNGS + where + " ORDER BY candidate_id, rung", tuple(args)):
            entry = dict(zip(RUNG_COLUMNS, row, strict=True))
            out.setdefault(entry.pop("candidate_id"), []).append(entry)
        return out

    @staticmethod
    def _with_rungs(candidate: Candidate, rungs: dict[int, list[dict[str, Any]]]) -> Candidate:
        found = rungs.get(candidate.id)
        return dataclasses.replace(candidate, rungs=tuple(found)) if found else candidate

    def _may_record(self, c: sqlite3.Connection, candidate_id: int, what: str,
                    worker: str | None) -> bool:
        """Whether a result may be written now; logs why not (never raises for races)."""
        status, holder = self._row(c, candidate_id, "status, worker")
        if status in FINISHED:
            logging.info("%s: candidate %d is already %s; %s of %s ignored", self.path,
                         candidate_id, status, what, worker or "this process")
            return False
        if worker is not None and (status != Status.RUNNING or holder != worker):
            logging.info("%s: %s no longer holds candidate %d (it is %s, held by %s); its %s "
                         "is ignored", self.path, worker, candidate_id, status, holder, what)
            return False
        return True

    @staticmethod
    def _finish(c: sqlite3.Connection, candidate_id: int, status: Status,
                known: Mapping[str, float], extra: Mapping[str, Any],
                bits: Mapping[str, np.ndarray], checkpoint_path: str | None) -> None:
        """Write a result (done, or stopped at a rung) with its per-example rows."""
        c.executemany(
            "INSERT OR REPLACE INTO examples(candidate_id, split, count, bits) VALUES (?, ?, ?, ?)",
            [(candidate_id, split, int(v.size), examples.pack(v)) for split, v in bits.items()])
        cols = ", ".join(f"{k}=?" for k in METRICS)
        c.execute(
            f"UPDATE candidates SET status='{status}', {cols}, metrics_json=?,"
            " checkpoint_path=?, error=NULL, finished_at=?, lease_until=NULL WHERE id=?",
            (*[known.get(k) for k in METRICS], dumps(extra, "metrics"), checkpoint_path,
             time.time(), candidate_id))

    @staticmethod
    def _fail(c: sqlite3.Connection, candidate_id: int, error: str,
              status: Status = Status.FAILED) -> None:
        c.execute("UPDATE candidates SET status=?, error=?, finished_at=?, lease_until=NULL"
                  " WHERE id=?", (status, error, time.time(), candidate_id))

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
    def _insert_refusal(c: sqlite3.Connection, *, proposal: int | None,
                        candidate_id: int | None, parent_id: int | None, kind: str | None,
                        stage: str, cause: Any, slot_refusals: int,
                        worker: str | None) -> Refusal:
        cur = c.execute(
            "INSERT INTO refusals(proposal, candidate_id, parent_id, kind, stage, cause,"
            " slot_refusals, worker, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (proposal, candidate_id, parent_id, kind, stage, str(cause)[:2000],
             int(slot_refusals), worker, time.time()))
        return Refusal(*c.execute(SELECT_REFUSALS + " WHERE id=?",
                                  (int(cur.lastrowid),)).fetchone())

    def _has_refusals(self) -> bool:
        """Whether there is a refusals table (an older study opened read-only has none)."""
        return bool(self._rows("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                               "name='refusals'"))

    def _refusals(self, where: str, args: Iterable[Any]) -> list[Refusal]:
        if not self._has_refusals():
            return []
        return [Refusal(*row) for row in self._rows(SELECT_REFUSALS + where, args)]

    @staticmethod
    def _state_rows(state: Mapping[str, Any] | None) -> list[tuple[str, str]]:
        rows = []
        for key, value in (state or {}).items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"state: keys must be non-empty strings, got {key!r}")
            rows.append((STATE_PREFIX + key, dumps(value, f"state.{key}") or "null"))
        return rows

    def _cost_column(self, cost: str) -> tuple[str, list[Any]]:
        """(SQL expression, arguments) of `cost`: its column, or its number in the JSON."""
        check_cost(cost, user_costs=self.user_costs)
        if cost in self.user_costs or cost in MEASURED_COSTS:
            return "json_extract(metrics_json, ?)", [json_path(cost)]
        return cost, []

    def _max_attempts(self, max_attempts: int | None) -> int:
        return int(self._setting("max_attempts", max_attempts, "an integer >= 1",
                                 lambda v: isinstance(v, int) and v >= 1))

    def _lease_s(self, lease_s: float | None) -> float:
        return float(self._setting("lease_s", lease_s, "a number of seconds > 0",
                                   lambda v: isinstance(v, int | float) and 0 < v < 1e7))

    def _setting(self, name: str, value: Any, expected: str,
                 valid: Callable[[Any], bool]) -> Any:
        """`value` as a caller gave it, else the study's config's: its `search.<name>` as
        the settings declare it (`stored_setting`)."""
        if value is None:
            if name not in self.config:
                return stored_setting(self.config, name)
            # a study's own config, not a search's (Study.create(workdir, {"max_attempts":
            # 2})), may name it at the top, as the first studies did
            value = self.config[name]
        # a caller's argument or a value at the top: no settings reader saw either
        if isinstance(value, bool) or not valid(value):
            raise ValueError(f"{name}: must be {expected}, got {value!r}")
        return value

    def _requeue(self, c: sqlite3.Connection, max_attempts: int, *, expired: bool = False,
                 worker: str | None = None) -> tuple[list[int], list[int]]:
        """Return running candidates (`worker`'s, or all; with `expired` only those whose
        lease expired or whose worker on this host exited) to pending, or fail those whose
        attempts reached `max_attempts`. Returns (requeued, failed)."""
        now = time.time()
        where, args = f"status='{Status.RUNNING}'", []
        if worker is not None:
            where, args = where + " AND worker=?", [worker]
        rows = c.execute(f"SELECT id, attempts, worker, lease_until FROM candidates"
                         f" WHERE {where} ORDER BY id", args).fetchall()
        requeued, failed = [], []
        for cid, attempts, who, until in rows:
            if expired and until is not None and until >= now and not dead_local_process(who):
                continue  # a live claim
            if attempts >= max_attempts:
                why = ", lease expired" if expired else ""
                self._fail(c, cid, f"interrupted {attempts} time(s) (last worker {who}{why}); "
                           f"gave up after max_attempts={max_attempts}")
                failed.append(cid)
            else:
                c.execute(f"UPDATE candidates SET {UNCLAIM} WHERE id=?", (cid,))
                requeued.append(cid)
        if expired and (requeued or failed):
            logging.info("%s: leases expired: re-queued %s, failed %s", self.path, requeued,
                         failed)
        return requeued, failed


_PRIVATE = object()


def _plain_config(config: Any) -> dict[str, Any]:
    """A JSON-ready dict from None, a mapping, or a ConfigDict-like object."""
    if config is None:
        return {}
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    if not isinstance(config, Mapping):
        raise ValueError(f"config: expected a dict or ConfigDict, got {type(config).__name__}")
    # Round-trip so comparisons with the stored copy see the same types (tuples -> lists).
    return json.loads(dumps(dict(config), "config"))


def _statuses(status: str | Iterable[str]) -> list[str]:
    """`status` as a list of status names, each checked."""
    statuses = [status] if isinstance(status, str) else list(status)
    for name in statuses:
        status_of(name)
    return statuses


def json_path(name: str) -> str:
    """The JSON path of a user's cost in `metrics_json` (an identifier: quoted as is)."""
    return f'$."{name}"'


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
    if status not in (Status.PENDING, Status.FAILED, Status.INFEASIBLE):
        raise ValueError(f"status: new candidates are pending/failed/infeasible, not {status!r}")
    if fingerprint is not None and not isinstance(fingerprint, str):
        kind = type(fingerprint).__name__
        raise ValueError(f"fingerprint: expected a hex string, got {kind}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"seed: expected an integer, got {seed!r}")


def split_examples(extra: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(metrics without the per-example fields, {split: boolean vector}); a malformed
    field is a ValueError naming it."""
    rest = {k: v for k, v in extra.items() if k not in EXAMPLE_SPLITS}
    bits = {EXAMPLE_SPLITS[k]: examples.from_text(v, f"metrics.{k}")
            for k, v in extra.items() if k in EXAMPLE_SPLITS and v}
    return rest, bits


# ------------------------------------------------------------------ worker names


def default_worker(role: str = "") -> str:
    """A worker name that identifies this process: [role@]host:pid."""
    return f"{role + '@' if role else ''}{socket.gethostname()}:{os.getpid()}"


def dead_local_process(worker: str | None) -> bool:
    """Whether `worker` names a process on this host ([role@]host:pid) that has exited:
    its lease is void at once, without waiting for it to expire."""
    match = re.fullmatch(r"(?:[^@]*@)?(.+):([0-9]+)", worker or "")
    if match is None or match.group(1) != socket.gethostname():
        return False
    pid = int(match.group(2))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return is_zombie(pid)


def is_zombie(pid: int) -> bool:
    """Whether process `pid` has exited and waits for its parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


# ------------------------------------------------------------------ seeds, enqueue


def seeding(study: Study) -> tuple[int | None, int]:
    """(seeds planned, seeds added) of `study`: (None, 0) before its first seed."""
    if not study.last_id():
        return None, 0
    planned = study.get_state(SEEDS, None)
    if planned is None:  # one seed, or a study written before there could be several
        return 1, 1
    return int(planned), int(study.get_state(SEEDS_ADDED, 0))


def _architecture_parts(architecture: Any, constants: dict[str, Any] | None,
                        variables: dict[str, Any] | None
                        ) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """(graph, constants, variables) of what `Study.enqueue` was given: a candidate
    (its own weights unless `variables`), a file's path, or a graph with `constants`."""
    from nas.graph import Graph
    from nas.io.candidate import ExportedCandidate, read_graph_or_export_for

    if isinstance(architecture, str | os.PathLike):
        architecture = read_graph_or_export_for("enqueue", os.fspath(architecture))
        if isinstance(architecture, bytes):
            from nas.graph.serialize import load

            architecture, constants = load(architecture)
    if isinstance(architecture, ExportedCandidate):
        graph, constants = architecture.graph, dict(architecture.constants)
        variables = architecture.variables if variables is None else variables
    else:
        graph = architecture
    if not isinstance(graph, Graph):
        raise ValueError(f"enqueue: expected a candidate (nas.load_candidate, "
                         f"nas.from_flax), an exported file's path or a nas.graph.Graph, "
                         f"got {type(architecture).__name__}")
    return graph, dict(constants or {}), variables


def _check_weights(graph: Any, constants: dict[str, Any], variables: Any,
                   shape: tuple[int, ...]) -> None:
    """`variables` must have every array the graph's model has, at its shape: one line
    naming the first that differs."""
    import jax
    import jax.numpy as jnp
    from flax.traverse_util import flatten_dict

    from nas.graph import Model

    model = Model(graph, constants)
    x = jax.ShapeDtypeStruct((1, *shape), jnp.float32)
    want = flatten_dict(jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x), x),
                        sep="/")
    if not hasattr(variables, "items"):
        raise ValueError(f"enqueue: variables: expected a dict of weights, got "
                         f"{type(variables).__name__}")
    have = flatten_dict(dict(variables), sep="/")
    for name, leaf in want.items():
        if name.startswith(("params/", "batch_stats/")):
            got = have.get(name)
            if got is None:
                raise ValueError(f"enqueue: variables: {name} is missing (expected the "
                                 f"architecture's weights)")
            if (got_shape := tuple(jnp.shape(got))) != tuple(leaf.shape):
                raise ValueError(f"enqueue: variables: {name} has shape {got_shape}, expected "
                                 f"{tuple(leaf.shape)}")


# ------------------------------------------------------------------------ leases


class LeaseKeeper:
    """A thread that renews a worker's held leases at a quarter of their length, on its
    own study connection, so a long compile never lets a live claim expire while a dead
    worker's claims expire within one lease. A lost lease (a renewal that fails) moves
    its id to `lost`: its trainer should stop and record nothing."""

    def __init__(self, workdir: str | Path, worker: str, lease_s: float) -> None:
        self.worker = worker
        self.lease_s = float(lease_s)
        self._study = Study.load(workdir)
        self._held: set[int] = set()
        self._lost: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)
        self._thread.start()

    def hold(self, candidate_id: int) -> None:
        with self._lock:
            self._held.add(candidate_id)
            self._lost.discard(candidate_id)

    def drop(self, candidate_id: int) -> None:
        with self._lock:
            self._held.discard(candidate_id)

    def lost(self, candidate_id: int) -> bool:
        with self._lock:
            return candidate_id in self._lost

    def renew_now(self) -> None:
        """Renew every held lease once (also called by the thread)."""
        with self._lock:
            held = sorted(self._held)
        for cid in held:
            try:
                ok = self._study.renew(cid, self.worker, self.lease_s)
            except ValueError as e:  # a damaged or vanished study: keep trying, say why
                absl_logging.warning("lease of candidate %d not renewed: %s", cid, e)
                continue
            if not ok:
                absl_logging.warning("%s lost its lease on candidate %d; it will not be recorded",
                                     self.worker, cid)
                with self._lock:
                    self._held.discard(cid)
                    self._lost.add(cid)

    def _run(self) -> None:
        while not self._stop.wait(self.lease_s / 4):
            self.renew_now()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.lease_s)
        self._study.close()

    def __enter__(self) -> LeaseKeeper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
