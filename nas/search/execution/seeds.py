"""Starting a search's study: resume it with its stored config, or create it, and the seeds
a new one starts from, in order: the validation front of an earlier study
(`search.start_from`), the `search.seed_graph` file (else the zoo model of
`train.model_name`, when nothing else is given), then `search.extra_seeds`.

Why everything is read and checked before the study exists: a bad seed is one line, and
nothing is written.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import ml_collections
import numpy as np
from absl import logging

from nas import zoo
from nas.graph import serialize
from nas.graph.reversible import is_reversible
from nas.io.candidate import read_graph_or_export_for
from nas.mutation import fingerprint_at
from nas.search.store.candidate import Status
from nas.search.store.study import DB_NAME, Study, StudyNotFoundError
from nas.search.strategy import blocks as blocks_lib
from nas.search.strategy.pareto import ParetoCurve
from nas.search.strategy.selection import cost_value
from nas.search.strategy.settings import OPERATIONAL, SearchSettings, without_added
from nas.train import preflight
from nas.train.checkpoint import load_variables
from nas.train.config import image_shape, with_defaults

START_FROM = "search.start_from"

T = TypeVar("T")

# ----------------------------------------------------------------------------- the study


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
               check_new: Callable[[ml_collections.ConfigDict], T] | None = None
               ) -> tuple[Study, T | None]:
    """Resume the study in `workdir` (its stored config wins, except `OPERATIONAL` search
    fields; other differences are named once), or create it. A study with no candidates
    yet takes the given config, so a corrected command starts it. `check_new` runs on the
    config first in both of those cases, before anything is written; its result comes back
    beside the study where the study holds the config it checked (else None: a resumed
    study, or one another driver created first with another config)."""
    try:
        study = Study.load(workdir)
    except StudyNotFoundError:
        checked = check_new(config) if check_new is not None else None
        study = Study.open(workdir, config=config.to_dict())
        return study, checked if study.holds_config(config) else None
    if not any(study.counts().values()):
        checked = check_new(config) if check_new is not None else None
        if study.replace_config(config.to_dict()):
            return study, checked
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
    return study, None


def differences(given: Any, stored: Any, prefix: str) -> list[str]:
    if isinstance(given, dict) and isinstance(stored, dict):
        out = []
        for key in sorted(set(given) | set(stored)):
            out += differences(given.get(key), stored.get(key), f"{prefix}{key}.")
        return out
    return [] if given == stored else [prefix.rstrip(".")]


def check_seed(config: ml_collections.ConfigDict, search: SearchSettings) -> list[SeedPart]:
    """Builds the seeds a new study of `config` would start from, refusing bad ones; the
    seeds, for the driver to add (`Driver.seed_population`) without building them again."""
    parts = seed_list(config.train, search)
    # the study keeps one candidate per architecture: two seeds of one are one line
    if len(parts) > 1:
        shape = (1, *image_shape(config.train))
        fingerprints = [fingerprint_at(p.graph, p.constants, shape) for p in parts]
        first: dict[str, str] = {}
        for part, fp in zip(parts, fingerprints, strict=True):
            if fp in first:
                raise ValueError(f"{part.source}: the same architecture as {first[fp]} "
                                 f"(expected each seed to be a different model)")
            first[fp] = part.source
    return parts


# ----------------------------------------------------------------------------- the seeds


@dataclasses.dataclass(frozen=True)
class SeedPart:
    """One seed: its graph, constants, weights (None: trained from scratch), blocks record
    (None: no blocks), and the field that named it."""

    graph: Any
    constants: dict[str, Any]
    variables: dict[str, Any] | None
    blocks: Any
    source: str


def zoo_part(train: ml_collections.ConfigDict, model_name: str | None = None,
             field: str = "config field 'train.model_name'") -> SeedPart:
    """The zoo model `model_name` (by default `train.model_name`), built without weights."""
    args = blocks_lib.builder_args(train)
    if model_name is not None:
        args["model_name"] = model_name
    try:
        graph, constants, built = zoo.builder(**args)()
    except ValueError as e:
        text = str(e)
        raise ValueError(text if text.startswith("train.") else f"{field}: {text}") from None
    blocks = None
    if not is_reversible(constants):  # a reversible one carries its own layout
        blocks = blocks_lib.blocks_record(args, built)
    return SeedPart(graph, constants, None, blocks, field)


def read_seed_graph(path: str, field: str = "config field 'search.seed_graph'"
                    ) -> tuple[Any, dict[str, Any], dict[str, Any] | None]:
    """(graph, constants, variables or None) from a graph JSON or a `nas-search export`
    file at `path` (an export brings its weights); errors name `field`."""
    found = read_graph_or_export_for(field, path)
    if not isinstance(found, bytes):
        return found.graph, dict(found.constants), found.variables
    try:
        graph, constants = serialize.load(found)
    except ValueError as e:
        raise ValueError(f"{field}: {path} is not a graph JSON or an exported candidate: "
                         f"{e}") from None
    return graph, dict(constants or {}), None


def file_part(train: ml_collections.ConfigDict, path: str, field: str) -> SeedPart:
    """A graph JSON or exported candidate, whose outputs must be the data's classes."""
    graph, constants, variables = read_seed_graph(path, field)
    preflight.check_outputs(graph, constants, with_defaults(train), f"{field}: {path}")
    return SeedPart(graph, constants, variables, None, field)


def seed_list(train: ml_collections.ConfigDict, search: SearchSettings) -> list[SeedPart]:
    """Every seed of a new study, in the order they are added."""
    out: list[SeedPart] = []
    if search.start_from:
        out += front_parts(search.start_from, train, search.selection.recommend_cost)
    if search.seed_graph:
        out.append(file_part(train, search.seed_graph, "config field 'search.seed_graph'"))
    elif not search.start_from:
        out.append(zoo_part(train))
    for i, name in enumerate(search.extra_seeds):
        field = f"config field 'search.extra_seeds[{i}]'"
        if name in zoo.MODEL_NAMES and not os.path.exists(name):
            out.append(zoo_part(train, name, field))
        else:
            out.append(file_part(train, os.path.expanduser(name), field))
    return out


# ----------------------------------------------------------------------------- start_from


def source_study(path: str) -> Any:
    """The study in `path` for `search.start_from` (read-only)."""
    where = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(where):
        raise ValueError(f"{START_FROM}: {path}: no such folder (expected the workdir of an "
                         f"earlier search)")
    if not os.path.isfile(os.path.join(where, DB_NAME)):
        raise ValueError(f"{START_FROM}: {path} is not a study (expected a search's workdir, "
                         f"with {DB_NAME})")
    try:
        return Study.load(where, read_only=True)
    except ValueError as e:
        raise ValueError(f"{START_FROM}: {path} is not a study (expected a search's "
                         f"workdir): {str(e).splitlines()[0]}") from None


def stored_shape(config: dict[str, Any]) -> tuple[int, int, int] | None:
    """The images a study's stored config trains on (H, W, C); None where it names none."""
    theirs = (config.get("train") or {}).get("input") or {}
    return image_shape({"input": theirs}) if "image_size" in theirs else None


def check_same_input(source: dict[str, Any], train: ml_collections.ConfigDict, path: str
                     ) -> None:
    """The earlier study's image shape must be this one's: its models need it."""
    a, b = stored_shape(source), image_shape(train)
    if a is None:
        raise ValueError(f"{START_FROM}: {path} is not a search's study (its config has no "
                         f"train.input.image_size)")
    if a != b:
        raise ValueError(f"{START_FROM}: the study in {path} trained on {a[0]}x{a[1]}x{a[2]} "
                         f"images, this search on {b[0]}x{b[1]}x{b[2]} (expected the same "
                         f"input shape: set train.input.image_size and train.input.channels "
                         f"to match)")


def validation_front(candidates: Sequence[Any], cost: str) -> list[Any]:
    """The done candidates no other beats on validation accuracy and `cost` at once (an
    equal pair keeps the older), the most accurate first (ties: cheaper, then older)."""
    done = sorted((c for c in candidates if c.status == Status.DONE
                   and c.accuracy is not None and cost_value(c, cost) is not None),
                  key=lambda c: c.id)
    if not done:
        return []
    curve = ParetoCurve(np.array([(c.accuracy, cost_value(c, cost)) for c in done],
                                 dtype=float), (True, False))
    return [done[i] for i in curve.indices.tolist()]


def front_parts(path: str, train: ml_collections.ConfigDict, cost: str) -> list[SeedPart]:
    """The validation front of the study in `path`, each with its trained weights."""
    study = source_study(path)
    try:
        check_same_input(study.config, train, path)
        done = study.candidates(Status.DONE)
        if not done:
            raise ValueError(f"{START_FROM}: the study in {path} has no done candidate "
                             f"(expected at least one to start from)")
        front = validation_front(done, cost)
        if not front:
            raise ValueError(f"{START_FROM}: no done candidate of the study in {path} has "
                             f"a value of {cost} (search.selection.recommend_cost); expected "
                             f"a cost it measured")
        parts = []
        for c in front:
            where = f"{START_FROM}: candidate {c.id} of {path}"
            try:
                variables = load_variables(str(c.checkpoint_path))
            except ValueError as e:
                raise ValueError(f"{where}: its weights cannot be read: "
                                 f"{str(e).splitlines()[0]}") from None
            graph, constants = serialize.load(c.graph_json)
            preflight.check_outputs(graph, constants, with_defaults(train), where)
            parts.append(SeedPart(graph, dict(constants or {}), variables, c.blocks, where))
        return parts
    finally:
        study.close()
