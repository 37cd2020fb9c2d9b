"""SQLite schema of a study and the checks that refuse files that are not one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from nas.search.candidate import COLUMNS, METRICS, STATUSES

FORMAT = "nas-study"
SCHEMA_VERSION = 1

# Columns added after schema version 1 was first written: an older study gets them (NULL)
# when opened, so its candidates read as before.
ADDED_COLUMNS = {"lease_until": "REAL", "blocks_json": "TEXT"}

_status_list = ", ".join(f"'{s}'" for s in STATUSES)
_metric_cols = "\n".join(f"    {m} REAL," for m in METRICS)

SCHEMA = f"""
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE candidates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    parent_id INTEGER REFERENCES candidates(id),
    generation INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ({_status_list})),
    graph_json TEXT NOT NULL,
    fingerprint TEXT,
    seed INTEGER,
    spec_json TEXT,
    properties_json TEXT,
    inheritance_json TEXT,
{_metric_cols}
    metrics_json TEXT,
    checkpoint_path TEXT,
    error TEXT,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    worker TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    lease_until REAL,
    blocks_json TEXT
);
CREATE INDEX candidates_status ON candidates(status, id);
CREATE INDEX candidates_fingerprint ON candidates(fingerprint);
CREATE INDEX candidates_parent ON candidates(parent_id);
"""


def check_study(conn: sqlite3.Connection, path: Path) -> None:
    """Raise ValueError unless `conn` is a study this code can read and write."""
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as e:
        raise ValueError(
            f"{path}: not a readable SQLite database (corrupt or foreign file): {e}"
        ) from e
    if not tables:
        raise ValueError(f"{path}: empty database, not a nas study (create one with Study.create)")
    if "meta" not in tables or "candidates" not in tables:
        raise ValueError(
            f"{path}: a SQLite database but not a nas study (expected tables 'meta' and "
            f"'candidates', found {sorted(tables)})"
        )
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        cols = {r[1] for r in conn.execute("PRAGMA table_info(candidates)")}
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{path}: study database is damaged: {e}") from e
    if meta.get("format") != FORMAT:
        raise ValueError(
            f"{path}: not a nas study (meta.format is {meta.get('format')!r}, expected {FORMAT!r})"
        )
    try:
        version = int(meta.get("schema_version", ""))
    except ValueError:
        raise ValueError(
            f"{path}: meta.schema_version is {meta.get('schema_version')!r}, expected an integer"
        ) from None
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"{path}: study schema version {version} is newer than this nas supports "
            f"({SCHEMA_VERSION}); upgrade nas to open it"
        )
    if version < 1:
        raise ValueError(f"{path}: study schema version {version} is not supported")
    missing = [c for c in COLUMNS if c not in cols and c not in ADDED_COLUMNS]
    if not missing:  # a study written before these columns existed gets them (additive)
        for column, kind in ADDED_COLUMNS.items():
            if column in cols:
                continue
            try:
                conn.execute(f"ALTER TABLE candidates ADD COLUMN {column} {kind}")
            except sqlite3.OperationalError as e:
                if "duplicate column" not in str(e):  # else another process added it first
                    raise ValueError(f"{path}: cannot add the column {column!r}: {e}") from e
    if missing:
        raise ValueError(f"{path}: table 'candidates' lacks column(s) {missing}; damaged file")
