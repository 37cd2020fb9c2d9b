"""`Study`: the durable, multi-process store of a search, one SQLite file per workdir.

Every state change is one SQLite transaction in WAL mode, so a driver or worker killed
at any moment leaves a consistent file that the next run resumes from. Claims use
`BEGIN IMMEDIATE` (the write lock is taken before the pending row is read), so two
processes never claim the same candidate. WAL needs all processes on one host (or a
filesystem with working shared memory and locks, which NFS is not).

Typical use (the driver and any external worker share the workdir):

    study = Study.open(workdir, config)          # create or resume
    cid = study.add(graph_json, parent_id=p, fingerprint=fp, seed=s)
    cand = study.claim(worker="host:123")        # None when nothing is pending
    study.tell(cand.id, {"accuracy": .93, "flops": 1.2e6, ...})   # or study.fail(...)

`Study` is split by what it does, each part a mixin over `study_rows.StudyRows` (one
object, one connection, every method where it was): `study_writes` (new candidates,
results, failures, state), `study_enqueue` (architectures a user adds), `study_refusals`
(refused proposals), `study_leases` (claims), `study_queries` (reads), `study_examples`
(per-example results); this module opens, creates and configures it.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nas.search.store import _schema
from nas.search.store._schema import StudyNotFoundError
from nas.search.store.candidate import Candidate, dumps
from nas.search.store.database import Database
from nas.search.store.study_enqueue import StudyEnqueue
from nas.search.store.study_examples import EXAMPLE_SPLITS, StudyExamples, split_examples
from nas.search.store.study_leases import (
    DEFAULT_LEASE_S,
    DEFAULT_MAX_ATTEMPTS,
    StudyLeases,
    default_worker,
)
from nas.search.store.study_queries import StudyQueries
from nas.search.store.study_refusals import Refusal, StudyRefusals
from nas.search.store.study_writes import Decide, DuplicateCandidateError

__all__ = ["DB_NAME", "DEFAULT_LEASE_S", "DEFAULT_MAX_ATTEMPTS", "EXAMPLE_SPLITS", "Candidate",
           "Decide", "DuplicateCandidateError", "Refusal", "Study", "StudyNotFoundError",
           "default_worker", "split_examples"]

DB_NAME = "study.db"


class Study(StudyEnqueue, StudyRefusals, StudyLeases, StudyQueries, StudyExamples):
    """A search's candidates and state in `<workdir>/study.db`. Use create/load/open."""

    def __init__(self, workdir: str | os.PathLike, *, _token: object = None,
                 read_only: bool = False):
        if _token is not _PRIVATE:
            raise TypeError("use Study.create, Study.load or Study.open")
        self.workdir = Path(workdir)
        self.path = self.workdir / DB_NAME
        self._db = Database(self.path, read_only=read_only)
        self.config: dict[str, Any] = {}
        self._counted = True  # the file keeps its status counts (`_schema.STATUS_COUNTS`)

    # ----------------------------------------------------------------- opening

    @classmethod
    def create(cls, workdir: str | os.PathLike, config: Any = None) -> Study:
        """Create a new study; ValueError if one already exists in `workdir`.

        `config` (a dict or anything with `to_dict()`, e.g. a ConfigDict) is stored as
        JSON; `config["max_attempts"]` (default 3) caps re-queues of interrupted runs.
        """
        config_json = dumps(_plain_config(config), "config")
        study = cls(workdir, _token=_PRIVATE)
        if not _schema.is_empty(study.path):
            raise ValueError(f"{study.path}: a study already exists (use Study.load or Study.open)")
        study.workdir.mkdir(parents=True, exist_ok=True)
        conn = study._db.connect(create=True)
        conn.execute("PRAGMA journal_mode=WAL")
        with study._db.write() as c:
            if c.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
                raise ValueError(f"{study.path}: a study already exists (created concurrently)")
            for statement in _schema.SCHEMA.split(";"):
                if statement.strip():
                    c.execute(statement)  # not executescript: it would commit early
            _schema.add_status_counts(c)
            now = time.time()
            c.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?)",
                [
                    ("format", _schema.FORMAT),
                    ("schema_version", str(_schema.SCHEMA_VERSION)),
                    ("config", config_json or "{}"),
                    ("created_at", repr(now)),
                ],
            )
        study.config = json.loads(config_json or "{}")
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
            _schema.check_study(conn, study.path)
            study._counted = _schema.ensure_status_counts(conn, study.path)
            row = conn.execute("SELECT value FROM meta WHERE key='config'").fetchone()
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
                if config is not None and _plain_config(config) != study.config:
                    logging.warning("%s: resuming with the stored config; the given one "
                                    "differs", path)
                return study
        try:
            return cls.create(workdir, config)
        except ValueError:
            if path.is_file():  # another process created it first
                return cls.load(workdir)
            raise

    def replace_config(self, config: Any) -> bool:
        """Store `config` in place of the study's own while it has no candidates (it has
        not started: nothing was decided with the old config); False once it has some."""
        config_json = dumps(_plain_config(config), "config") or "{}"
        with self._db.write() as c:
            if c.execute("SELECT 1 FROM candidates LIMIT 1").fetchone():
                return False
            c.execute("UPDATE meta SET value=? WHERE key='config'", (config_json,))
        self.config = json.loads(config_json)
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

