"""The `search` section of a search config: defaults, schema and validation at the edge.

A search config has two sections: `train` (a `nas.train` config used for every candidate)
and `search` (below). `validate_search` checks both, and the mutation and selection
sub-sections, before any study or workdir is created: unknown fields, wrong types and
out-of-range values are ValueErrors naming the field and what was expected.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from nas import schema
from nas.search.strategy import hparams as hparams_lib
from nas.search.strategy import splits
from nas.search.strategy.constraints import check_constraints
from nas.search.strategy.fidelity import FidelityConfig
from nas.search.strategy.finals_config import FinalsConfig
from nas.search.strategy.ray_config import RAY_SCHEMA, RayConfig, ray_defaults
from nas.search.strategy.selection import (
    COSTS,
    LATENCY,
    MEASURED_COSTS,
    SelectionConfig,
    check_user_costs,
    higher_better,
)
from nas.train.fit_config import FitConfig

# Fields of the search section a resumed search takes from the command line rather than
# from the stored config: how far and where to run, not what to search. Changing them on
# resume is normal and silent; every other field comes from the stored config.
OPERATIONAL = ("max_candidates", "executor", "workers", "ray_address", "num_cpus_per_candidate",
               "num_gpus_per_candidate", "time_limit_s", "hard_time_limit_s", "lease_s",
               "max_proposal_failures", "property_cache", "propose_ahead", "prepare_ahead",
               "ray", "finals", "tensorboard")

EXECUTORS = ("local", "ray", "inline")

# Search fields added after studies were written, at the value that reads as before: a
# study whose stored config lacks one resumes without a difference named.
ADDED_FIELDS: dict[str, Any] = {"extra_seeds": [], "start_from": ""}


def without_added(given: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """`given` (a JSON-ready config) without the `ADDED_FIELDS` the `stored` config lacks
    and `given` holds at their old reading."""
    search = dict(given.get("search") or {})
    have = (stored.get("search") or {}) if isinstance(stored, dict) else {}
    for key, old in ADDED_FIELDS.items():
        if key not in have and key in search and search[key] == old:
            del search[key]
    return {**given, "search": search} if "search" in given else given


def execution_defaults() -> dict[str, Any]:
    """The fields of the search section that say where and how candidates train (most of
    them `OPERATIONAL`: a resumed search may change them)."""
    return {
        "executor": "local",  # local | ray | inline
        "workers": 1,  # candidates the driver trains at once (0: only nas-search workers)
        "ray_address": "",  # "" starts a local Ray; "auto" joins a running cluster
        "num_cpus_per_candidate": 1.0,
        "num_gpus_per_candidate": 0.0,
        # nas.search.strategy.ray_config.RayConfig: each Ray task's num_cpus, num_gpus and
        # custom resources (0: the two fields above), and how its dataset reaches the node
        "ray": ray_defaults(),
        "time_limit_s": 900.0,  # per candidate; checked after every train step
        "hard_time_limit_s": 1800.0,  # the worker is killed past this
        "lease_s": 60.0,  # a claim not renewed for this long is re-queued
        "max_attempts": 3,  # a candidate interrupted this often is failed
        "max_proposal_failures": 25,  # consecutive failed mutations before giving up
        # candidate k is proposed from the results of candidates 1 .. k - pipeline_depth
        # (all finished first): a count, so proposals never depend on worker timing; set it
        # to `workers` to keep that many candidates training at once
        "pipeline_depth": 1,
        # while every worker trains, the driver proposes up to this many next children
        # (pending, ready to claim) so a finishing worker never waits for a proposal; it
        # changes when a proposal runs, never what it proposes (0: propose only when a
        # worker is free). It takes effect with pipeline_depth >= 2: with 1, a proposal
        # must read the result of the candidate in training
        "propose_ahead": 1,
        # each worker's device is served by 1 + this many processes (local workers, Ray
        # tasks) taking turns on it: while one trains, the others set up, fit and compile
        # the next claimed children, so the device does not wait for them. In effect only
        # with pipeline_depth > workers (the next children must not need the result in
        # training); external `nas-search worker`s on one device take turns when it is > 0;
        # 0: one process per device
        "prepare_ahead": 1,
    }


# `search.max_refusals`'s default: what a study's config without it reads (the store).
MAX_REFUSALS = 8


def search_defaults() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "seed": 0,
        "max_candidates": 12,  # including the seed model
        "seed_epochs": 0.0,  # epochs for the seed model (0: train.total_epochs, like children)
        # The seed trains in rounds of seed_epochs (each a whole schedule, from where the
        # last ended) while a round's validation accuracy beats the best by more than
        # seed_min_gain, stopping after seed_patience rounds without; at most
        # seed_max_epochs in all (0: one round only). nas.train.rounds says why.
        "seed_max_epochs": 0.0,
        "seed_patience": 1,
        "seed_min_gain": 0.0,
        "child_lr": 0.0,  # learning rate for children, which fine-tune (0: train.lr)
        # a child fine-tunes for at least this many optimizer steps, however few its
        # train.total_epochs make on a small dataset (train.min_steps; 0: epochs decide)
        "min_child_steps": 0,
        # a child whose validation accuracy at its start (inherited and fitted weights) is
        # more than this below its parent's is not trained: it is refused (0: off)
        "max_start_drop": 0.0,
        # a child refused at its start (max_start_drop, fit.max_error, a constant output)
        # is no candidate: the driver proposes another in its place, up to this many times
        # per candidate slot; the next refusal fails the slot with its cause (0: a refused
        # child fails as a candidate)
        "max_refusals": MAX_REFUSALS,
        # every candidate logs its training loss and accuracy every this many steps, so its
        # report shows a curve, not one point (0: train.log_training_steps)
        "log_every_steps": 10,
        **execution_defaults(),
        "selection": {"costs": ("flops", "params"), "min_acc": 0.0, "noninferiority_pt": 1.0,
                      "recommend_cost": "flops"},
        # a user's own costs, {name: "package.module:function"}: each measured on every
        # trained candidate, lower is better; search.selection.costs may name them
        "costs": {},
        # upper bounds, {cost: bound} (a built-in cost, latency_ms or a user's): a candidate
        # over one is done but infeasible (nas.search.strategy.constraints)
        "constraints": {},
        # latency_ms, timed in the worker after training (nas.train.latency): "auto" times
        # it when a front, a bound or the recommendation names it, "on" always, "off" never
        "latency": latency_defaults(),
        "mutation": {},  # passed to nas.mutation.propose_child as its config
        # nas.train.fit_config.FitConfig: a child's new ops are fitted to the
        # parent's tensors they replace before it trains ({"steps": 0} disables)
        "fit": {},
        # nas.search.strategy.fidelity.FidelityConfig: children train to each of `rungs` (epochs)
        # and go on only if promoted there ({}: off, every child trains its whole budget)
        "fidelity": {},
        # nas.search.strategy.finals_config.FinalsConfig: after the search, the finalists and
        # the seed train alike and the recommendation reads them ({"k": 0}: off)
        "finals": dataclasses.asdict(FinalsConfig()),
        # nas.search.strategy.splits: decisions read a validation split, carved out of the training
        # split (this fraction, never trained on) unless `validation_split` names one; the
        # test split (train.eval.data.split) is only reported
        "validation_fraction": 0.1,
        "validation_split": "",
        "seed_graph": "",  # graph JSON or `nas-search export` file to start from ("": zoo)
        # further seeds, each trained as the seed is and a parent for proposals: graph JSON
        # or export files, or zoo model names; "the seed" the reports compare with stays
        # the first (seed_graph, or the zoo model)
        "extra_seeds": (),
        # the workdir of an earlier search: a new study starts from its validation front
        # (accuracy against search.selection.recommend_cost), weights included, the most
        # accurate first ("": off; read once, when the study is created)
        "start_from": "",
        # a proposed child with more parameters than this times the seed's is refused
        # before it is fitted or trained (0: no bound)
        "max_params_ratio": 4.0,
        # nas.search.strategy.hparams: {"lr" | "wd" | "child_lr": (low, high)}; a child
        # takes its parent's values, each times 0.8 or 1.25 within its range ({}: off)
        "hparams": {},
        # nas.properties.op_cache: per-op shapes and pairings kept across processes
        # ("": $NAS_PROPERTY_CACHE or ~/.cache/nas/op_properties.sqlite; "none": off)
        "property_cache": "",
        # TensorBoard runs under <workdir>/tensorboard: each candidate's curves, the
        # study's progress, the finals (nas.search.execution.tensorboard_runs; needs the
        # `tensorboard` extra). Watched, never read by the search
        "tensorboard": False,
    })


SEARCH_SCHEMA: dict[str, schema.Field] = {
    "seed": schema.Field(int, low=0, high=2**63 - 1),  # stored as an SQLite INTEGER
    "max_candidates": schema.positive(),
    "seed_epochs": schema.at_least(0, float, expected="(0: train.total_epochs)"),
    "seed_max_epochs": schema.at_least(0, float, expected="(0: one round of seed_epochs)"),
    "seed_patience": schema.positive(),
    "seed_min_gain": schema.Field(float, low=0.0, high=0.5),
    "child_lr": schema.at_least(0, float, expected="(0: train.lr)"),
    "min_child_steps": schema.at_least(0, expected="(0: train.total_epochs decides)"),
    "max_start_drop": schema.Field(float, low=0.0, high=1.0),
    "max_refusals": schema.at_least(0, expected="(0: a refused child fails its slot)"),
    "log_every_steps": schema.at_least(0, expected="(0: train.log_training_steps)"),
    "executor": schema.one_of(*EXECUTORS),
    "workers": schema.at_least(0, expected="(0: only external nas-search workers train)"),
    "ray_address": schema.Field(str),
    "num_cpus_per_candidate": schema.positive(float),
    "num_gpus_per_candidate": schema.at_least(0, float),
    "ray": RAY_SCHEMA,
    "time_limit_s": schema.positive(float),
    "hard_time_limit_s": schema.positive(float),
    "lease_s": schema.Field(float, low=0.05, high=86400.0),
    "max_attempts": schema.positive(),
    "max_proposal_failures": schema.positive(),
    "pipeline_depth": schema.positive(),
    "propose_ahead": schema.at_least(0, expected="(0: propose only when a worker is free)"),
    "prepare_ahead": schema.at_least(0, expected="(0: one worker process per device)"),
    "selection": schema.Field(dict),  # SelectionConfig checks its fields
    "costs": schema.Field(dict),  # names: check_user_costs
    "constraints": schema.Field(dict),  # check_constraints
    "latency": schema.Field(dict),  # latency_settings
    "mutation": schema.Field(dict),  # MutationConfig checks its fields
    "fit": schema.Field(dict),  # FitConfig checks its fields
    "fidelity": schema.Field(dict),  # FidelityConfig checks its fields
    "finals": schema.Field(dict),  # FinalsConfig checks its fields
    "validation_fraction": schema.Field(float, low=0.0, high=0.5),
    "validation_split": schema.Field(str),
    "seed_graph": schema.Field(str),
    "extra_seeds": schema.Field(list, check=lambda v: all(isinstance(s, str) and s for s in v),
                                expected="of non-empty strings"),
    "start_from": schema.Field(str),
    "max_params_ratio": schema.at_least(0, float, expected="(0: no bound)"),
    "hparams": schema.Field(dict),  # nas.search.strategy.hparams.check checks its fields
    "property_cache": schema.Field(str),
    "tensorboard": schema.Field(bool),
}


def validate_search(config: Any) -> ml_collections.ConfigDict:
    """The `search` section with defaults filled in; raises ValueError on any bad field of
    `search`, `search.mutation`, `search.selection` or `train`. A `train.num_classes` of 0
    is set, in `config`, to the data's number of classes."""
    from nas.mutation.config import MutationConfig
    from nas.train import config as train_config

    if not isinstance(config, ml_collections.ConfigDict):
        raise ValueError(f"a search config must be a ConfigDict, got {type(config).__name__}")
    for section in ("train", "search"):
        if section not in config:
            raise ValueError(f"search config needs a '{section}' section")
    unknown = sorted(set(config.keys()) - {"train", "search"})
    if unknown:
        raise ValueError(f"config field {unknown[0]!r} is unknown; expected 'train' and "
                         f"'search'")
    user = config.search.to_dict() if hasattr(config.search, "to_dict") else config.search
    schema.check(user, SEARCH_SCHEMA, "search.")
    search = search_defaults()
    search.update(config.search)
    if search.hard_time_limit_s < search.time_limit_s:
        raise ValueError(f"config field 'search.hard_time_limit_s' must be >= "
                         f"search.time_limit_s ({search.time_limit_s:g}), got "
                         f"{search.hard_time_limit_s:g}")
    _prefixed("search.mutation.", MutationConfig.from_dict, dict(search.mutation))
    users = check_user_costs(list(search.costs), "search.costs")
    check_constraints(dict(search.constraints), bounded_costs(users))
    _prefixed("search.selection.", lambda s: SelectionConfig.from_dict(s, users),
              dict(search.selection))
    latency_settings(search)
    _prefixed("search.fit.", FitConfig.from_dict, dict(search.fit))
    _prefixed("search.finals.", FinalsConfig.from_dict, dict(search.finals))
    hparams_lib.check(search.get("hparams", {}) or {})
    if search.tensorboard:
        check_tensorboard()
    RayConfig.from_dict(search.ray)
    train = _prefixed("train.", train_config.with_defaults, config.train)
    check_one_process(train)
    splits.check(train, search)
    fidelity = _prefixed("search.fidelity.", FidelityConfig.from_dict, dict(search.fidelity))
    _prefixed("search.fidelity.", fidelity.schedule, float(train.total_epochs))
    check_dataset(splits.decision_config(train, search))
    if not int(train.num_classes):  # 0: the data's number, written into the caller's
        from nas.train import data as data_lib  # config so that the study records it

        with config.train.unlocked():
            config.train.num_classes = data_lib.check_num_classes(train)
    return search


TENSORBOARD_PACKAGE = "tensorboardX"


def check_one_process(train: ml_collections.ConfigDict) -> None:
    """A search runs in one process: its candidates train in workers of their own, none of
    which would follow the driver into a program over several hosts."""
    from nas.train import distributed

    asked = distributed.settings(train.distributed, environ={}, prefix="train.")
    if asked.enabled and asked.num_processes != 1:
        raise ValueError("config field 'train.distributed': a search over several processes "
                         "is not supported yet; train one candidate over hosts with "
                         "nas-train --graph=CANDIDATE.zip (docs/cluster.md)")


def check_tensorboard() -> None:
    """`search.tensorboard=True` needs its writer: when it is missing, one ValueError line
    saying what to install, before any study or workdir is created."""
    import importlib

    try:
        importlib.import_module(TENSORBOARD_PACKAGE)
    except ImportError:
        raise ValueError(f"config field 'search.tensorboard' is True, but "
                         f"{TENSORBOARD_PACKAGE} is not installed: pip install "
                         f"'alphanas-search[tensorboard]' (or: pip install "
                         f"{TENSORBOARD_PACKAGE})") from None


def latency_defaults() -> dict[str, Any]:
    """`search.latency`: whether `latency_ms` is measured, and how (`LatencySettings`)."""
    from nas.train.latency import LatencySettings

    return {"measure": "auto", **dataclasses.asdict(LatencySettings())}


LATENCY_MEASURE = ("auto", "on", "off")


def bounded_costs(users: Any) -> list[str]:
    """The costs a bound may apply to: every lower-is-better one (throughput is not)."""
    return [c for c in dict.fromkeys((*COSTS, *MEASURED_COSTS, *users))
            if not higher_better(c)]


def latency_named(search: Any) -> str:
    """Which field names `latency_ms` ("" if none): a front, the recommendation's cost, a
    bound or the rungs' cost reads it."""
    selection = dict(search.get("selection", {}) or {})
    costs = selection.get("costs", ())
    costs = (costs,) if isinstance(costs, str) else tuple(costs or ())
    for field, named in (("search.selection.costs", LATENCY in costs),
                         ("search.selection.recommend_cost",
                          selection.get("recommend_cost") == LATENCY),
                         ("search.constraints", LATENCY in dict(search.get("constraints", {})
                                                                or {}))):
        if named:
            return field
    return ""


def latency_settings(search: Any) -> dict[str, Any] | None:
    """`search.latency` as `nas.train.latency.LatencySettings` fields, or None when
    `latency_ms` is not measured. A bad field, or "off" while something names latency_ms,
    is one line."""
    from nas.train.latency import LatencySettings

    given = dict(search.get("latency", {}) or {})
    values = {**latency_defaults(), **given}
    measure = values.pop("measure")
    if measure not in LATENCY_MEASURE:
        raise ValueError(f"config field 'search.latency.measure' must be one of "
                         f"{LATENCY_MEASURE}, got {measure!r}")
    known = {f.name for f in dataclasses.fields(LatencySettings)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"config field 'search.latency.{unknown[0]}' is unknown; expected "
                         f"one of {sorted(known | {'measure'})}")
    settings = _prefixed("search.latency.", lambda v: LatencySettings(**v), values)
    named = latency_named(search)
    if measure == "off" and named:
        raise ValueError(f"config field 'search.latency.measure' is 'off', but {named} "
                         f"names latency_ms; set it to 'auto' or 'on'")
    if measure == "off" or (measure == "auto" and not named) or \
            LATENCY in dict(search.get("costs", {}) or {}):  # the user's function times it
        return None
    return dataclasses.asdict(settings)


def measured_costs(search: Any) -> tuple[str, ...]:
    """The costs a worker measures besides the built-in ones, kept in the metrics: the
    user's (`search.costs`) and `latency_ms` when it is timed."""
    users = tuple(k for k in dict(search.get("costs", {}) or {}) if isinstance(k, str))
    try:
        timed = latency_settings(search) is not None
    except ValueError:
        timed = bool(latency_named(search))
    return (*users, LATENCY) if timed and LATENCY not in users else users


def selection_config(search: Any) -> SelectionConfig:
    """`search.selection` with the measured costs and the bounds (`search.constraints`)."""
    return SelectionConfig.from_dict(dict(search.selection), measured_costs(search),
                                     dict(search.get("constraints", {}) or {}))


def candidate_train_config(train: dict[str, Any], search: Any, is_seed: bool
                           ) -> dict[str, Any]:
    """The training settings one candidate trains with: the search's `train` section, with
    the seed's own epochs (`search.seed_epochs`) or the children's learning rate
    (`search.child_lr`: children start from inherited weights, so they fine-tune) and
    least steps (`search.min_child_steps`), logging
    every `search.log_every_steps` steps so each candidate has a curve, and evaluated on the
    search's validation split with the test split once at the end (`nas.search.strategy.splits`)."""
    from nas.search.strategy import splits

    if "validation_fraction" in search or "validation_split" in search:
        config = splits.decision_config(train, ml_collections.ConfigDict(dict(search))).to_dict()
    else:  # a study written before searches held out a validation split
        config = dict(train)
    if is_seed and float(search.get("seed_epochs", 0.0)) > 0:
        config["total_epochs"] = float(search["seed_epochs"])
    if not is_seed and float(search.get("child_lr", 0.0)) > 0:
        config["lr"] = float(search["child_lr"])
    if not is_seed and int(search.get("min_child_steps", 0)) > 0:
        config["min_steps"] = max(int(config.get("min_steps", 0) or 0),
                                  int(search["min_child_steps"]))
    if int(search.get("log_every_steps", 0)) > 0:
        config["log_training_steps"] = int(search["log_every_steps"])
    return config


def seed_rounds(train: dict[str, Any], search: Any) -> dict[str, Any] | None:
    """`nas.train.rounds.Rounds` fields for the seed's training, or None for one round
    (`search.seed_max_epochs` 0, or no room for a second round)."""
    from nas.train.rounds import Rounds

    max_epochs = float(search.get("seed_max_epochs", 0.0))
    epochs = float(candidate_train_config(train, search, is_seed=True)["total_epochs"])
    rounds = Rounds.for_seed(epochs, max_epochs, int(search.get("seed_patience", 1)),
                             float(search.get("seed_min_gain", 0.0)))
    if max_epochs <= 0:
        return None
    return {"max_rounds": rounds.max_rounds, "patience": rounds.patience,
            "min_gain": rounds.min_gain}


def check_dataset(train: ml_collections.ConfigDict) -> None:
    """The dataset must exist, and have no more classes than `train.num_classes`, before a
    study is created for it (digits builds itself)."""
    from nas.train import data as data_lib

    _prefixed("train.", data_lib.check_dataset, train)


def _prefixed(prefix: str, fn: Any, value: Any) -> Any:
    """Run a section's own check, naming fields by their full path in the error."""
    try:
        return fn(value)
    except ValueError as e:
        text = str(e)
        for head in ("config field '", 'config field "'):
            if text.startswith(head):  # named already; prefixed unless it has the prefix
                if not text.startswith(head + prefix):
                    text = head + prefix + text[len(head):]
                break
        else:
            text = f"{prefix.rstrip('.')}: {text}"
        raise ValueError(text) from e
