"""Claims as leases: which worker trains which candidate, and what happens when one dies.

A claim marks a pending candidate running for `lease_s` seconds, which its worker renews
(`nas.search.store.lease.LeaseKeeper`) while it trains. A lease that expires, or whose
worker process on this host has exited, is re-queued by the next claim; after
`max_attempts` claims a candidate fails instead of being retried forever.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sqlite3
import time

from nas.search.store.candidate import Candidate
from nas.search.store.study_rows import StudyRows
from nas.search.strategy.settings import stored_value

DEFAULT_MAX_ATTEMPTS = stored_value(None, "max_attempts")
DEFAULT_LEASE_S = stored_value(None, "lease_s")


class StudyLeases(StudyRows):
    """`Study.claim`, `renew`, `release`, `holds` and the re-queues."""

    def claim(self, worker: str | None = None, candidate_id: int | None = None, *,
              lease_s: float | None = None) -> Candidate | None:
        """Atomically mark the oldest pending candidate (or `candidate_id`) running; a
        pending one without a parent (a seed, an enqueued architecture) comes before any
        proposed child, so what a user enqueues trains next.

        The claim is a lease of `lease_s` seconds (default: the config's `lease_s`, else
        60) that the worker must `renew` while it trains. Claims whose lease expired (or
        whose worker process on this host is gone) are re-queued first, in the same
        transaction, so whoever claims next picks them up. Returns the claimed candidate,
        or None if nothing (or not that one) is pending. Each claim counts one attempt.
        """
        worker = worker or default_worker()
        lease_s = self._lease_s(lease_s)
        with self._db.write() as c:
            self._requeue_expired(c, self._max_attempts(None))
            if candidate_id is None:
                row = c.execute(
                    "SELECT id FROM candidates WHERE status='pending'"
                    " ORDER BY parent_id IS NOT NULL, id LIMIT 1"
                ).fetchone()
                if row is None:
                    return None
                cid = row[0]
            else:
                status = self._status(c, candidate_id)
                if status != "pending":
                    return None
                cid = candidate_id
            now = time.time()
            c.execute(
                "UPDATE candidates SET status='running', worker=?, started_at=?, finished_at=NULL,"
                " attempts=attempts+1, lease_until=? WHERE id=?",
                (worker, now, now + lease_s, cid),
            )
            return self._get(c, cid)

    def renew(self, candidate_id: int, worker: str, lease_s: float | None = None) -> bool:
        """Extend `worker`'s lease on a running candidate; False if it no longer holds it
        (its lease expired and the candidate was re-queued or claimed by another worker):
        the worker must then stop training it and record nothing."""
        lease_s = self._lease_s(lease_s)
        with self._db.write() as c:
            cur = c.execute(
                "UPDATE candidates SET lease_until=? WHERE id=? AND status='running' AND worker=?",
                (time.time() + lease_s, candidate_id, worker),
            )
            return cur.rowcount == 1

    def release(self, candidate_id: int, worker: str) -> bool:
        """Give a claim back (e.g. on Ctrl-C): pending again, the attempt not counted."""
        with self._db.write() as c:
            cur = c.execute(
                "UPDATE candidates SET status='pending', worker=NULL, started_at=NULL,"
                " lease_until=NULL, attempts=MAX(attempts-1, 0)"
                " WHERE id=? AND status='running' AND worker=?",
                (candidate_id, worker),
            )
            return cur.rowcount == 1

    def requeue_expired(self, max_attempts: int | None = None) -> tuple[list[int], list[int]]:
        """Re-queue running candidates whose lease expired (their worker died or hung);
        a candidate whose attempts reached `max_attempts` is failed instead. Safe to call
        by anyone at any time: live claims are left alone. Returns (requeued, failed)."""
        max_attempts = self._max_attempts(max_attempts)
        with self._db.write() as c:
            return self._requeue_expired(c, max_attempts)

    def holds(self, candidate_id: int, worker: str) -> bool:
        """Whether `worker` holds the running claim on `candidate_id`."""
        with self._db.read() as c:
            row = c.execute("SELECT status, worker FROM candidates WHERE id=?",
                            (candidate_id,)).fetchone()
        return row is not None and row[0] == "running" and row[1] == worker

    def requeue_running(
        self, max_attempts: int | None = None, *, worker: str | None = None
    ) -> tuple[list[int], list[int]]:
        """Return interrupted candidates (status running) to pending, or fail them.

        Only for a study no live worker uses (tests, repair): drivers and workers rely on
        leases instead (`requeue_expired`, done by every `claim`). A candidate
        whose attempts reached `max_attempts` (default: config["max_attempts"] or 3) is
        marked failed instead, so a candidate that kills its process is not retried
        forever. `worker` restricts this to one worker's candidates (leave others' alone
        when external workers share the study). Returns (requeued ids, failed ids).
        """
        max_attempts = self._max_attempts(max_attempts)
        where, args = "status='running'", []
        if worker is not None:
            where, args = where + " AND worker=?", [worker]
        with self._db.write() as c:
            rows = c.execute(
                f"SELECT id, attempts, worker FROM candidates WHERE {where} ORDER BY id", args
            ).fetchall()
            requeued, failed = [], []
            now = time.time()
            for cid, attempts, who in rows:
                if attempts >= max_attempts:
                    c.execute(
                        "UPDATE candidates SET status='failed', error=?, finished_at=? WHERE id=?",
                        (
                            f"interrupted {attempts} time(s) (last worker {who}); "
                            f"gave up after max_attempts={max_attempts}",
                            now,
                            cid,
                        ),
                    )
                    failed.append(cid)
                else:
                    c.execute(
                        "UPDATE candidates SET status='pending', worker=NULL, started_at=NULL,"
                        " lease_until=NULL WHERE id=?",
                        (cid,),
                    )
                    requeued.append(cid)
            return requeued, failed

    def _max_attempts(self, max_attempts: int | None) -> int:
        if max_attempts is None:
            max_attempts = self.config.get("max_attempts",
                                           stored_value(self.config, "max_attempts"))
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts: must be an integer >= 1, got {max_attempts!r}")
        return max_attempts

    def _lease_s(self, lease_s: float | None) -> float:
        if lease_s is None:
            lease_s = self.config.get("lease_s", stored_value(self.config, "lease_s"))
        if isinstance(lease_s, bool) or not isinstance(lease_s, int | float) or not (
                0 < lease_s < 1e7):
            raise ValueError(f"lease_s: must be a number of seconds > 0, got {lease_s!r}")
        return float(lease_s)

    def _requeue_expired(self, c: sqlite3.Connection, max_attempts: int
                         ) -> tuple[list[int], list[int]]:
        now = time.time()
        rows = c.execute(
            "SELECT id, attempts, worker, lease_until FROM candidates WHERE status='running'"
            " ORDER BY id").fetchall()
        requeued, failed = [], []
        for cid, attempts, who, until in rows:
            if until is not None and until >= now and not dead_local_process(who):
                continue
            if attempts >= max_attempts:
                c.execute(
                    "UPDATE candidates SET status='failed', error=?, finished_at=?,"
                    " lease_until=NULL WHERE id=?",
                    (f"interrupted {attempts} time(s) (last worker {who}, lease expired); "
                     f"gave up after max_attempts={max_attempts}", now, cid))
                failed.append(cid)
            else:
                c.execute(
                    "UPDATE candidates SET status='pending', worker=NULL, started_at=NULL,"
                    " lease_until=NULL WHERE id=?", (cid,))
                requeued.append(cid)
        if requeued or failed:
            logging.info("%s: leases expired: re-queued %s, failed %s", self.path, requeued,
                         failed)
        return requeued, failed


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
