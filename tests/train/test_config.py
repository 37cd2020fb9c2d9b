import importlib.util
import pathlib

import pytest

from nas.train import config as config_lib

CONFIGS = sorted((pathlib.Path(__file__).parents[2] / "configs").glob("*.py"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_configs_validate(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    config_lib.validate(config.train if "train" in config else config)


def test_unknown_field_is_named():
    c = config_lib.base_config()
    c.input.bogus = 3
    with pytest.raises(ValueError, match=r"'input\.bogus' is unknown"):
        config_lib.validate(c)


def test_wrong_type_is_named():
    cfg = config_lib.base_config().to_dict()
    cfg["input"]["batch_size"] = "big"
    with pytest.raises(ValueError, match=r"'input\.batch_size' must be an int"):
        config_lib.validate(cfg)
    cfg = config_lib.base_config().to_dict()
    cfg["lr"] = 1  # an int where a float is expected is fine
    config_lib.validate(cfg)


@pytest.mark.parametrize("field, value, match", [
    ("trainer", "magic", "'trainer'"),
    ("ema_decay", 1.5, "'ema_decay'"),
    ("schedule", {"decay_type": "zigzag"}, "schedule.decay_type"),
    ("schedule", [("kernel", 3)], r"schedule\[0\]"),
    ("optax", 5, "'optax' must be a dict"),
    # values that would fail only once training started
    ("optax_name", "adam", r"'optax_name'.*learning_rate"),  # a factory missing an argument
    ("optax_name", "softmax_cross_entropy", r"'optax_name'.*optax transform"),  # a loss
    ("wd_pattern", "(", r"'wd_pattern' must be a string \(a regex\)"),
    ("frozen_pattern", "[", r"'frozen_pattern' must be a string \(a regex\)"),
    ("schedule", [("(", {})], r"schedule\[0\]"),
])
def test_bad_values_are_named(field, value, match):
    cfg = config_lib.base_config().to_dict()
    cfg[field] = value
    with pytest.raises(ValueError, match=match):
        config_lib.validate(cfg)


def test_with_defaults_fills_missing_fields():
    import ml_collections

    c = ml_collections.ConfigDict({"lr": 0.5, "input": {"batch_size": 32}})
    full = config_lib.with_defaults(c)
    assert full.lr == 0.5 and full.input.batch_size == 32 and full.input.image_size == 32


def test_optax_transform_is_built_with_its_arguments():
    cfg = config_lib.base_config().to_dict()
    cfg["optax_name"], cfg["optax"] = "adam", {"learning_rate": 1.0}
    config_lib.validate(cfg)
    cfg["optax"] = {"learning_rate": 1.0, "bogus": 2}
    with pytest.raises(ValueError, match=r"'optax_name'.*bogus"):
        config_lib.validate(cfg)


@pytest.mark.parametrize("given", [5, 12])
def test_num_classes_that_disagree_with_the_dataset_are_one_line(data_dir, given):
    """Fewer classes would one-hot the larger labels to all-zero targets; more would train
    a head for classes the data never shows: either is one line naming both numbers."""
    from nas.train import data

    cfg = config_lib.base_config()
    cfg.input.data_dir = data_dir
    cfg.num_classes = given
    with pytest.raises(ValueError) as e:
        data.check_dataset(cfg)
    assert str(e.value) == (f"config field 'num_classes' is {given}, but dataset 'digits' has "
                            f"10 classes (0 takes the number from the data)")
    with pytest.raises(ValueError, match=f"is {given}, but"):
        data.with_num_classes(cfg)


def test_num_classes_0_takes_the_dataset_s(data_dir):
    from nas.train import data

    cfg = config_lib.base_config()
    cfg.input.data_dir = data_dir
    assert cfg.num_classes == 0 and data.dataset_classes("digits", data_dir) == 10
    data.check_dataset(cfg)
    resolved = data.with_num_classes(cfg)
    assert resolved.num_classes == 10 and cfg.num_classes == 0  # a copy, the input kept
    cfg.num_classes = 10
    assert data.with_num_classes(cfg) is cfg


@pytest.mark.parametrize("bad", [1, -1, 2.5, True])
def test_num_classes_must_be_0_or_at_least_2(bad):
    cfg = config_lib.base_config().to_dict()
    cfg["num_classes"] = bad
    with pytest.raises(ValueError, match="'num_classes'"):
        config_lib.validate(cfg)


@pytest.mark.parametrize("field, value, message", [
    ("lr", -1.0, "config field '{p}lr' must be a number >= 0, got -1.0"),
    ("input", 5, "config field '{p}input' must be a dict, got int"),
    ("schedule", [("(", {})], "config field '{p}schedule[0]' must be a (regex, dict) pair"),
    ("schedule", {"decay_type": "zigzag"},
     "config field '{p}schedule.decay_type' must be one of ('cosine', 'linear', 'rsqrt', "
     "'stair', 'constant', 'exponential'), got 'zigzag'"),
    ("optax_name", "softmax_cross_entropy",
     "config field '{p}optax_name' must name an optax transform that takes the 'optax' "
     "arguments, e.g. 'scale_by_adam'; optax.softmax_cross_entropy(**{{}}) raised "
     "TypeError: softmax_cross_entropy() missing 2 required positional arguments: "
     "'logits' and 'labels'"),
])
@pytest.mark.parametrize("prefix", ["", "train."])
def test_a_bad_field_is_named_under_the_prefix_given(field, value, message, prefix):
    """nas-train names a field by its path in the training config; a search, whose
    `train` section it is, by its path in the search config."""
    with pytest.raises(ValueError) as e:
        config_lib.with_defaults({field: value}, prefix=prefix)
    assert str(e.value) == message.format(p=prefix)


@pytest.mark.parametrize("prefix", ["", "train."])
def test_a_dataset_check_names_its_fields_under_the_prefix_given(data_dir, prefix):
    from nas.train import data

    cfg = config_lib.base_config()
    cfg.input.data_dir = data_dir
    cfg.input.data.validation_fraction, cfg.input.data.folds = 0.1, 3
    with pytest.raises(ValueError) as e:
        data.check_dataset(cfg, prefix)
    assert str(e.value) == (f"config fields '{prefix}input.data.validation_fraction' and "
                            f"'{prefix}input.data.folds': set one of them, not both")
    cfg.input.data.validation_fraction = 0.0
    cfg.input.data.fold = 3
    with pytest.raises(ValueError) as e:
        data.check_dataset(cfg, prefix)
    assert str(e.value) == (f"config field '{prefix}input.data.fold' must be in [0, 3) with "
                            f"input.data.folds=3 (at least 2), got 3")
    cfg.input.data.folds = cfg.input.data.fold = 0
    cfg.input.batch_size = 5000
    with pytest.raises(ValueError) as e:
        data.check_dataset(cfg, prefix)
    assert str(e.value) == (f"config field '{prefix}input.batch_size' must be <= the 1437 "
                            f"examples of 'digits' split 'train', got 5000")
