"""Opening a search's study: resume it with its stored config, or create it.

Why its own module: the driver and anything else that opens a study for a search (a
resumed run, a worker) read the same rule, which fields may change on resume
(`OPERATIONAL`) and which differences are named once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import ml_collections
from absl import logging

from nas.search.store.study import Study, StudyNotFoundError
from nas.search.strategy.settings import OPERATIONAL, without_added


def resumed_config(given: ml_collections.ConfigDict, study: Study) -> ml_collections.ConfigDict:
    """The stored config of a resumed study, with the given operational search fields."""
    if not study.config:
        return given
    config = ml_collections.ConfigDict(study.config)
    for key in OPERATIONAL:
        if key in given.get("search", {}):
            config.search[key] = given.search[key]
    return config


def open_study(workdir: str, config: ml_collections.ConfigDict,
               check_new: Callable[[ml_collections.ConfigDict], Any] | None = None) -> Study:
    """Resume the study in `workdir` (its stored config wins, except `OPERATIONAL` search
    fields, which may change silently), or create it. Other differences are named once.

    A study with no candidates yet has not started (its first run failed before seeding):
    the given config replaces the stored one, so a corrected command starts it. `check_new`
    runs on the config first in both of those cases, before anything is written."""
    try:
        study = Study.load(workdir)
    except StudyNotFoundError:
        if check_new is not None:
            check_new(config)
        return Study.open(workdir, config=config.to_dict())
    if not any(study.counts().values()):
        if check_new is not None:
            check_new(config)
        if study.replace_config(config.to_dict()):
            return study
    given = without_added(json.loads(json.dumps(config.to_dict(), default=list)),
                          study.config)
    # an operational field's own fields (search.finals.k) change with it
    ignored = [f for f in differences(given, study.config, "")
               if not (f.startswith("search.")
                       and f.removeprefix("search.").split(".")[0] in OPERATIONAL)]
    if ignored:
        logging.warning("%s: resuming with its stored config; the given values of %s are "
                        "ignored (only %s may change on resume)", study.path,
                        ", ".join(ignored), ", ".join(f"search.{k}" for k in OPERATIONAL))
    return study


def differences(given: Any, stored: Any, prefix: str) -> list[str]:
    if isinstance(given, dict) and isinstance(stored, dict):
        out = []
        for key in sorted(set(given) | set(stored)):
            out += differences(given.get(key), stored.get(key), f"{prefix}{key}.")
        return out
    return [] if given == stored else [prefix.rstrip(".")]
