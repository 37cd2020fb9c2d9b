"""Reading a study: candidates by id, status, fingerprint or rank, the Pareto front, the
done rows that selection reads, counts, the driver's saved state.

Reads never block the search's writes (WAL), so the dashboard and reports read beside a
running search.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nas.search.store import _schema
from nas.search.store.candidate import STATUSES, Candidate, candidate_from_row
from nas.search.store.study_rows import (
    LIGHT_COSTS,
    SELECT,
    SELECT_METRICS,
    STATE_PREFIX,
    StudyRows,
    check_status,
    json_path,
)
from nas.search.strategy.pareto import ParetoCurve
from nas.search.strategy.population import Finished
from nas.search.strategy.selection import (
    MEASURED_COSTS,
    check_cost,
    higher_better,
    spread_name,
)


class StudyQueries(StudyRows):
    """`Study.get`, `candidates`, `pareto_front`, `best`, `done_rows`, `counts`, ..."""

    def get_state(self, key: str, default: Any = None) -> Any:
        """A value saved with `set_state` (or `add(state=...)`), else `default`."""
        with self._db.read() as c:
            row = c.execute("SELECT value FROM meta WHERE key=?", (STATE_PREFIX + key,)).fetchone()
        if row is None:
            return default
        try:
            return json.loads(row[0])
        except ValueError as e:
            raise ValueError(f"{self.path}: state {key!r} holds damaged JSON ({e})") from None

    def get(self, candidate_id: int) -> Candidate:
        """The candidate with this id; ValueError if there is none."""
        with self._db.read() as c:
            return self._get(c, candidate_id)

    def candidates(self, status: str | Iterable[str] | None = None, *,
                   with_graphs: bool = True) -> list[Candidate]:
        """All candidates (or those with the given status/statuses), by id.

        `with_graphs=False` leaves out the large fields (graph, spec, properties,
        inheritance, blocks: empty or None), for listings of metrics over a large study."""
        query, args, where = (SELECT if with_graphs else SELECT_METRICS), [], ""
        if status is not None:
            statuses = [status] if isinstance(status, str) else list(status)
            for s in statuses:
                check_status(s)
            where = f" WHERE status IN ({', '.join('?' * len(statuses))})"
            query, args = query + where, statuses
        with self._db.read() as c:
            rows = c.execute(query + " ORDER BY id", args).fetchall()
            rungs = self._rungs(c, None, where and (f"SELECT id FROM candidates{where}", args))
        return [self._with_rungs(candidate_from_row(r, self.path), rungs) for r in rows]

    def latest(self, k: int, status: str | Iterable[str]) -> list[Candidate]:
        """The `k` newest candidates with the given status(es), newest first: ids from the
        status index, then only those rows."""
        statuses = [status] if isinstance(status, str) else list(status)
        for s in statuses:
            check_status(s)
        with self._db.read() as c:
            ids = sorted((i for s in statuses for (i,) in c.execute(
                "SELECT id FROM candidates WHERE status=? ORDER BY id DESC LIMIT ?", (s, k))),
                reverse=True)[:k]
            return [self._get(c, i) for i in ids]

    def last_id(self) -> int:
        """The newest id given to a candidate, 0 in an empty study (a refused child's
        included: its row left the table, its id is not given again). Why not the largest
        id in the table: the driver's next proposal reads results by id
        (`search.pipeline_depth`), which must not depend on whether the newest child was
        refused yet."""
        with self._db.read() as c:
            newest = int(c.execute("SELECT MAX(id) FROM candidates").fetchone()[0] or 0)
            given = c.execute("SELECT seq FROM sqlite_sequence WHERE name='candidates'"
                              ).fetchone()
        return max(newest, int(given[0]) if given else 0)

    def first_unfinished_id(self) -> int | None:
        """The oldest pending or running candidate's id; None when every one is finished.
        Two lookups in the status index, whatever the study's size."""
        with self._db.read() as c:
            ids = [row[0] for status in ("pending", "running") for row in c.execute(
                "SELECT id FROM candidates WHERE status=? ORDER BY id LIMIT 1", (status,))]
        return min(ids, default=None)

    def done_rows(self, after: int = 0, through: int | None = None) -> list[Finished]:
        """Done candidates with `after` < id <= `through` (no bound: every later one), by
        id, with only what selection reads (no graph; the packed validation results that
        paired ties compare): a primary-key range read, so the
        driver reads each finished candidate once (`nas.search.strategy.population`)."""
        measured = self.user_costs  # read from the metrics' JSON, only those configured
        users = (*measured, *map(spread_name, measured))  # with their spreads
        query = (f"SELECT id, parent_id, accuracy, {', '.join(LIGHT_COSTS)}, "
                 f"{_schema.VAL_EXAMPLES}, e.count, e.bits"
                 + "".join(", json_extract(metrics_json, ?)" for _ in users)
                 + " FROM candidates LEFT JOIN examples e ON e.candidate_id = id AND "
                 "e.split = 'validation' WHERE id > ?")
        args: list[Any] = [*(json_path(u) for u in users), int(after)]
        if through is not None:
            query += " AND id <= ?"
            args.append(int(through))
        with self._db.read() as c:
            rows = c.execute(query + " AND status='done' ORDER BY id", args).fetchall()
        return [Finished(*row[:8], val_count=row[8],
                         val_bits=None if row[9] is None else bytes(row[9]),
                         user_costs={u: v for u, v in zip(users, row[10:], strict=True)
                                     if v is not None}) for row in rows]

    def move_rows(self, through: int) -> list[tuple[int, int | None, str, float | None,
                                                    float | None, str | None]]:
        """(id, parent id, status, accuracy, flops, move kind) of every candidate with id
        <= `through`, by id: what `nas.search.strategy.move_mix` counts."""
        with self._db.read() as c:
            rows = c.execute(
                "SELECT id, parent_id, status, accuracy, flops,"
                " json_extract(inheritance_json, '$.kind') FROM candidates WHERE id <= ?"
                " ORDER BY id", (int(through),)).fetchall()
        return [tuple(r) for r in rows]

    def has_candidate(self, candidate_id: int) -> bool:
        """Whether the study has a candidate `candidate_id` (a refused child's id has
        none)."""
        with self._db.read() as c:
            return c.execute("SELECT 1 FROM candidates WHERE id=?",
                             (int(candidate_id),)).fetchone() is not None

    def find(self, fingerprint: str) -> list[int]:
        """Ids of candidates with this fingerprint."""
        with self._db.read() as c:
            rows = c.execute(
                "SELECT id FROM candidates WHERE fingerprint=? ORDER BY id", (fingerprint,)
            ).fetchall()
        return [r[0] for r in rows]

    def counts(self) -> dict[str, int]:
        """Number of candidates per status (every status present, zeros included)."""
        query = ("SELECT status, n FROM status_counts" if self._counted else
                 "SELECT status, COUNT(*) FROM candidates GROUP BY status")
        with self._db.read() as c:
            rows = c.execute(query).fetchall()
        out = dict.fromkeys(STATUSES, 0)
        out.update(rows)
        return out

    def rung_counts(self) -> dict[int, tuple[float, int]]:
        """rung index -> (its epochs, number of results recorded there)."""
        with self._db.read() as c:
            rows = c.execute("SELECT rung, MAX(epochs), COUNT(*) FROM rungs GROUP BY rung"
                             " ORDER BY rung").fetchall()
        return {int(r): (float(e), int(n)) for r, e, n in rows}

    def feasible_count(self, bounds: Mapping[str, float]) -> int:
        """How many done candidates are within every bound ({cost: upper bound}, as
        `search.constraints`): one count over the table, whatever the study's size."""
        where, args = [], []
        for cost, bound in bounds.items():
            check_cost(cost, user_costs=self.user_costs)
            if cost in self.user_costs or cost in MEASURED_COSTS:
                where.append("json_extract(metrics_json, ?) <= ?")
                args += [json_path(cost), float(bound)]
            else:
                where.append(f"{cost} <= ?")
                args.append(float(bound))
        with self._db.read() as c:
            return int(c.execute(
                "SELECT COUNT(*) FROM candidates WHERE status='done' AND accuracy IS NOT NULL"
                + "".join(f" AND {w}" for w in where), args).fetchone()[0])

    def pareto_front(self, cost: str = "flops") -> list[Candidate]:
        """Done candidates on the accuracy/`cost` front, from most accurate to cheapest.

        Candidates tied with a front point (same accuracy and cost) are all included.
        Only the front's rows are read whole; the rest is one pass over an index.
        """
        check_cost(cost, user_costs=self.user_costs)
        column, args = cost, []
        if cost in self.user_costs or cost in MEASURED_COSTS:  # a number in the metrics' JSON
            column = "json_extract(metrics_json, ?)"
            args = [json_path(cost)]
            where = "json_type(metrics_json, ?) IN ('integer', 'real')"
            args += args
        else:
            where = f"{cost} IS NOT NULL"
        with self._db.read() as c:
            done = c.execute(f"SELECT id, accuracy, {column} FROM candidates WHERE "
                             f"status='done' AND accuracy IS NOT NULL AND {where}"
                             " ORDER BY id", args).fetchall()
        if not done:
            return []
        curve = ParetoCurve([(a, v) for _, a, v in done], (True, higher_better(cost)))
        order = {tuple(p): i for i, p in enumerate(curve.points.tolist())}
        front = [(order[(a, float(v))], i) for i, a, v in done if (a, float(v)) in order]
        with self._db.read() as c:
            return [self._get(c, i) for _, i in sorted(front)]

    def best(self, k: int = 5) -> list[Candidate]:
        """The `k` most accurate done candidates (ties: fewer FLOPs, then older)."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k: must be an integer >= 0, got {k!r}")
        with self._db.read() as c:
            ids = c.execute("SELECT id FROM candidates WHERE status='done' ORDER BY accuracy"
                            " DESC, flops IS NULL, flops, id LIMIT ?", (k,)).fetchall()
            return [self._get(c, i) for (i,) in ids]

    def export(self, candidate_id: int, path: str | os.PathLike) -> Path:
        """Write one candidate as a self-contained file, atomically: its graph, trained
        weights, training settings and metrics (`nas.search.store.export`); `nas.load_candidate`
        and `nas-train --graph` read it."""
        from nas.search.store.export import export_candidate

        return export_candidate(self, candidate_id, path)
