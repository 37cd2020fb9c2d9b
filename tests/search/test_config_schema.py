"""One config schema checked at the edge: any value of any field gives either a valid
config or one clean ValueError line naming that field (property-based)."""

import runpy

import ml_collections
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nas.search.strategy.settings import (
    OPERATIONAL,
    SEARCH_SCHEMA,
    SearchSettings,
    validate_search,
)
from tests.search.conftest import SEARCH_CONFIG

BASE = runpy.run_path(SEARCH_CONFIG)["get_config"]()

VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-10**12, 10**12),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.lists(st.integers(-3, 3), max_size=4), st.dictionaries(st.text(max_size=5),
                                                               st.integers(), max_size=2))

SEARCH_FIELDS = sorted(SEARCH_SCHEMA)
MUTATION_FIELDS = ["mutator", "synthesizer", "p", "max_len", "max_steps", "time_limit_s",
                   "retries", "input_shape", "depth_p", "synthesis", "child_id", "colour"]
TRAIN_FIELDS = ["seed", "total_epochs", "lr", "trainer", "optax_name", "input.batch_size",
                "input.data.name", "eval.batch_size", "ema_decay", "model", "num_classes",
                "schedule", "grad_clip_norm", "ckpt_steps", "bogus"]


def _with(path, value):
    config = ml_collections.ConfigDict(BASE.to_dict())
    config.unlock()
    *parents, leaf = path.split(".")
    node = config
    for p in parents:
        node = node[p]
    node[leaf] = value
    return config


def _one_clean_line(path, value):
    try:
        config = _with(path, value)
    except (TypeError, ValueError, KeyError, AttributeError):
        return  # ConfigDict itself refused the assignment (typed fields): never reaches us
    try:
        validate_search(config)
    except ValueError as e:
        text = str(e)
        assert "\n" not in text and len(text) < 400, text
        leaf = path.split(".")[-1]
        assert leaf in text or path.split(".")[0] in text, (path, text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SEARCH_FIELDS), VALUES)
def test_any_search_value_is_valid_or_one_line(field, value):
    _one_clean_line(f"search.{field}", value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(MUTATION_FIELDS), VALUES)
def test_any_mutation_value_is_valid_or_one_line(field, value):
    _one_clean_line(f"search.mutation.{field}", value)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(TRAIN_FIELDS), VALUES)
def test_any_train_value_is_valid_or_one_line(field, value):
    _one_clean_line(f"train.{field}", value)


@pytest.mark.parametrize("path, value, match", [
    ("search.seed_epochs", -1.0, "search.seed_epochs' must be a number >= 0"),
    ("search.log_every_steps", -1, "search.log_every_steps' must be an int >= 0"),
    ("search.time_limit_s", -5.0, "search.time_limit_s' must be a number > 0"),
    ("search.time_limit_s", 0.0, "search.time_limit_s"),
    ("search.max_candidates", 0, "search.max_candidates' must be an int > 0"),
    ("search.mutation.mutator", "x", "search.mutation.mutator"),
    ("search.mutation.max_steps", 0, "search.mutation.max_steps"),
    ("search.executor", "slurm", "one of 'local', 'ray', 'inline'"),
    ("search.max_params_ratio", -1.0, "search.max_params_ratio' must be a number >= 0"),
    ("search.prepare_ahead", -1, "search.prepare_ahead' must be an int >= 0"),
    ("train.total_epochs", -2.0, "train.total_epochs' must be a number > 0"),
    ("train.input.batch_size", 0, "train.input.batch_size"),
    ("train.trainer", "magic", "train.trainer"),
    ("train.optax_name", "adamz", "train.optax_name"),
    ("search.hard_time_limit_s", 1.0, "hard_time_limit_s' must be >= search.time_limit_s"),
])
def test_meaningless_values_are_refused(path, value, match):
    with pytest.raises(ValueError, match=match.replace(".", r"\.").replace("'", "'")):
        validate_search(_with(path, value))


@pytest.mark.parametrize("key", ["\n", "a\nb", "x" * 300])
def test_an_unknown_key_is_named_on_one_short_line(key):
    """Found by the property test above: a key with a newline split the message."""
    _one_clean_line("search.mutation", {key: 1})
    with pytest.raises(ValueError, match=r"config field 'search\.mutation\..* is unknown"):
        validate_search(_with("search.mutation", {key: 1}))


def test_operational_fields_are_declared_once():
    assert set(OPERATIONAL) <= set(SEARCH_SCHEMA)
    assert "seed" not in OPERATIONAL and "mutation" not in OPERATIONAL


def test_unknown_dataset_is_refused_at_the_edge(tmp_path):
    config = _with("train.input.data.name", "no_such_dataset")
    config.train.input.data_dir = str(tmp_path)
    with pytest.raises(ValueError, match="train.input.data.name.*no_such_dataset"):
        validate_search(config)


def test_the_train_section_s_checks_name_their_fields_by_the_full_path(tmp_path):
    """The training config's own checks are given its path in the search config: every
    field they name starts with `train.`; a fault of the user's files, which names the file,
    follows the section's name."""
    with pytest.raises(ValueError, match=r"^config field 'train\.bogus' is unknown; expected "
                                         r"one of the \d+ fields of train, e\.g\. augment, "):
        validate_search(_with("train.bogus", 1))
    config = _with("train.input.data.folds", 3)  # the search carves a validation fraction
    with pytest.raises(ValueError) as e:
        validate_search(config)
    assert str(e.value) == ("config fields 'train.input.data.validation_fraction' and "
                            "'train.input.data.folds': set one of them, not both")
    missing = str(tmp_path / "gone.npz")
    with pytest.raises(ValueError) as e:
        validate_search(_with("train.input.data.name", f"npz:{missing}"))
    assert str(e.value) == (f"train: {missing}: cannot read the npz file: No such file or "
                            f"directory")


def test_resume_warns_only_about_fields_that_cannot_change(tmp_path, caplog):
    import logging

    from nas.search.execution.seeds import open_study
    from nas.search.store.study import Study

    study = Study.create(tmp_path, BASE.to_dict())
    study.add('{"format": "nas.graph"}')  # started: the stored config wins
    study.close()
    caplog.set_level(logging.WARNING)
    changed = _with("search.max_candidates", 99)
    changed.search.workers = 0
    changed.search.finals.k = 0  # a field of an operational field (the finals) changes too
    open_study(str(tmp_path), changed)[0].close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    open_study(str(tmp_path), _with("search.seed", 7))[0].close()
    (record,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "search.seed" in record.getMessage() and "max_candidates" in record.getMessage()


def test_resume_warning_names_every_ignored_field(tmp_path, caplog):
    import logging

    from nas.search.execution.seeds import open_study
    from nas.search.store.study import Study

    study = Study.create(tmp_path, BASE.to_dict())
    study.add('{"format": "nas.graph"}')  # started: the stored config wins
    study.close()
    changed = _with("train.model_name", "revnet")
    for i, field in enumerate(("seed", "child_lr", "seed_epochs", "max_params_ratio",
                               "max_attempts")):
        changed.search[field] = changed.search.get(field, 1) + 1 + i
    caplog.set_level(logging.WARNING)
    open_study(str(tmp_path), changed)[0].close()
    (record,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "train.model_name" in record.getMessage() and "search.seed," in record.getMessage()


def test_a_study_without_candidates_takes_the_given_config(tmp_path, caplog):
    import logging

    from nas.search.execution.seeds import check_seed, open_study
    from nas.search.store.study import Study

    Study.create(tmp_path, _with("train.model_name", "bogus").to_dict()).close()
    caplog.set_level(logging.WARNING)
    fixed = _with("search.seed", 3)
    study, _ = open_study(str(tmp_path), fixed)
    assert study.config["train"]["model_name"] == "cnn" and study.config["search"]["seed"] == 3
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    with pytest.raises(ValueError, match="train.model_name"):  # checked before it is stored
        open_study(str(tmp_path), _with("train.model_name", "bogus"),
                   check_new=lambda new: check_seed(new, SearchSettings.from_stored(new)))
    assert Study.load(tmp_path).config["train"]["model_name"] == "cnn"
