"""A store on disk for per-op property results (output shapes, pairings), shared by processes.

Why: an op's output shapes and pairing are pure functions of its type, resolved kwargs and
input shapes, and each process already caches them in memory. But a search proposal meets
about 50 new ones (10 ms per shape, traced; 35 ms per pairing, a compiled Jacobian), most of
them already computed by an earlier search, an earlier run of the same one, or another
process: a new process's first proposals cost several times the later ones. Like JAX's
compilation cache this is off until `enable` is called (the search driver does). Entries are
namespaced by a hash of the code that computes them and the jax and flax versions, so a
changed op never reads a stale result; a store that cannot be opened or written only logs
one warning and is switched off: it never changes a result.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

_LOCK = threading.Lock()
_STATE: dict[str, Any] = {"path": None, "conn": None, "pid": -1}
_VERSION: list[str] = []  # computed once per process
# The code whose behaviour the stored values depend on.
_SOURCE_DIRS = ("graph", "properties")


def default_path() -> str:
    """$NAS_PROPERTY_CACHE, else ~/.cache/nas/op_properties.sqlite."""
    return os.environ.get("NAS_PROPERTY_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "nas", "op_properties.sqlite")


def enable(path: str | None) -> str | None:
    """Use the store at `path` in this process ("": `default_path()`; None or "none": off).

    Returns the file used, or None when off."""
    with _LOCK:
        _close()
        if path is None or path.lower() == "none":
            _STATE["path"] = None
            return None
        _STATE["path"] = os.path.abspath(os.path.expanduser(path or default_path()))
        return _STATE["path"]


def enabled_path() -> str | None:
    return _STATE["path"]


def get(kind: str, key: Any) -> Any | None:
    """The stored value of `kind` for `key` (decoded JSON), or None if absent or off."""
    with _LOCK:
        conn = _connection()
        if conn is None:
            return None
        try:
            row = conn.execute("SELECT value FROM entries WHERE kind=? AND version=? AND key=?",
                               (kind, _version(), repr(key))).fetchone()
        except sqlite3.Error as e:
            _give_up(e)
            return None
    return None if row is None else json.loads(row[0])


def put(kind: str, key: Any, value: Any) -> None:
    """Stores a JSON-encodable `value` of `kind` for `key` (kept if one is there already)."""
    with _LOCK:
        conn = _connection()
        if conn is None:
            return
        try:
            with conn:
                conn.execute("INSERT OR IGNORE INTO entries VALUES (?, ?, ?, ?)",
                             (kind, _version(), repr(key), json.dumps(value)))
        except sqlite3.Error as e:
            _give_up(e)


def _connection() -> sqlite3.Connection | None:
    path = _STATE["path"]
    if path is None:
        return None
    if _STATE["conn"] is not None and _STATE["pid"] == os.getpid():
        return _STATE["conn"]
    try:  # first use in this process, or in a forked child (connections must not cross)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        conn = sqlite3.connect(path, timeout=10.0, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # a cache: losing the last writes is fine
        conn.execute("CREATE TABLE IF NOT EXISTS entries (kind TEXT, version TEXT, key TEXT, "
                     "value TEXT, PRIMARY KEY (kind, version, key))")
    except (sqlite3.Error, OSError) as e:
        _give_up(e)
        return None
    _STATE["conn"], _STATE["pid"] = conn, os.getpid()
    return conn


def _give_up(error: Exception) -> None:
    logging.warning("op property cache %s is not usable (%s); computing without it",
                    _STATE["path"], error)
    _close()
    _STATE["path"] = None


def _close() -> None:
    conn = _STATE["conn"]
    if conn is not None and _STATE["pid"] == os.getpid():
        conn.close()
    _STATE["conn"], _STATE["pid"] = None, -1


def _version() -> str:
    """A hash of the nas code that computes op properties and of the jax/flax versions."""
    if not _VERSION:
        import flax
        import jax

        digest = hashlib.sha256(f"{jax.__version__} {flax.__version__}".encode())
        root = Path(__file__).resolve().parent.parent
        for sub in _SOURCE_DIRS:
            for source in sorted((root / sub).glob("*.py")):
                digest.update(source.name.encode())
                digest.update(source.read_bytes())
        _VERSION.append(digest.hexdigest()[:16])
    return _VERSION[0]
