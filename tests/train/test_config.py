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


def test_fewer_classes_than_the_dataset_are_refused(data_dir):
    from nas.train import data

    cfg = config_lib.base_config()
    cfg.input.data_dir = data_dir
    cfg.num_classes = 5
    with pytest.raises(ValueError, match=r"'num_classes' must be >= 10.*'digits', got 5"):
        data.check_dataset(cfg)
    cfg.num_classes = 12  # more classes than labels only wastes logits
    data.check_dataset(cfg)
