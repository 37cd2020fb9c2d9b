"""The study's SQLite file: one connection per process, thread-safe transactions, the
schema, and the checks that refuse files that are not a study (or migrate older ones)."""

from __future__ import annotations

import contextlib
import enum
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

from nas.search.store.candidate import COLUMNS, METRICS, STATUSES


class Key(enum.StrEnum):
    """The meta rows written when a study is created. The search's own state lives beside
    them as `STATE_PREFIX + key` rows (`Study.set_state`), so no state key overwrites one."""

    FORMAT = "format"  # `FORMAT` in every study
    SCHEMA_VERSION = "schema_version"
    CONFIG = "config"  # the study's config, JSON
    CREATED_AT = "created_at"  # Unix seconds


STATE_PREFIX = "state:"
FORMAT = "nas-study"
# 2: status 'stopped', candidates.rung and the rungs table (multi-fidelity); version 1
# files are migrated when opened.
SCHEMA_VERSION = 2


class StudyNotFoundError(ValueError, FileNotFoundError):
    """No study in the workdir: no database, or an empty one (a creation interrupted before
    its first commit), which creating the study again may overwrite."""


# Columns added after schema version 1 was first written: an older study gets them (NULL)
# when opened, so its candidates read as they were written.
ADDED_COLUMNS = {"lease_until": "REAL", "blocks_json": "TEXT"}

# Indexes added since, created when a study is opened: `candidates_selection` covers what
# parent selection and the progress line read, so they never touch the large columns.
LIGHT_COSTS = ("flops", "params", "im_sec_core_train", "im_sec_core_infer")
VAL_EXAMPLES = "json_extract(metrics_json, '$.val_examples')"
ADDED_INDEXES = {"candidates_selection": f"candidates(status, id, parent_id, accuracy, "
                                         f"{', '.join(LIGHT_COSTS)}, {VAL_EXAMPLES})"}

# The number of candidates per status, kept by triggers in the transaction that changes a
# status, so `Study.counts` (read several times per proposal) reads six rows.
COUNT_TRIGGERS = ("status_counts_insert", "status_counts_update", "status_counts_delete")
STATUS_COUNTS = (
    "CREATE TABLE IF NOT EXISTS status_counts (status TEXT PRIMARY KEY, n INTEGER NOT NULL)",
    """CREATE TRIGGER status_counts_insert AFTER INSERT ON candidates BEGIN
    INSERT INTO status_counts(status, n) VALUES (NEW.status, 1)
        ON CONFLICT(status) DO UPDATE SET n = n + 1;
END""",
    """CREATE TRIGGER status_counts_update AFTER UPDATE OF status ON candidates
        WHEN OLD.status IS NOT NEW.status BEGIN
    UPDATE status_counts SET n = n - 1 WHERE status = OLD.status;
    INSERT INTO status_counts(status, n) VALUES (NEW.status, 1)
        ON CONFLICT(status) DO UPDATE SET n = n + 1;
END""",
    """CREATE TRIGGER status_counts_delete AFTER DELETE ON candidates BEGIN
    UPDATE status_counts SET n = n - 1 WHERE status = OLD.status;
END""",
)

_status_list = ", ".join(f"'{s}'" for s in STATUSES)
_metric_cols = "\n".join(f"    {m} REAL," for m in METRICS)

CANDIDATES = f"""
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
    blocks_json TEXT,
    rung INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX candidates_status ON candidates(status, id);
CREATE INDEX candidates_fingerprint ON candidates(fingerprint);
CREATE INDEX candidates_parent ON candidates(parent_id);
"""

# One row per candidate and rung reached (multi-fidelity), with the decision taken there:
# promoted, stopped, or final (the full budget).
RUNGS = """
CREATE TABLE rungs (
    candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    rung INTEGER NOT NULL,
    epochs REAL NOT NULL,
    steps INTEGER,
    accuracy REAL NOT NULL,
    loss REAL,
    flops REAL,
    params REAL,
    decision TEXT NOT NULL CHECK (decision IN ('promoted', 'stopped', 'final')),
    reason TEXT,
    worker TEXT,
    recorded_at REAL NOT NULL,
    PRIMARY KEY (candidate_id, rung)
);
CREATE INDEX rungs_rung ON rungs(rung, epochs);
"""

# Which validation and test examples each candidate got right (`nas.io.examples.pack`:
# bit i is example i of the split), for paired comparisons. Added after schema version 2:
# an older study gets the empty table when opened; older code ignores it.
EXAMPLES = """
CREATE TABLE IF NOT EXISTS examples (
    candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    split TEXT NOT NULL CHECK (split IN ('validation', 'test')),
    count INTEGER NOT NULL,
    bits BLOB NOT NULL,
    PRIMARY KEY (candidate_id, split)
);
"""
# Refused proposals (`Refusal`), added like `examples`.
REFUSALS = """
CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    proposal INTEGER,
    candidate_id INTEGER,
    parent_id INTEGER,
    kind TEXT,
    stage TEXT NOT NULL CHECK (stage IN ('start', 'move')),
    cause TEXT NOT NULL,
    slot_refusals INTEGER NOT NULL DEFAULT 0,
    replaced_by INTEGER,
    worker TEXT,
    recorded_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS refusals_open ON refusals(replaced_by, candidate_id);
"""
ADDED_TABLES = {"examples": EXAMPLES, "refusals": REFUSALS}

SCHEMA = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
""" + CANDIDATES + RUNGS + EXAMPLES + REFUSALS + "".join(
    f"CREATE INDEX {name} ON {target};\n" for name, target in ADDED_INDEXES.items())


def unreadable(path: Path, e: sqlite3.DatabaseError) -> ValueError:
    return ValueError(f"{path}: not a readable SQLite database (corrupt or foreign file): {e}")


def statements(script: str) -> list[str]:
    return [s for s in script.split(";") if s.strip()]


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """`BEGIN IMMEDIATE` on `conn`, committed on success, rolled back on any exception: the
    write lock is taken before anything is read, so read-then-update is atomic."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Bring a version 1 study to this version, in one transaction (a concurrent opener
    waits, then finds it done). SQLite cannot change a CHECK constraint in place, so the
    candidates table is rebuilt with its rows (ids kept) and every new column defaulted."""
    try:
        with transaction(conn):
            version = int(conn.execute("SELECT value FROM meta WHERE key=?",
                                       (Key.SCHEMA_VERSION,)).fetchone()[0])
            if version < SCHEMA_VERSION:
                old = [r[1] for r in conn.execute("PRAGMA table_info(candidates)")]
                keep = ", ".join(c for c in old if c in COLUMNS or c == "lease_until")
                conn.execute("CREATE TEMP TABLE v1_candidates AS SELECT * FROM candidates")
                conn.execute("DROP TABLE candidates")
                for statement in statements(CANDIDATES + RUNGS):
                    conn.execute(statement)
                conn.execute(f"INSERT INTO candidates({keep}) SELECT {keep} FROM "
                             f"v1_candidates ORDER BY id")
                conn.execute("DROP TABLE v1_candidates")
                conn.execute("UPDATE meta SET value=? WHERE key=?",
                             (str(SCHEMA_VERSION), Key.SCHEMA_VERSION))
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{path}: cannot migrate the study to schema version "
                         f"{SCHEMA_VERSION}: {e}") from e


def is_empty(path: Path) -> bool:
    """Whether `path` is missing, 0 bytes, or a SQLite database without tables (a study
    creation interrupted before its schema was committed)."""
    if not path.exists() or path.stat().st_size == 0:
        return True
    try:
        uri = f"file:{path.resolve()}?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=60.0)) as conn:
            return conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0] == 0
    except sqlite3.DatabaseError:  # a corrupt or foreign file is not empty
        return False


def check_study(conn: sqlite3.Connection, path: Path) -> None:
    """Raise ValueError unless `conn` is a study this code can read and write."""
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as e:
        raise unreadable(path, e) from e
    if not tables:
        raise StudyNotFoundError(f"{path}: empty database, no study in it yet")
    if "meta" not in tables or "candidates" not in tables:
        raise ValueError(f"{path}: a SQLite database but not a nas study (expected tables "
                         f"'meta' and 'candidates', found {sorted(tables)})")
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        cols = {r[1] for r in conn.execute("PRAGMA table_info(candidates)")}
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{path}: study database is damaged: {e}") from e
    if meta.get(Key.FORMAT) != FORMAT:
        raise ValueError(f"{path}: not a nas study (meta.format is {meta.get(Key.FORMAT)!r}, "
                         f"expected {FORMAT!r})")
    try:
        version = int(meta.get(Key.SCHEMA_VERSION, ""))
    except ValueError:
        raise ValueError(f"{path}: meta.schema_version is {meta.get(Key.SCHEMA_VERSION)!r}, "
                         f"expected an integer") from None
    if version > SCHEMA_VERSION:
        raise ValueError(f"{path}: study schema version {version} is newer than this nas "
                         f"supports ({SCHEMA_VERSION}); upgrade nas to open it")
    if version < 1:
        raise ValueError(f"{path}: study schema version {version} is not supported")
    if version < SCHEMA_VERSION:
        if "id" not in cols or "status" not in cols:
            raise ValueError(f"{path}: table 'candidates' lacks its id/status columns; "
                             f"damaged file")
        migrate(conn, path)
        cols = {r[1] for r in conn.execute("PRAGMA table_info(candidates)")}
    missing = [c for c in COLUMNS if c not in cols and c not in ADDED_COLUMNS]
    if missing:
        raise ValueError(f"{path}: table 'candidates' lacks column(s) {missing}; damaged file")
    for column, kind in ADDED_COLUMNS.items():
        if column in cols:
            continue
        try:
            conn.execute(f"ALTER TABLE candidates ADD COLUMN {column} {kind}")
        except sqlite3.OperationalError as e:
            if "duplicate column" not in str(e):  # else another process added it first
                raise ValueError(f"{path}: cannot add the column {column!r}: {e}") from e
    add_missing(conn, path)


def add_status_counts(conn: sqlite3.Connection) -> None:
    """Create the status counts and their triggers, counted from the table, in the
    caller's transaction (a migration, which rebuilds the table, drops the triggers)."""
    for name in COUNT_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    for statement in STATUS_COUNTS:
        conn.execute(statement)
    conn.execute("DELETE FROM status_counts")
    conn.execute("INSERT INTO status_counts(status, n) SELECT status, COUNT(*) FROM candidates"
                 " GROUP BY status")


def has_status_counts(conn: sqlite3.Connection) -> bool:
    names = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE name='status_counts' OR type='trigger'")}
    return {"status_counts", *COUNT_TRIGGERS} <= names


def ensure_status_counts(conn: sqlite3.Connection, path: Path) -> bool:
    """Add the status counts to a study that lacks them, in one transaction (a concurrent
    opener waits, then finds them). False for a file this process may not write: counts
    are then counted from the table."""
    if has_status_counts(conn):
        return True
    try:
        with transaction(conn):
            if not has_status_counts(conn):
                add_status_counts(conn)
    except sqlite3.OperationalError as e:
        if "readonly" in str(e):
            return False
        raise ValueError(f"{path}: cannot add the status counts: {e}") from e
    return True


def add_missing(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables (`ADDED_TABLES`) and indexes (`ADDED_INDEXES`) a study written
    before them lacks (IF NOT EXISTS: a concurrent opener may create one first). A
    read-only opener (the dashboard) goes on without them: queries are slower, per-example
    results absent, nothing wrong."""
    have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    added = {name: statements(script) for name, script in ADDED_TABLES.items()}
    added.update({name: [f"CREATE INDEX IF NOT EXISTS {name} ON {target}"]
                  for name, target in ADDED_INDEXES.items()})
    for name, script in added.items():
        if name in have:
            continue
        try:
            for statement in script:
                conn.execute(statement)
        except sqlite3.OperationalError as e:
            if "readonly" not in str(e):
                raise ValueError(f"{path}: cannot add {name!r}: {e}") from e


# Every open database of this process, so a CLI exiting at once can still close them
# cleanly (SQLite then removes its -wal/-shm side files).
_OPEN: weakref.WeakSet[Database] = weakref.WeakSet()


def close_all() -> None:
    for db in list(_OPEN):
        db.close()


class Database:
    """Opens `path` lazily; a forked child reconnects (SQLite connections must not cross
    fork). Corruption surfaces as ValueError naming the file."""

    def __init__(self, path: Path, read_only: bool = False):
        self.path = path
        self.read_only = read_only  # a reader beside the search (the dashboard): never writes
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        _OPEN.add(self)

    def connect(self, create: bool = False) -> sqlite3.Connection:
        """(Re)open; `create=False` never makes a new file."""
        mode = "ro" if self.read_only else "rwc" if create else "rw"
        uri = f"file:{self.path.resolve()}?mode={mode}"
        try:
            conn = sqlite3.connect(
                uri, uri=True, timeout=60.0, isolation_level=None, check_same_thread=False
            )
            if not self.read_only:
                conn.execute("PRAGMA foreign_keys=ON")
                conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.DatabaseError as e:
            raise unreadable(self.path, e) from e
        self._conn, self._pid = conn, os.getpid()
        return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            return self.connect()
        return self._conn

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (`transaction`)."""
        with self._lock, self._damage_as_value_error(), transaction(self._connection()) as c:
            yield c

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads (each statement sees one consistent snapshot)."""
        with self._lock, self._damage_as_value_error():
            yield self._connection()

    @contextlib.contextmanager
    def _damage_as_value_error(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as e:
            if type(e) is sqlite3.DatabaseError:  # "malformed", "not a database"
                raise ValueError(f"{self.path}: study database is damaged: {e}") from e
            raise
