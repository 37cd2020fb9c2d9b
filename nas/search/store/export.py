"""`nas-search export`: one study candidate as a self-contained file (`nas.io.candidate`)
that still loads after the study is deleted, or (`--format=flax`) as plain Flax code and
its variables (`nas.interop.flax_code`) that a user's own pipeline runs without `nas`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nas.io import examples
from nas.io.candidate import ExportedCandidate, load_candidate, write_candidate
from nas.search.store.candidate import Status
from nas.search.strategy import hparams as hparams_lib
from nas.search.strategy import recommend
from nas.search.strategy.finals_rules import retrain_metrics
from nas.search.strategy.settings import SearchSettings, candidate_train_config
from nas.stats import paired


def export_candidate(study: Any, candidate_id: int, path: str | os.PathLike,
                     home: Any = None) -> Path:
    """Write candidate `candidate_id` of `study` to `path` atomically; returns the path.

    Its weights come from its final checkpoint (none without one, e.g. a failed one), its
    training settings are the study's `train` section as this candidate trained with it
    (`candidate_train_config`). With `home` (the finals' retrain of it, a `finals_rules.
    Run`): that model's weights, training settings and metrics instead, so the file's
    metrics describe exactly the weights it holds; its lineage is kept beside them."""
    from nas.train.checkpoint import load_variables
    from nas.train.config import image_shape, with_defaults

    cand = study.get(candidate_id)
    variables = load_variables(cand.checkpoint_path) if cand.checkpoint_path else None
    train_config = input_shape = None
    if "train" in study.config and "search" in study.config:
        train = with_defaults(study.config["train"]).to_dict()
        search = SearchSettings.from_stored(study.config)
        # a study written before searches held out a validation split names neither field
        held_out = bool({"validation_fraction", "validation_split"} & set(
            study.config["search"]))
        train_config = hparams_lib.apply(
            candidate_train_config(train, search, is_seed=cand.parent_id is None,
                                   held_out=held_out),
            cand.inheritance.hparams, cand.parent_id is None, search)
        input_shape = image_shape(train_config)
    if home is not None:
        variables, train_config = home_model(home)
    info = {
        "study": str(study.workdir.resolve()),
        "id": cand.id,
        "parent_id": cand.parent_id,
        "generation": cand.generation,
        "status": cand.status,
        "fingerprint": cand.fingerprint,
        "seed": cand.seed,
        "spec": cand.spec,
        "properties": cand.properties,
        "inheritance": cand.inheritance.to_json(),
        "error": cand.error,
        "rungs": list(cand.rungs),
        # which split each accuracy was measured on (nas.search.strategy.settings.decision_config)
        "accuracy_splits": {
            "accuracy": "validation (the search decided on it)",
            "test_accuracy": "test (reported only)",
        },
    }
    metrics = {**cand.metrics, **paired_metrics(study, cand)}
    if home is not None:
        info["take_home"] = {"run": home.name, "trained_on": "the search's training split "
                             "(the finals' recipe), chosen over the search's weights on "
                             "validation", "test_accuracy": home.metrics.get("test_accuracy"),
                             "test_examples": home.metrics.get("test_examples")}
        metrics = {**retrain_metrics(cand, home), **paired_metrics(study, cand, home)}
    return write_candidate(
        path,
        cand.graph,
        variables,
        input_shape=input_shape,
        train_config=train_config,
        metrics=metrics,
        info=info,
    )


def home_model(home: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(variables, training settings) of a take-home run (`nas.search.execution.finals`
    saves its weights in `<run>/final` and its settings in `<run>/train/config.json`)."""
    from nas.train.checkpoint import load_variables

    folder = Path(home.checkpoint_path).parent
    config = json.loads((folder / "train" / "config.json").read_text())
    return load_variables(home.checkpoint_path), config


def export_flax_code(study: Any, candidate_id: int, directory: str | os.PathLike,
                     home: Any = None, api: str | None = None) -> Path:
    """Write candidate `candidate_id` of `study` as `model.py` and `variables.msgpack` into
    `directory` (new or empty), from its final checkpoint and the image size it trained on;
    one without trained weights is refused in one line. `api` ("linen" or "nnx"): by
    default the seed's, as it was imported."""
    from nas.graph.serialize import graph_from_dict
    from nas.interop.flax_code import check_out_dir, export_flax
    from nas.train.checkpoint import load_variables
    from nas.train.config import image_shape, with_defaults

    check_out_dir(Path(directory))
    cand = study.get(candidate_id)
    if not cand.checkpoint_path:
        raise ValueError(f"candidate {cand.id} ({cand.status}) has no trained weights to "
                         f"export")
    if "train" not in study.config:
        raise ValueError(f"{study.path}: the study has no train section, so the candidate's "
                         f"input shape is unknown")
    shape = image_shape(with_defaults(study.config["train"]).to_dict())
    graph, constants = graph_from_dict(cand.graph)
    variables = (home_model(home)[0] if home is not None
                 else load_variables(cand.checkpoint_path))
    candidate = ExportedCandidate(
        path=f"candidate {cand.id}", graph=graph, constants=dict(constants or {}),
        variables=variables, input_shape=shape,
        train_config=dict(study.config["train"]), info={"api": seed_api(study)})
    return export_flax(candidate, directory, api=api)


def seed_api(study: Any) -> str:
    """"nnx" when the study's seed was imported from an NNX module (`nas.from_flax` records
    it in the seed's file), else "linen"."""
    path = (study.config.get("search") or {}).get("seed_graph") or ""
    if not path.endswith(".zip") or not os.path.isfile(path):
        return "linen"
    try:
        return load_candidate(path).info.get("api") or "linen"
    except ValueError:  # an unreadable seed file: the linen default
        return "linen"


def paired_metrics(study: Any, cand: Any, home: Any = None) -> dict[str, Any]:
    """Its per-example results ("val_correct", "test_correct": `nas.io.examples.to_text`)
    and its paired comparison with the search's seed on each split ("vs_seed"), where the
    study has them, so the file still tells how it compares after the study is gone. With
    `home` (a finals retrain of it), that model's results."""
    out: dict[str, Any] = {}
    pairs = recommend.Comparisons.of(study)
    mine = {"validation": pairs.validation.get(cand.id), "test": pairs.test.get(cand.id)}
    if home is not None:
        text = home.metrics.get("test_correct")
        mine = {"validation": home.correct,
                "test": examples.from_text(text, "test_correct") if text else None}
    for name, split in (("val_correct", "validation"), ("test_correct", "test")):
        if mine[split] is not None:
            out[name] = examples.to_text(mine[split])
    seed = recommend.seed_of(study.candidates(Status.DONE))
    if seed is not None and (seed.id != cand.id or home is not None):
        theirs = {"validation": pairs.validation.get(seed.id), "test": pairs.test.get(seed.id)}
        versus = {split: paired.compare(mine[split], theirs[split]).to_dict()
                  for split in ("validation", "test")
                  if paired.comparable(mine[split], theirs[split])}
        if versus:
            out["vs_seed"] = {"seed_id": seed.id, **versus}
    return out
