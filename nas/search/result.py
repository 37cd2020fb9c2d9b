"""`SearchResult`: a search as Python values (the model to call, the best few, a front,
the summary). The study in the workdir stays the one source, so a result opened later, one
made by `nas-search` or one still running all answer the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nas.search.store.candidate import Candidate, Status
from nas.search.store.export import export_candidate
from nas.search.store.finals import answer
from nas.search.store.study import Study

EXPORTS = "exports"  # loaded candidates are exported here once, in the workdir


def candidate_id(study: Study, value: int | str) -> tuple[int, str, Any]:
    """(candidate id, a note, the weights to take) for an id, "recommended" or "best"
    (highest validation accuracy); one ValueError line when there is none yet. The weights
    are the finals' retrain of the recommended candidate (`finals_rules.Run`) when that is
    the model taken home (`finals_rules.TakeHome`), else None (the candidate's own)."""
    from nas.search.strategy import recommend

    if isinstance(value, int) and not isinstance(value, bool):
        return value, "", None
    text = str(value).strip().lower()
    if text == "best":
        chosen = recommend.best_by_validation(study.candidates(Status.DONE))
        if chosen is None:
            raise ValueError(f"id={value}: no finished candidate in the study yet")
        return chosen.id, " (best validation accuracy)", None
    if text == "recommended":
        found = answer(study)
        rec = found.recommendation
        if rec.candidate is None and rec.closest is not None:  # none within the bounds
            raise ValueError(f"id={value}: {rec.reason}")
        if rec.candidate is None:
            raise ValueError(f"id={value}: no finished candidate in the study yet")
        home = found.take_home.run if found.take_home is not None else None
        return rec.candidate.id, " (recommended)", home
    try:
        return int(text), "", None
    except ValueError:
        raise ValueError(f"id: expected a candidate id, 'recommended' or 'best', got "
                         f"{value!r}") from None


class SearchResult:
    """The study of a search, read through; `study` is the `Study`."""

    def __init__(self, study: Study) -> None:
        self.study = study

    @classmethod
    def load(cls, workdir: str | os.PathLike) -> SearchResult:
        """The result of the study in `workdir`."""
        return cls(Study.load(workdir))

    @property
    def workdir(self) -> Path:
        return Path(self.study.workdir)

    @property
    def recommended(self) -> Any:
        """The recommended candidate, loaded (`nas.load_candidate`): call it on a batch."""
        return self.load_candidate("recommended")

    def load_candidate(self, id: int | str = "recommended") -> Any:  # noqa: A002
        """Candidate `id` (or "recommended", "best") as `nas.load_candidate` loads it, from
        its export in the workdir (written the first time it is asked for)."""
        from nas.io.candidate import load_candidate

        cid, _, home = candidate_id(self.study, id)
        name = f"candidate_{cid}" + ("_home" if home is not None else "")
        path = self.workdir / EXPORTS / f"{name}.zip"
        if not path.is_file():
            export_candidate(self.study, cid, path, home)
        return load_candidate(path)

    def best(self, k: int = 5) -> list[Candidate]:
        """The `k` most accurate done candidates on validation (what the search decided on)."""
        return self.study.best(k)

    def front(self, cost: str = "flops") -> list[Candidate]:
        """The done candidates on the accuracy / `cost` Pareto front, most accurate first."""
        return self.study.pareto_front(cost)

    def candidates(self, status: str | None = None) -> list[Candidate]:
        """Every candidate (or those with `status`), by id."""
        return self.study.candidates(status) if status else self.study.candidates()

    def dataframe(self) -> Any:
        """A pandas DataFrame as Optuna's `trials_dataframe()`: one row per candidate (by
        id) with its parent, status, generation, move (`kind`), hyperparameters
        (`hparams_<name>`), every plain metric and cost (not the per-example `*_correct`
        bits), error and times. Needs pandas (the `notebook` extra)."""
        try:
            import pandas
        except ImportError:
            raise ValueError("dataframe: needs pandas (pip install -e '.[notebook]')") from None
        rows = []
        for c in self.study.candidates():
            row: dict[str, Any] = {"id": c.id, "parent": c.parent_id, "status": c.status,
                                   "generation": c.generation,
                                   "kind": c.inheritance.kind or (
                                       "seed" if c.parent_id is None else None)}
            row.update({f"hparams_{k}": v for k, v in
                        sorted((c.inheritance.hparams or {}).items())})
            row.update({k: v for k, v in c.metrics.items()
                        if isinstance(v, int | float | bool | str) and not k.endswith("_correct")})
            row.update(error=c.error, fingerprint=c.fingerprint, worker=c.worker,
                       created_at=c.created_at, started_at=c.started_at,
                       finished_at=c.finished_at)
            rows.append(row)
        frame = pandas.DataFrame(rows, columns=None if rows else ["id", "parent", "status"])
        return frame.set_index("id")

    def summary(self) -> str:
        """The text `nas-search` prints at the end."""
        from nas.search.reporting.report_text import summary

        return summary(self.study)

    def export(self, path: str | os.PathLike, id: int | str = "recommended") -> Path:  # noqa: A002
        """Candidate `id` as one file that `nas.load_candidate` loads (`nas-search export`)."""
        cid, _, home = candidate_id(self.study, id)
        return export_candidate(self.study, cid, path, home)

    def export_flax(self, directory: str | os.PathLike, id: int | str = "recommended",  # noqa: A002
                    api: str | None = None) -> Path:
        """Candidate `id` as plain Flax code (`nas-search export --format=flax`); `api`
        "linen" or "nnx" (by default the seed's, as `nas.from_flax` imported it)."""
        from nas.interop.flax_code import check_out_dir
        from nas.search.store.export import export_flax_code

        check_out_dir(Path(directory))
        cid, _, home = candidate_id(self.study, id)
        return export_flax_code(self.study, cid, directory, home, api=api)

    def __repr__(self) -> str:
        counts = ", ".join(f"{s} {n}" for s, n in self.study.counts().items() if n)
        return f"SearchResult({str(self.workdir)!r}: {counts or 'no candidates'})"
