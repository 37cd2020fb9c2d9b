"""The keys of a study's `meta` table, in one place.

`Key`: the rows the store writes when it creates a study, which tell a study file from
another SQLite file (`_schema.check_study`) and hold its config. The others are the
search's state, kept beside its candidates with `Study.set_state` (each a row
`STATE_PREFIX + key`, so no state key can overwrite one of `Key`'s): read back by a
resumed driver, the workers and the reports. A module's own state (`finals_table.
FINALS_STATE`, the driver's notes) is named in that module.
"""

from __future__ import annotations

import enum


class Key(enum.StrEnum):
    """The meta rows of the store itself."""

    FORMAT = "format"  # `_schema.FORMAT` in every study
    SCHEMA_VERSION = "schema_version"
    CONFIG = "config"  # the study's config, JSON
    CREATED_AT = "created_at"  # Unix seconds


STATE_PREFIX = "state:"

# The driver's proposal counter: the next proposal's RNG stream and init folder.
PROPOSALS = "proposals"
# True once the driver ended its run (its budget spent or a stop), False while it runs:
# external workers stop claiming when it is set.
STOPPED = "stopped"
# `search.max_candidates` of the driver's last run, which workers and reports count to.
MAX_CANDIDATES = "max_candidates"
# A study with several seeds: how many it starts from, and how many of them are in it
# (a study without them has one seed, in once it has a candidate).
SEEDS = "seeds"
SEEDS_ADDED = "seeds_added"
