"""A finished study, answered fast: whether the report in `<workdir>/report/` shows the
study as it is now, and what a rerun of the finished search prints.

Why: the driver's imports (JAX, orbax, the zoo) and set-up take most of a rerun's time,
and rewriting a report of 100,000 candidates takes minutes, while "is it finished?" needs
the study's status counts only. A finished candidate never changes, and every other change
a report shows moves a candidate's status or adds one, so the status counts and the newest
id (a few index reads) identify what a report was written from. The stamp is written
after the report and names the files it vouches for, so a report interrupted half-way or
deleted is never taken as current.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from nas.atomic import atomic_write_text
from nas.search.store.finals import search_complete
from nas.search.store.study import DB_NAME, Study, StudyNotFoundError
from nas.search.strategy.settings import OPERATIONAL, without_added

STAMP = ".study_state.json"
FILES = ("report.html", "report.csv", "pareto.png")
# The code that renders a report: a change to it makes every report stale.
RENDERERS = ("report.py", "report_candidate.py", "report_text.py", "highlights.py", "svg.py")


def study_state(study: Any) -> dict[str, Any]:
    """What a report of `study` depends on: its counts, its newest id, the renderers."""
    digest = hashlib.sha256()
    for name in RENDERERS:
        path = Path(__file__).with_name(name)
        digest.update(path.read_bytes() if path.is_file() else b"")
    return {"counts": study.counts(), "last_id": study.last_id(),
            "renderer": digest.hexdigest()[:16]}


def is_current(study: Any) -> bool:
    """Whether `<workdir>/report` was written from the study as it is now and all its files
    are there."""
    out = study.workdir / "report"
    try:
        stamp = json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return all((out / name).is_file() for name in FILES) and stamp == study_state(study)


def mark_current(study: Any, state: dict[str, Any]) -> None:
    """Record that `<workdir>/report` shows `state` (taken before it was written, so a
    change made meanwhile makes the next check rewrite it)."""
    atomic_write_text(study.workdir / "report" / STAMP, json.dumps(state, sort_keys=True))


def write_if_stale(study: Any) -> Path:
    """The report's path, writing it first unless it is current."""
    from nas.search.reporting.report import write_report

    if is_current(study):
        return study.workdir / "report" / "report.html"
    state = study_state(study)
    path = write_report(study)
    mark_current(study, state)
    return path


def finished_line(workdir: str, config: Any) -> str | None:
    """The line a rerun of the finished search in `workdir` prints (its counts and its
    report, rewritten only when stale); None when there is no finished study there or its
    stored config differs from `config` in a field that is not operational (the driver
    then opens it as usual and names the values it ignores)."""
    if not (Path(workdir) / DB_NAME).is_file():
        return None
    try:
        study = Study.load(workdir)
    except ValueError:  # the driver reports it in its own words
        return None
    given = without_added(json.loads(json.dumps(config.to_dict(), default=list)),
                          study.config)
    if _decisive(given) != _decisive(study.config):
        return None
    counts = study.counts()
    max_candidates = int(config.search.max_candidates)
    if not any(counts.values()) or not search_complete(study, max_candidates, counts=counts):
        return None
    return finished_text(workdir, study, max_candidates, counts)


def finished_text(workdir: str, study: Any, max_candidates: int,
                  counts: dict[str, int] | None = None) -> str:
    """What a rerun of a finished search prints: its counts (`counts`, where read
    already), its budget and its report, rewritten first only when stale."""
    counts = study.counts() if counts is None else counts
    shown = ", ".join(f"{s} {n}" for s, n in counts.items() if n)
    return (f"the search in {workdir} is finished ({shown}; max_candidates "
            f"{max_candidates}); report: {write_if_stale(study)}")


def _decisive(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without the search fields that may change on resume."""
    search = {k: v for k, v in (config.get("search") or {}).items() if k not in OPERATIONAL}
    return {**config, "search": search}


def stored_budget(workdir: str) -> int | None:
    """The `search.max_candidates` the study in `workdir` last ran to; None when there is
    no study with candidates yet. Why: a config file's own default must not silently
    extend a finished search that was run with another budget; a command line that names
    a new budget (`nas-search`) replaces it."""
    try:
        study = Study.load(workdir)
    except StudyNotFoundError:
        return None
    try:
        return study.max_candidates if any(study.counts().values()) else None
    finally:
        study.close()
