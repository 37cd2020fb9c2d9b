"""One SQLite connection per process and thread-safe transactions over it."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path

# Every open database of this process, so a CLI exiting at once can still close them
# cleanly (SQLite then removes its -wal/-shm side files).
_OPEN: weakref.WeakSet[Database] = weakref.WeakSet()


def close_all() -> None:
    for db in list(_OPEN):
        db.close()


class Database:
    """Opens `path` lazily; a forked child reconnects (SQLite connections must not cross fork).

    Writes are `BEGIN IMMEDIATE` transactions: the write lock is taken before anything is
    read, so read-then-update sequences (claims, duplicate checks) are atomic across
    processes. Corruption surfaces as ValueError naming the file.
    """

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
            raise ValueError(
                f"{self.path}: not a readable SQLite database (corrupt or foreign file): {e}"
            ) from e
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
        """One write transaction: committed on success, rolled back on any exception."""
        with self._lock, self._damage_as_value_error():
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

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
