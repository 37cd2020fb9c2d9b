"""What a new study starts from: its seeds, in the order they are added.

The seeds are, in order: the validation front of an earlier study (`search.start_from`,
the most accurate first), the `search.seed_graph` file (else the zoo model of
`train.model_name`, when nothing else is given), then `search.extra_seeds`. Each is
trained as the seed is (`search.seed_epochs`, its rounds) and is a parent for proposals.

"The seed" that the recommendation, the finals and the reports compare with is the first
of them (`nas.search.strategy.recommend.seed_of`): with one seed nothing changes.

Why everything is read and checked here, before the study exists: a bad seed (a missing
folder, another input shape, a duplicate) is one line, and nothing is written.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import ml_collections

from nas import zoo
from nas.graph.reversible import is_reversible
from nas.search.store.candidate import Status
from nas.search.strategy import blocks as blocks_lib
from nas.search.strategy.settings import SearchSettings

START_FROM = "search.start_from"


@dataclasses.dataclass(frozen=True)
class SeedPart:
    """One seed: its graph, constants, weights (None: trained from scratch), blocks record
    (None: no blocks), and where it came from (the field that named it)."""

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
    file at `path`; errors name `field`.

    An exported candidate brings its weights (a version 1 export, those of its
    `checkpoint_path`, which must still exist); a plain graph JSON brings none."""
    from nas.graph import serialize
    from nas.io.candidate import read_graph_or_export_for

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
    """A graph JSON or exported candidate (with its weights when it has them), whose
    outputs must be the data's classes."""
    from nas.train import preflight
    from nas.train.config import with_defaults

    graph, constants, variables = read_seed_graph(path, field)
    preflight.check_outputs(graph, constants, with_defaults(train), f"{field}: {path}")
    return SeedPart(graph, constants, variables, None, field)


def seed_list(train: ml_collections.ConfigDict, search: SearchSettings) -> list[SeedPart]:
    """Every seed of a new study, in the order they are added (the module says which)."""
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


def check_distinct(parts: Sequence[SeedPart], fingerprints: Sequence[str]) -> None:
    """Two seeds of the same architecture are one line naming both (the study keeps one
    candidate per architecture)."""
    first: dict[str, str] = {}
    for part, fp in zip(parts, fingerprints, strict=True):
        if fp in first:
            raise ValueError(f"{part.source}: the same architecture as {first[fp]} (expected "
                             f"each seed to be a different model)")
        first[fp] = part.source


# ----------------------------------------------------------------------------- start_from


def source_study(path: str) -> Any:
    """The study in `path` for `search.start_from`: a missing folder, or a folder that
    holds no study, is one line naming the setting."""
    from nas.search.store.study import DB_NAME, Study

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


def check_same_input(source: dict[str, Any], train: ml_collections.ConfigDict, path: str
                     ) -> None:
    """The earlier study's images (size and channels) must be this one's: its models were
    built for them."""
    from nas.train.config import image_shape

    theirs = (source.get("train") or {}).get("input") or {}
    if "image_size" not in theirs:
        raise ValueError(f"{START_FROM}: {path} is not a search's study (its config has no "
                         f"train.input.image_size)")
    a, b = image_shape({"input": theirs}), image_shape(train)
    if a != b:
        raise ValueError(f"{START_FROM}: the study in {path} trained on {a[0]}x{a[1]}x{a[2]} "
                         f"images, this search on {b[0]}x{b[1]}x{b[2]} (expected the same "
                         f"input shape: set train.input.image_size and train.input.channels "
                         f"to match)")


def validation_front(candidates: Sequence[Any], cost: str) -> list[Any]:
    """The done candidates no other beats on validation accuracy and `cost` at once (an
    equal pair keeps the older), the most accurate first (ties: cheaper, then older)."""
    from nas.search.strategy.selection import cost_value

    rows = [(c, cost_value(c, cost)) for c in candidates
            if c.status == Status.DONE and c.accuracy is not None]
    rows = [(c, v) for c, v in rows if v is not None]
    rows.sort(key=lambda r: (r[1], -r[0].accuracy, r[0].id))  # cheapest first
    front, best = [], None
    for c, _ in rows:
        if best is None or c.accuracy > best:
            front.append(c)
            best = c.accuracy
    return sorted(front, key=lambda c: (-c.accuracy, cost_value(c, cost), c.id))


def front_parts(path: str, train: ml_collections.ConfigDict, cost: str) -> list[SeedPart]:
    """The validation front of the study in `path` (accuracy against `cost`, this search's
    `search.selection.recommend_cost`), each with its trained weights."""
    from nas.graph.serialize import load
    from nas.train import preflight
    from nas.train.checkpoint import load_variables
    from nas.train.config import with_defaults

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
            graph, constants = load(c.graph_json)
            preflight.check_outputs(graph, constants, with_defaults(train), where)
            parts.append(SeedPart(graph, dict(constants or {}), variables, c.blocks, where))
        return parts
    finally:
        study.close()
