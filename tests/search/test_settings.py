"""The search section is declared once (`SearchSettings`): its defaults and schema are read
from the declaration, a bad field names its full path, and the typed settings rebuild
alike from a study's stored JSON config."""

import dataclasses
import json

import pytest

from nas import schema
from nas.mutation.config import MutationConfig
from nas.search.strategy.fidelity import FidelityConfig
from nas.search.strategy.selection import SelectionConfig
from nas.search.strategy.settings import (
    SEARCH_HELP,
    SEARCH_SCHEMA,
    FinalsConfig,
    LatencyConfig,
    RayConfig,
    SearchSettings,
    read_settings,
    search_defaults,
    stored_setting,
    stored_value,
    validate_search,
)
from nas.train.fit_config import FitConfig


def test_defaults_schema_and_help_come_from_one_declaration():
    names = [f.name for f in dataclasses.fields(SearchSettings)]
    assert names == list(SEARCH_SCHEMA) == list(SEARCH_HELP)
    assert sorted(search_defaults().keys()) == sorted(names)
    for field in dataclasses.fields(SearchSettings):
        default = search_defaults()[field.name]
        check = SEARCH_SCHEMA[field.name]
        if isinstance(check, schema.Field):  # every default passes its own check
            assert check.ok(default.to_dict() if hasattr(default, "to_dict") else default), \
                field.name
        assert SEARCH_HELP[field.name], field.name
    # a default is a fresh value each time, never shared between configs
    search_defaults().costs["mine"] = "m:f"
    assert search_defaults().costs.to_dict() == {}


def test_the_settings_are_typed(search_config):
    settings = read_settings(search_config(hparams={"lr": (1e-3, 4e-3)}))
    assert isinstance(settings.selection, SelectionConfig)
    assert isinstance(settings.mutation, MutationConfig)
    assert isinstance(settings.fit, FitConfig)
    assert isinstance(settings.fidelity, FidelityConfig)
    assert isinstance(settings.finals, FinalsConfig)
    assert isinstance(settings.ray, RayConfig)
    assert isinstance(settings.latency, LatencyConfig)
    assert settings.hparams == {"lr": (1e-3, 4e-3)}
    assert isinstance(settings.time_limit_s, float) and isinstance(settings.extra_seeds, tuple)
    # proposals probe at the training images' shape unless the mutation section names one
    assert settings.mutation.input_shape == (1, 16, 16, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 1  # type: ignore[misc]


def test_the_stored_json_config_rebuilds_the_same_settings(search_config):
    config = search_config(constraints={"params": 1e6}, costs={}, seed=7,
                           selection={"costs": ("flops",), "recommend_cost": "params"},
                           fidelity={"rungs": (0.25,)}, extra_seeds=())
    settings = read_settings(config)
    stored = json.loads(json.dumps(config.to_dict(), default=list))  # as the study holds it
    assert SearchSettings.from_stored(stored) == settings
    assert validate_search(config).to_dict() == {**search_defaults().to_dict(),
                                                 **validate_search(config).to_dict()}


@pytest.mark.parametrize("section, value, path", [
    ("fit", {"steps": -1}, "search.fit.steps"),
    ("finals", {"k": -1}, "search.finals.k"),
    ("fidelity", {"eta": 3}, "search.fidelity.eta"),
    ("fidelity", {"keep": 2.0}, "search.fidelity.keep"),
    ("ray", {"num_cpus": -1.0}, "search.ray.num_cpus"),
    ("ray", {"resources": {"TPU": 0}}, "search.ray.resources.TPU"),
    ("mutation", {"max_len": 2, "max_perc": 0.5}, "search.mutation.max_len"),
    ("mutation", {"colour": 1}, "search.mutation.colour"),
    ("selection", {"colour": 1}, "search.selection.colour"),
    ("latency", {"colour": 1}, "search.latency.colour"),
    ("hparams", {"momentum": (0.1, 0.2)}, "search.hparams.momentum"),
])
def test_a_bad_nested_field_names_its_full_path(search_config, section, value, path):
    with pytest.raises(ValueError) as e:
        read_settings(search_config(**{section: value}))
    text = str(e.value)
    assert text.startswith("config field") and f"'{path}" in text.split(":")[0], text
    assert "\n" not in text


def test_a_stored_setting_is_checked_by_its_own_declaration():
    """A store reading one setting of a config no reader may have seen (a study's own)
    checks it as the settings reader would, in the same words."""
    assert stored_setting({"search": {"lease_s": 5}}, "lease_s") == 5.0
    assert isinstance(stored_setting({"search": {"lease_s": 5}}, "lease_s"), float)
    assert stored_setting(None, "max_attempts") == search_defaults().max_attempts
    with pytest.raises(ValueError) as e:
        stored_setting({"search": {"lease_s": 0.01}}, "lease_s")
    assert str(e.value) == ("config field 'search.lease_s' must be a number >= 0.05 and "
                            "<= 86400, got 0.01")
    with pytest.raises(ValueError) as e:
        stored_setting({"search": {"max_attempts": 0}}, "max_attempts")
    assert str(e.value) == "config field 'search.max_attempts' must be an int > 0, got 0"


def test_a_stored_field_reads_its_declared_default_where_the_config_has_none():
    assert stored_value({"search": {"lease_s": 5.0}}, "lease_s") == 5.0
    assert stored_value({"search": {}}, "lease_s") == search_defaults().lease_s
    assert stored_value(None, "max_attempts") == search_defaults().max_attempts
    # a section's fields the config leaves out are at their defaults
    assert stored_value({"search": {"selection": {"min_acc": 0.5}}}, "selection") == {
        **search_defaults().selection.to_dict(), "min_acc": 0.5}
