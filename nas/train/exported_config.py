"""The config that `nas-train --graph=CANDIDATE --config.F=V` overrides when no
`--config=FILE` is given.

Why: absl's config flags accept `--config.F=V` only after a `--config=FILE`, and an
exported candidate carries its own training settings. `nas-train` names this file, with
the candidate as its argument, in that case: the overrides are then parsed and checked
against the candidate's own fields and their types, as they would be against a config
file's. Reading it has no effect beyond reading the candidate.
"""

from __future__ import annotations

import ml_collections

from nas.train.config import with_defaults


def get_config(path: str | None = None) -> ml_collections.ConfigDict:
    """The training settings of the candidate exported to `path`, with every default
    filled in. ValueError (one line, naming --graph) when `path` carries none."""
    from nas.io.candidate import read_graph_or_export_for

    if not path:
        raise ValueError("--graph: this config takes the exported candidate's path as its "
                         "argument")
    found = read_graph_or_export_for("--graph", path)
    if isinstance(found, bytes) or not found.train_config:
        raise ValueError(f"--graph: {path} carries no training settings, so --config.F=V "
                         f"needs --config=FILE to name the settings it overrides")
    try:
        return with_defaults(ml_collections.ConfigDict(found.train_config))
    except ValueError as e:
        raise ValueError(f"--graph: {path}: field 'train_config': {e}") from None
