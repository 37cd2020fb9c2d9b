"""Whether the report in `<workdir>/report/` shows the study as it is now.

Why: rerunning a finished search says so and names its report; rewriting a report of
100,000 candidates for that takes minutes. A finished candidate never changes, and every
other change a report shows moves a candidate's status or adds one, so the status counts
and the newest id (both a few index reads, `Study.counts`, `Study.last_id`) identify what
a report was written from. The stamp is written after the report and names the files it
vouches for, so a report interrupted half-way or deleted is never taken as current.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from nas.atomic import atomic_write_text

STAMP = ".study_state.json"
FILES = ("report.html", "report.csv", "pareto.png")
# The code that renders a report: a change to it makes every report stale.
RENDERERS = ("report.py", "report_candidate.py", "report_text.py", "highlights.py", "svg.py")


def study_state(study: Any) -> dict[str, Any]:
    """What a report of `study` depends on: the study's counts and newest id, and the
    code that renders it."""
    digest = hashlib.sha256()
    for name in RENDERERS:
        path = Path(__file__).with_name(name)
        digest.update(path.read_bytes() if path.is_file() else b"")
    return {"counts": study.counts(), "last_id": study.last_id(),
            "renderer": digest.hexdigest()[:16]}


def is_current(study: Any, out_dir: str | os.PathLike | None = None) -> bool:
    """Whether the report in `out_dir` (default `<workdir>/report`) was written from the
    study as it is now and all its files are there."""
    out = Path(out_dir) if out_dir is not None else study.workdir / "report"
    try:
        stamp = json.loads((out / STAMP).read_text())
    except (OSError, ValueError):
        return False
    if not all((out / name).is_file() for name in FILES):
        return False
    return stamp == study_state(study)


def mark_current(study: Any, state: dict[str, Any], out_dir: str | os.PathLike | None = None
                 ) -> None:
    """Record that the report in `out_dir` shows `state` (taken before it was written, so
    a change made meanwhile makes the next check rewrite it)."""
    out = Path(out_dir) if out_dir is not None else study.workdir / "report"
    atomic_write_text(out / STAMP, json.dumps(state, sort_keys=True))


def write_if_stale(study: Any) -> Path:
    """The report's path, writing it first unless it is current."""
    from nas.search.reporting.report import write_report

    path = study.workdir / "report" / "report.html"
    if is_current(study):
        return path
    state = study_state(study)
    path = write_report(study)
    mark_current(study, state)
    return path
