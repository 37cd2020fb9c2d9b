"""A rerun of a finished search, answered without building the driver.

Why: the driver's imports (JAX, orbax, the zoo) and set-up take most of a rerun's time,
while "is it finished?" needs the study's status counts only. When the given config
matches the stored one (operational fields aside) the answer is read from the study here;
otherwise the driver opens it as usual and names the values it ignores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nas.search.store.candidate import FINISHED
from nas.search.store.finals import finals_finished
from nas.search.store.study import DB_NAME, MAX_CANDIDATES, Study, StudyNotFoundError
from nas.search.strategy.settings import OPERATIONAL, without_added


def finished_line(workdir: str, config: Any) -> str | None:
    """The line a rerun of the finished search in `workdir` prints (its counts and its
    report, rewritten only when stale); None when there is no finished study there or its
    stored config differs from `config` in a field that is not operational."""
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
    if not any(counts.values()) or sum(counts[s] for s in FINISHED) < max_candidates \
            or not finals_finished(study):
        return None
    from nas.search.reporting.report_state import write_if_stale

    shown = ", ".join(f"{s} {n}" for s, n in counts.items() if n)
    return (f"the search in {workdir} is finished ({shown}; max_candidates "
            f"{max_candidates}); report: {write_if_stale(study)}")


def _decisive(config: dict[str, Any]) -> dict[str, Any]:
    """`config` without the search fields that may change on resume."""
    search = {k: v for k, v in (config.get("search") or {}).items() if k not in OPERATIONAL}
    return {**config, "search": search}


def stored_budget(workdir: str) -> int | None:
    """The `search.max_candidates` the study in `workdir` last ran to; None when there is
    no study with candidates yet. Why: a config file's own default (8 in the README's)
    must not silently extend a finished search that was run with another budget; a
    command line that names a new budget (`nas-search`) replaces it."""
    try:
        study = Study.load(workdir)
    except StudyNotFoundError:
        return None
    try:
        if not any(study.counts().values()):
            return None
        first = (study.config.get("search") or {}).get("max_candidates")
        value = study.get_state(MAX_CANDIDATES, first)
        return None if value is None else int(value)
    finally:
        study.close()
