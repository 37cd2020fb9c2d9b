"""`LeaseKeeper`: a thread that renews a worker's claims while their candidates train.

A claim is a lease (see `Study.claim`); the keeper renews every held lease at a quarter of
its length, on its own study connection, so a long compile or a slow step never lets a
live claim expire, while a dead worker's claims expire within one lease. A renewal that
fails means the lease was lost (it expired and someone re-queued the candidate): the id
moves to `lost`, and its trainer should stop and record nothing.
"""

from __future__ import annotations

import threading
from pathlib import Path

from absl import logging

from nas.search.store.study import Study


class LeaseKeeper:
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
                logging.warning("lease of candidate %d not renewed: %s", cid, e)
                continue
            if not ok:
                logging.warning("%s lost its lease on candidate %d; it will not be recorded",
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
