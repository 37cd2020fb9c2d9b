"""The `search` section of a search config: each field declared once, read once at the edge.

`SearchSettings` declares every field (type, default, check, help); `search_defaults` and
`SEARCH_SCHEMA` are read from it. `read_settings` checks a whole config (`train` and
`search`) before any study or workdir exists; a worker rebuilds the settings from the
study's stored config with `SearchSettings.from_stored`. A bad field is one ValueError line
naming it by its full path.

Decisions (fronts, parents, `min_acc`, rungs, "best", export) read a validation split, and
the test split (`train.eval.data.split`) is only reported: an accuracy that chose a
candidate is biased upward on the data that chose it. The validation split is carved out
of the training split (`validation_fraction`, stratified, the same examples for every
candidate, never trained on) unless `validation_split` names one (`decision_config`).

The finals' settings (`FinalsConfig`) and the recipe of their runs (`Recipe`): in the search
a child (which inherits its lineage's epochs) is compared with a seed that trained less, on
one small validation split; the finals train the seed and the finalists alike, several
times, on every training example when data are small, so the recommendation compares
architectures, not training histories.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import ml_collections

from nas import schema
from nas.search.strategy import hparams as hparams_lib
from nas.search.strategy.constraints import check_constraints
from nas.search.strategy.fidelity import FidelityConfig
from nas.search.strategy.selection import (
    LATENCY,
    SelectionConfig,
    bounded_costs,
    check_user_costs,
)
from nas.train.fit_config import FitConfig
from nas.train.latency import LatencySettings

if TYPE_CHECKING:
    from nas.mutation.config import MutationConfig

# Fields a resumed search takes from the command line, not the stored config: how far and
# where to run, not what to search, so a change is silent.
OPERATIONAL = ("max_candidates", "executor", "workers", "ray_address", "num_cpus_per_candidate",
               "num_gpus_per_candidate", "time_limit_s", "hard_time_limit_s", "lease_s",
               "max_proposal_failures", "property_cache", "propose_ahead", "prepare_ahead",
               "ray", "finals", "tensorboard")

EXECUTORS = ("local", "ray", "inline")

# Fields newer than some stored studies, at the value that means what their absence
# meant: a study whose stored config lacks one resumes without a difference named.
ADDED_FIELDS: dict[str, Any] = {"extra_seeds": [], "start_from": ""}


def without_added(given: dict[str, Any], stored: dict[str, Any]) -> dict[str, Any]:
    """`given` (a JSON-ready config) without the `ADDED_FIELDS` that `stored` lacks and
    `given` holds at their `ADDED_FIELDS` value."""
    search = dict(given.get("search") or {})
    have = (stored.get("search") or {}) if isinstance(stored, dict) else {}
    for key, old in ADDED_FIELDS.items():
        if key not in have and key in search and search[key] == old:
            del search[key]
    return {**given, "search": search} if "search" in given else given


# `search.max_refusals`'s default, which the store reads too
MAX_REFUSALS = 8

# How a task gets its dataset: "ship" puts it in Ray's object store once per study and each
# node keeps a copy in its own cache; "node" reads it where the config names it, on each
# node (a tfds dataset prepared on every node, or a disk every node mounts).
DATASET_MODES = ("ship", "node")


@dataclasses.dataclass(frozen=True)
class RayConfig(schema.Section):
    """`search.ray`: one Ray task's request (a node with 8 GPUs and `num_gpus` 1 trains 8),
    its zeros read from `search.num_*_per_candidate` (`resolved`), and how its dataset
    reaches the node."""

    num_cpus: float = schema.setting(
        0.0, schema.at_least(0, float, expected="(0: search.num_cpus_per_candidate)"))
    num_gpus: float = schema.setting(
        0.0, schema.at_least(0, float, expected="(0: search.num_gpus_per_candidate)"))
    resources: dict[str, float] = schema.setting(
        dict, schema.Field(dict, expected="(custom resource name -> amount per task)"))
    dataset: str = schema.setting("ship", schema.one_of(*DATASET_MODES))

    def check_section(self, prefix: str) -> None:
        resources = dict(self.resources)
        for name, amount in resources.items():
            if name in ("CPU", "GPU"):
                raise ValueError(f"config field '{prefix}resources.{name}': set "
                                 f"{prefix}num_{name.lower()}s instead")
            if not isinstance(name, str) or not name or not schema.positive(float).ok(amount):
                raise ValueError(f"config field '{prefix}resources.{name}' must be a "
                                 f"number > 0, got {amount!r}")
        object.__setattr__(self, "resources", {str(k): float(v) for k, v in resources.items()})

    def resolved(self, num_cpus_per_candidate: float, num_gpus_per_candidate: float
                 ) -> RayConfig:
        """The request with its zeros read from `search.num_*_per_candidate`."""
        return dataclasses.replace(self, num_cpus=self.num_cpus or float(num_cpus_per_candidate),
                                   num_gpus=self.num_gpus or float(num_gpus_per_candidate))

    def request(self) -> dict[str, float]:
        """Every resource one task asks for, by Ray's names (nonzero ones only)."""
        asked = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        return {k: v for k, v in asked.items() if v}


@dataclasses.dataclass(frozen=True)
class LatencyConfig(LatencySettings):
    """`search.latency`: `measure` ("auto" | "on" | "off"), how it is timed (the fields of
    `LatencySettings`), and whether the worker times it (`timed`: resolved against the
    rest of the settings)."""

    measure: str = schema.setting("auto", schema.one_of("auto", "on", "off"))
    timed: bool = False

    def task_settings(self) -> dict[str, Any] | None:
        """`LatencySettings` fields for a candidate's task, None when it is not timed."""
        if not self.timed:
            return None
        return {name: getattr(self, name) for name in schema.settings_of(LatencySettings)}


STARTS = ("auto", "scratch", "weights")


@dataclasses.dataclass(frozen=True)
class FinalsConfig(schema.Section):
    """`search.finals`: who goes to the finals and how they train."""

    # The finalists: the `k` cheapest candidates on the validation front (accuracy against
    # the recommendation's cost) not already ruled out against the seed at the margin,
    # plus the most accurate one. 0: no finals.
    k: int = schema.setting(2, schema.at_least(0, expected="(0: no finals)"))
    # trainings per architecture (own init and data order), or more (`trained_repeats`)
    repeats: int = schema.setting(1, schema.positive())
    # the run part's least degrees of freedom: a finalist tied with the seed was found
    # non-inferior at 2 points in 60 % of simulated finals with two, 79 % with four, 85 %
    # with six and 98 % with ten (tests/stats/test_repeated_interval.py). 0: `repeats`.
    min_run_df: int = schema.setting(6, schema.at_least(0, expected="(0: repeats alone)"))
    # Below `cv_below` training images each repeat is a `folds`-fold cross-validation over
    # train plus validation; otherwise the validation split alone decides.
    folds: int = schema.setting(3, schema.positive(expected="(1: the validation split alone)"))
    cv_below: int = schema.setting(
        20_000, schema.at_least(0, expected="(training images below which folds apply)"))
    # Epochs of every finals run. 0: from scratch, the seed's in the search (all its rounds:
    # a shorter run ranks how fast one starts to learn); from weights, one seed round on top.
    epochs: float = schema.setting(0.0, schema.at_least(0, float, expected="(0: the seed's rule)"))
    # "scratch" (a fresh init each), "weights" (each on from its own weights, until all
    # have had the same epochs), "auto": "weights" when the seed arrived trained.
    start: str = schema.setting("auto", schema.one_of(*STARTS))
    # Retrain the recommended architecture as the search trained, and take that home over
    # the search's weights only when better on validation by their paired interval.
    take_home: bool = schema.setting(True, schema.Field(bool))

    @property
    def on(self) -> bool:
        return self.k > 0


def trained_repeats(finals: FinalsConfig, finalists: int, folds: int) -> int:
    """Repeats the finals train: those asked, or more where `finalists` and the seed over
    `folds` runs a repeat would leave the pooled run part (architectures x (runs - 1)
    degrees of freedom) under `min_run_df`."""
    if folds <= 1 or finalists <= 0 or finals.min_run_df <= 0:
        return finals.repeats
    runs = -(-finals.min_run_df // (finalists + 1)) + 1
    return max(finals.repeats, -(-runs // folds))


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How every finals training of one study trains: what makes two runs comparable.
    `folds` > 1: cross-validation over train plus validation (folds drawn per repeat from
    `fold_seed`); 1: the search's splits. `epochs`: each run's ("weights": on top)."""

    epochs: float
    folds: int
    start: str
    seed: int  # repeat r trains with train.seed + r: its own init and data order
    fold_seed: int

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def recipe(finals: FinalsConfig, train: Mapping[str, Any], search: SearchSettings,
           training_images: int, seed: Mapping[str, Any] | None = None) -> Recipe:
    """The finals' recipe for a search of `training_images` training images (validation
    included) whose seed ended with metrics `seed` (None: unknown). From weights, never
    folds: the weights were trained on the folds that would be held out."""
    start = finals.start
    if start == "auto":
        start = ("weights" if seed is not None and arrived_trained(
            seed, search.seed_min_gain) else "scratch")
    one_round = seed_round_epochs(train, search.seed_epochs)
    rounds = int((seed or {}).get("rounds") or 1)
    epochs = finals.epochs or (rounds * one_round if start == "scratch" else one_round)
    folds = finals.folds if (start == "scratch" and training_images < finals.cv_below
                             and not search.validation_split) else 1
    return Recipe(float(epochs), int(folds), start, int(train.get("seed", 0) or 0),
                  search.seed)


def seed_round_epochs(train: Mapping[str, Any], seed_epochs: float) -> float:
    """The epochs of one seed round (`search.seed_epochs`, else `train.total_epochs`)."""
    return float(seed_epochs or 0.0) or float(train.get("total_epochs") or 1.0)


def repeats_the_search(rec: Recipe, candidate: Any, train: Mapping[str, Any],
                       seed_epochs: float) -> bool:
    """Whether retraining `candidate` with `rec` as the search trained would repeat its
    search training exactly: the seed, from scratch, one round, the same seed."""
    return (candidate.parent_id is None and rec.start == "scratch"
            and int(candidate.metrics.get("rounds") or 1) == 1
            and rec.epochs == seed_round_epochs(train, seed_epochs) and rec.seed == int(
                train.get("seed", 0) or 0))


def arrived_trained(seed: Mapping[str, Any], min_gain: float = 0.0) -> bool:
    """Whether the seed came trained: its rounds found it so (`nas.train.rounds`), or as it
    arrived it was already within `min_gain` of where its search training took it."""
    if seed.get("arrived_trained") or str(seed.get("rounds_stopped", "")).startswith(
            "it arrived trained"):
        return True
    start, end = seed.get("start_accuracy"), seed.get("accuracy")
    return start is not None and end is not None and float(start) >= float(end) - min_gain


@dataclasses.dataclass(frozen=True)
class SearchSettings(schema.Section):
    """The checked `search` section (`read_settings`, or `from_stored` in a worker). A
    field's default is the config's: `read_settings` builds each sub-section's record."""

    seed: int = schema.setting(0, schema.Field(int, low=0, high=2**63 - 1),  # an SQLite INTEGER
                               "every proposal's draws come from it and the proposal counter")
    max_candidates: int = schema.setting(12, schema.positive(),
                                         "candidates, the seed model included")
    seed_epochs: float = schema.setting(
        0.0, schema.at_least(0, float, expected="(0: train.total_epochs)"),
        "epochs for the seed model (0: train.total_epochs, like children)")
    seed_max_epochs: float = schema.setting(
        0.0, schema.at_least(0, float, expected="(0: one round of seed_epochs)"),
        "the seed trains in rounds of seed_epochs while a round beats the best validation "
        "accuracy by more than seed_min_gain, up to seed_patience rounds without, at most "
        "this many epochs in all (0: one round; nas.train.rounds)")
    seed_patience: int = schema.setting(1, schema.positive(),
                                        "rounds without a gain before the seed stops")
    seed_min_gain: float = schema.setting(0.0, schema.Field(float, low=0.0, high=0.5),
                                          "the least gain in validation accuracy a round counts")
    child_lr: float = schema.setting(
        0.0, schema.at_least(0, float, expected="(0: train.lr)"),
        "learning rate for children, which fine-tune (0: train.lr)")
    min_child_steps: int = schema.setting(
        0, schema.at_least(0, expected="(0: train.total_epochs decides)"),
        "a child fine-tunes for at least this many optimizer steps (train.min_steps; 0: "
        "epochs decide)")
    max_start_drop: float = schema.setting(
        0.0, schema.Field(float, low=0.0, high=1.0),
        "a child whose validation accuracy at its start is more than this below its "
        "parent's is refused, not trained (0: off)")
    max_refusals: int = schema.setting(
        MAX_REFUSALS, schema.at_least(0, expected="(0: a refused child fails its slot)"),
        "a child refused at its start is replaced by another proposal, up to this many times "
        "per candidate slot; the next refusal fails the slot (0: at once)")
    log_every_steps: int = schema.setting(
        10, schema.at_least(0, expected="(0: train.log_training_steps)"),
        "every candidate logs its training loss and accuracy every this many steps, so its "
        "report shows a curve (0: train.log_training_steps)")
    # where and how candidates train (most of them OPERATIONAL)
    executor: str = schema.setting("local", schema.one_of(*EXECUTORS), "local | ray | inline")
    workers: int = schema.setting(
        1, schema.at_least(0, expected="(0: only external nas-search workers train)"),
        "candidates the driver trains at once (0: only nas-search workers)")
    ray_address: str = schema.setting("", schema.Field(str),
                                      '"" starts a local Ray; "auto" joins a running cluster')
    num_cpus_per_candidate: float = schema.setting(1.0, schema.positive(float),
                                                   "CPUs of one candidate's Ray task")
    num_gpus_per_candidate: float = schema.setting(0.0, schema.at_least(0, float),
                                                   "GPUs of one candidate's Ray task")
    ray: RayConfig = schema.setting(
        lambda: schema.defaults(RayConfig), schema.checks(RayConfig),
        "RayConfig: each Ray task's resources (0: the two "
        "fields above) and how its dataset reaches the node")
    time_limit_s: float = schema.setting(900.0, schema.positive(float),
                                         "per candidate; checked after every train step")
    hard_time_limit_s: float = schema.setting(1800.0, schema.positive(float),
                                              "the worker is killed past this")
    lease_s: float = schema.setting(60.0, schema.Field(float, low=0.05, high=86400.0),
                                    "a claim not renewed for this long is re-queued")
    max_attempts: int = schema.setting(3, schema.positive(),
                                       "a candidate interrupted this often is failed")
    max_proposal_failures: int = schema.setting(25, schema.positive(),
                                                "consecutive failed mutations before giving up")
    pipeline_depth: int = schema.setting(
        1, schema.positive(),
        "candidate k is proposed from the results of candidates 1 .. k - pipeline_depth, "
        "so proposals never depend on worker timing; `workers` keeps that many training")
    propose_ahead: int = schema.setting(
        1, schema.at_least(0, expected="(0: propose only when a worker is free)"),
        "proposals made ahead while every worker trains, so a finishing worker never waits "
        "(when, not what; in effect with pipeline_depth >= 2)")
    prepare_ahead: int = schema.setting(
        1, schema.at_least(0, expected="(0: one worker process per device)"),
        "each worker's device is served by 1 + this many processes taking turns, so the "
        "next children set up, fit and compile while one trains (in effect with "
        "pipeline_depth > workers)")
    selection: SelectionConfig = schema.setting(
        lambda: {"costs": ("flops", "params"), "min_acc": 0.0, "noninferiority_pt": 1.0,
                 "recommend_cost": "flops"},
        schema.Field(dict),
        "nas.search.strategy.selection.SelectionConfig: the fronts' costs, parent selection "
        "and the recommendation's margin and cost")
    costs: Mapping[str, str] = schema.setting(
        dict, schema.Field(dict),
        'a user\'s own costs, {name: "package.module:function"}, measured on every trained '
        "candidate, lower is better")
    constraints: Mapping[str, float] = schema.setting(
        dict, schema.Field(dict),
        "upper bounds, {cost: bound}: a candidate over one is infeasible "
        "(nas.search.strategy.constraints)")
    latency: LatencyConfig = schema.setting(
        lambda: schema.defaults(LatencyConfig), schema.Field(dict),
        'latency_ms, timed in the worker after training (nas.train.latency): "auto" when '
        'a front, a bound or the recommendation names it, "on", "off"')
    mutation: MutationConfig = schema.setting(
        dict, schema.Field(dict),
        "nas.mutation.config.MutationConfig: how a child is proposed (input_shape: the "
        "training images' unless set)")
    fit: FitConfig = schema.setting(
        dict, schema.Field(dict),
        "nas.train.fit_config.FitConfig: a child's new ops are fitted to the parent's tensors "
        'before it trains ({"steps": 0} disables)')
    fidelity: FidelityConfig = schema.setting(
        dict, schema.Field(dict),
        "nas.search.strategy.fidelity.FidelityConfig: children train to each rung and go on "
        "only if promoted ({}: off)")
    finals: FinalsConfig = schema.setting(
        lambda: schema.defaults(FinalsConfig), schema.Field(dict),
        "FinalsConfig: the finalists and the seed train "
        'alike after the search ({"k": 0}: off)')
    validation_fraction: float = schema.setting(
        0.1, schema.Field(float, low=0.0, high=0.5),
        "the fraction of the training split held out for the "
        "decisions unless validation_split names a split")
    validation_split: str = schema.setting("", schema.Field(str),
                                           "a split of the dataset the decisions read instead")
    seed_graph: str = schema.setting(
        "", schema.Field(str), 'graph JSON or `nas-search export` file to start from ("": zoo)')
    extra_seeds: tuple[str, ...] = schema.setting(
        tuple, schema.Field(list, check=lambda v: all(isinstance(s, str) and s for s in v),
                            expected="of non-empty strings"),
        "further seeds (graph JSON, export files or zoo model names), each trained as the "
        "seed is; the reports' seed stays the first")
    start_from: str = schema.setting(
        "", schema.Field(str),
        "the workdir of an earlier search whose validation front, weights included, a new "
        'study starts from ("": off)')
    max_params_ratio: float = schema.setting(
        4.0, schema.at_least(0, float, expected="(0: no bound)"),
        "a proposed child with more parameters than this times the seed's is refused "
        "(0: no bound)")
    hparams: Mapping[str, tuple[float, float]] = schema.setting(
        dict, schema.Field(dict),
        'nas.search.strategy.hparams: {"lr" | "wd" | "child_lr": (low, high)} evolved with '
        "the architecture ({}: off)")
    property_cache: str = schema.setting(
        "", schema.Field(str),
        "nas.properties.op_cache: per-op shapes and pairings kept across processes (\"\": "
        '$NAS_PROPERTY_CACHE or ~/.cache/nas/op_properties.sqlite; "none": off)')
    tensorboard: bool = schema.setting(
        False, schema.Field(bool),
        "TensorBoard runs under <workdir>/tensorboard (nas.search.execution.tensorboard_runs; "
        "the `tensorboard` extra), never read by the search")

    @classmethod
    def from_stored(cls, config: Mapping[str, Any] | ml_collections.ConfigDict
                    ) -> SearchSettings:
        """The settings of a study's stored config (`Study.config`), checked as at the edge
        but without opening the dataset again."""
        return read_settings(ml_collections.ConfigDict(dict(config)), check_data=False)

    def check_section(self, prefix: str) -> None:
        if self.hard_time_limit_s < self.time_limit_s:
            raise ValueError(f"config field '{prefix}hard_time_limit_s' must be >= "
                             f"{prefix}time_limit_s ({self.time_limit_s:g}), got "
                             f"{self.hard_time_limit_s:g}")


_FIELDS = schema.settings_of(SearchSettings)


def search_defaults() -> ml_collections.ConfigDict:
    """Every field of the search section at its default."""
    return ml_collections.ConfigDict({name: schema.default_of(f) for name, f in _FIELDS.items()})


SEARCH_SCHEMA: dict[str, schema.Field | schema.Schema] = {
    name: f.metadata["check"] for name, f in _FIELDS.items()}

SEARCH_HELP: dict[str, str] = {name: f.metadata["help"] for name, f in _FIELDS.items()}


def stored_value(config: Mapping[str, Any] | None, name: str) -> Any:
    """Search field `name` of a study's stored config (a dict), its default where the config
    has none; a section's fields the config leaves out at their defaults."""
    default = schema.default_of(_FIELDS[name])
    section = config.get("search") if isinstance(config, Mapping) else None
    given = section.get(name) if isinstance(section, Mapping) else None
    if given is None:
        return default
    if isinstance(default, dict) and isinstance(given, Mapping):
        return {**default, **given}
    return given


def stored_setting(config: Mapping[str, Any] | None, name: str) -> Any:
    """`stored_value`, checked by the field's own declaration (one ValueError line naming
    `search.<name>`; a number a float): for the one field a store needs of a config that
    may be no search's whole config. `name`: a field with a `Field` check (no section)."""
    check = _FIELDS[name].metadata["check"]
    value = stored_value(config, name)
    schema.check_value(check, value, f"search.{name}")
    return float(value) if check.kind is float else value


def validate_search(config: Any) -> ml_collections.ConfigDict:
    """The `search` section with defaults filled in, after `read_settings` checked it all."""
    read_settings(config)
    return filled(config.search)


def filled(given: Any) -> ml_collections.ConfigDict:
    """A search section as given (not yet checked), the fields it leaves out at default."""
    search = search_defaults()
    search.update(given)
    return search


def read_settings(config: Any, check_data: bool = True) -> SearchSettings:
    """The typed `search` section of a whole search config; ValueError on any bad field of
    `search` or `train`. A `train.num_classes` of 0 is set, in `config`, to the data's.
    `check_data` False: the dataset is not opened (a stored config's was when its study was
    created)."""
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
    raw = filled(config.search).to_dict()
    values = {name: raw[name] for name in _FIELDS}
    mutation = MutationConfig.from_dict(raw["mutation"], "search.mutation.")
    users = check_user_costs(list(raw["costs"]), "search.costs")
    values["costs"] = {str(k): v for k, v in raw["costs"].items()}
    values["constraints"] = check_constraints(raw["constraints"], bounded_costs(users))
    values["selection"] = SelectionConfig.from_dict(
        raw["selection"], "search.selection.", user_costs=measured_costs(raw),
        constraints=values["constraints"])
    values["latency"] = _latency(raw)
    values["fit"] = FitConfig.from_dict(raw["fit"], "search.fit.")
    values["finals"] = FinalsConfig.from_dict(raw["finals"], "search.finals.")
    values["hparams"] = hparams_lib.check(raw["hparams"], "search.hparams")
    if values["tensorboard"]:
        check_tensorboard()
    values["ray"] = RayConfig.from_dict(raw["ray"], "search.ray.").resolved(
        values["num_cpus_per_candidate"], values["num_gpus_per_candidate"])
    values["extra_seeds"] = tuple(raw["extra_seeds"])
    train = train_config.with_defaults(config.train, prefix="train.")
    if "input_shape" not in raw["mutation"]:  # proposals probe at the training images' shape
        mutation = dataclasses.replace(mutation, input_shape=(1, *train_config.image_shape(train)))
    values["mutation"] = mutation
    values["fidelity"] = FidelityConfig.from_dict(raw["fidelity"], "search.fidelity.")
    settings = SearchSettings(**values, prefix="search.")
    check_one_process(train)
    check_splits(train, settings)
    settings.fidelity.schedule(float(train.total_epochs), prefix="search.fidelity.")
    if check_data:  # the dataset exists, with at most train.num_classes classes
        from nas.train import data as data_lib

        data_lib.check_dataset(decision_config(train, settings), prefix="train.")
        if not int(train.num_classes):  # 0: the data's, written so the study records it
            with config.train.unlocked():
                config.train.num_classes = data_lib.check_num_classes(train, prefix="train.")
    return settings


TENSORBOARD_PACKAGE = "tensorboardX"


def check_one_process(train: ml_collections.ConfigDict) -> None:
    """A search runs in one process: its workers would not follow the driver into a
    program over several hosts."""
    from nas.train import distributed

    asked = distributed.settings(train.distributed, environ={}, prefix="train.")
    if asked.enabled and asked.num_processes != 1:
        raise ValueError("config field 'train.distributed': a search over several processes "
                         "is not supported yet; train one candidate over hosts with "
                         "nas-train --graph=CANDIDATE.zip (docs/cluster.md)")


def check_tensorboard() -> None:
    """`search.tensorboard=True` needs its writer: one ValueError line saying what to
    install when it is missing."""
    import importlib

    try:
        importlib.import_module(TENSORBOARD_PACKAGE)
    except ImportError:
        raise ValueError(f"config field 'search.tensorboard' is True, but "
                         f"{TENSORBOARD_PACKAGE} is not installed: pip install "
                         f"'alphanas-search[tensorboard]' (or: pip install "
                         f"{TENSORBOARD_PACKAGE})") from None


def _cost_fields(search: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a search section (a dict) that name costs, as given, {} where it leaves
    one out: a stored section may predate any of them."""
    return {name: search[name] if name in search else {}
            for name in ("selection", "constraints", "latency", "costs")}


def latency_named(search: Mapping[str, Any]) -> str:
    """Which field of a search section (a dict) names `latency_ms` ("" if none)."""
    fields = _cost_fields(search)
    selection = dict(fields["selection"] or {})
    costs = selection.get("costs", ())
    costs = (costs,) if isinstance(costs, str) else tuple(costs or ())
    for field, named in (("search.selection.costs", LATENCY in costs),
                         ("search.selection.recommend_cost",
                          selection.get("recommend_cost") == LATENCY),
                         ("search.constraints", LATENCY in dict(fields["constraints"] or {}))):
        if named:
            return field
    return ""


def _latency(search: Mapping[str, Any]) -> LatencyConfig:
    """`search.latency` of a search section (a dict): a bad field, or "off" while something
    names latency_ms, is one line."""
    fields = _cost_fields(search)
    latency = LatencyConfig.from_dict(fields["latency"] or {}, "search.latency.")
    named = latency_named(search)
    if latency.measure == "off" and named:
        raise ValueError(f"config field 'search.latency.measure' is 'off', but {named} "
                         f"names latency_ms; set it to 'auto' or 'on'")
    # a user's own latency_ms function times it instead
    timed = not (latency.measure == "off" or (latency.measure == "auto" and not named)
                 or LATENCY in dict(fields["costs"] or {}))
    return dataclasses.replace(latency, timed=timed)


def measured_costs(search: Any) -> tuple[str, ...]:
    """The costs a worker measures besides the built-in ones, of a search section as a dict
    (a stored one may be none at all: no costs): the user's (`search.costs`) and
    `latency_ms` when it is timed."""
    if not isinstance(search, Mapping):
        return ()
    costs = _cost_fields(search)["costs"]
    if not isinstance(costs, Mapping):
        return ()
    users = tuple(k for k in costs if isinstance(k, str))
    try:
        timed = _latency(search).timed
    except ValueError:
        timed = bool(latency_named(search))
    return (*users, LATENCY) if timed and LATENCY not in users else users


def check_splits(train: ml_collections.ConfigDict, search: SearchSettings) -> None:
    """One-line ValueError for a search that would select on its test split (or on the
    data it trains on)."""
    test, trained = train.eval.data.split, train.input.data.split
    named = search.validation_split
    if named and named in (test, trained):
        what = ("test split (train.eval.data.split)" if named == test
                else "training split (train.input.data.split)")
        raise ValueError(f"config field 'search.validation_split' is {named!r}, the {what}: "
                         f"the search would select on it; name another split or set it to "
                         f"'' to carve one with search.validation_fraction")
    if not named and not search.validation_fraction:
        raise ValueError(f"config field 'search.validation_fraction' is 0 and "
                         f"search.validation_split is '': the search would select on the "
                         f"test split {test!r}; set a fraction (e.g. 0.1) or name a split")


def decision_config(train: Any, search: SearchSettings) -> ml_collections.ConfigDict:
    """The training config every candidate of the search trains with: evaluated on the
    validation split (its `acc`), and on the test split once at the end (`test_acc`)."""
    from nas.train.config import with_defaults

    config = with_defaults(
        ml_collections.ConfigDict(train.to_dict() if hasattr(train, "to_dict") else train))
    if not config.eval.test_split:  # (a config made here already names it)
        config.eval.test_split = config.eval.data.split
    if search.validation_split:
        config.eval.data.split = search.validation_split
    else:
        from nas.train.data import HOLDOUT

        config.input.data.validation_fraction = float(search.validation_fraction)
        config.eval.data.split = HOLDOUT
    return config


def candidate_train_config(train: dict[str, Any], search: SearchSettings, is_seed: bool,
                           held_out: bool = True) -> dict[str, Any]:
    """The training settings of one candidate: the `train` section with the seed's epochs,
    or the children's learning rate and least steps, its logging interval, evaluated on the
    validation split and once on test (`decision_config`). `held_out` False: a
    study whose candidates evaluated on test (no validation split held out)."""
    config = decision_config(train, search).to_dict() if held_out else dict(train)
    if is_seed and search.seed_epochs > 0:
        config["total_epochs"] = search.seed_epochs
    if not is_seed and search.child_lr > 0:
        config["lr"] = search.child_lr
    if not is_seed and search.min_child_steps > 0:
        config["min_steps"] = max(int(config.get("min_steps", 0) or 0), search.min_child_steps)
    if search.log_every_steps > 0:
        config["log_training_steps"] = search.log_every_steps
    return config


def seed_rounds(train: dict[str, Any], search: SearchSettings) -> dict[str, Any] | None:
    """`nas.train.rounds.Rounds` fields for the seed's training, or None for one round."""
    from nas.train.rounds import Rounds

    epochs = float(candidate_train_config(train, search, is_seed=True)["total_epochs"])
    rounds = Rounds.for_seed(epochs, search.seed_max_epochs, search.seed_patience,
                             search.seed_min_gain)
    if search.seed_max_epochs <= 0:
        return None
    return dataclasses.asdict(rounds)

