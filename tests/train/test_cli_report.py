"""What `nas-train` prints: each accuracy names its split, with its 95 % Wilson interval
and n, and the checks it makes before printing anything (`nas.train.preflight`)."""

import pytest
from helpers import tiny_config

from nas.stats import intervals
from nas.train.cli import format_settings, format_table
from nas.train.config import with_defaults


def _metrics(**extra):
    return {"accuracy": 351 / 360, "loss": 0.1, "params": 1000, "flops": 2000,
            "im_sec_core_train": 1.0, "im_sec_core_infer": 2.0, "compile_seconds": 1.0,
            "train_peak_bytes": 2**20, "train_seconds": 3.0, "steps": 11,
            "val_examples": 360, **extra}


def test_wilson_matches_the_roots_of_the_score_equation():
    # (p - x)^2 n = z^2 x (1 - x), solved by hand for p = 351/360, n = 360 and p = 1, n = 10
    low, high = intervals.wilson(351 / 360, 360)
    assert low == pytest.approx(0.9531770785533203) and high == pytest.approx(0.9867927674024)
    low, high = intervals.wilson(1.0, 10)
    assert low == pytest.approx(0.7224672001371111) and high == pytest.approx(1.0)
    with pytest.raises(ValueError, match="wilson: n"):
        intervals.wilson(0.5, 0)


def test_the_summary_text_of_one_accuracy():
    assert intervals.text(0.975, 360) == "0.9750 [0.953, 0.987] n=360"
    assert intervals.text(0.975, None) == "0.9750"


def test_a_config_evaluating_on_test_says_test_with_interval_and_n():
    config = with_defaults(tiny_config("/nowhere"))
    table = format_table(_metrics(), 1, config)
    assert ("test accuracy          97.50 % (95 % interval 95.32-98.68 %, n=360; "
            "split 'test')") in table.splitlines()
    assert "test loss              0.1000" in table.splitlines()
    assert "validation" not in table


def test_an_export_says_validation_and_reports_test_too():
    # a search's candidate: evaluated on the carved validation split, tested once at the end
    config = with_defaults(tiny_config("/nowhere", **{
        "eval.data.split": "holdout", "eval.test_split": "test",
        "input.data.validation_fraction": 0.1}))
    lines = format_table(_metrics(accuracy=142 / 143, val_examples=143, test_accuracy=351 / 360,
                                  test_loss=0.2, test_examples=360), 1, config).splitlines()
    assert lines[0] == ("validation accuracy    99.30 % (95 % interval 96.15-99.88 %, n=143; "
                        "split 'holdout': 0.1 of 'train', never trained on)")
    assert lines[2] == ("test accuracy          97.50 % (95 % interval 95.32-98.68 %, n=360; "
                        "split 'test')")


def test_the_settings_block_names_no_file_that_is_not_written_yet():
    config = with_defaults(tiny_config("/nowhere"))
    block = format_settings(config, "--config=x.py", ["lr"], "/tmp/run")
    assert "config.json" not in block and "/tmp/run" not in block
    assert "  lr                  0.003  (command line)" in block.splitlines()
    assert "eval.test_split" not in block  # none: nothing to show
    config.eval.test_split = "test"
    assert "  eval.test_split     'test'" in format_settings(config, "x", []).splitlines()


@pytest.mark.parametrize("overrides, needles", [
    ({"model_name": "nope"}, ["config field 'model_name'", "'nope'", "cnn"]),
    ({"schedule.warmup_steps": -3}, ["config field 'schedule'", "warmup must be >= 0",
                                     "got -3", "x 22.5 steps per epoch at batch size 64"]),
    ({"schedule": [("^conv", {"cooldown_steps": 3, "cooldown_epochs": 1}), (".*", None)]},
     ["config field 'schedule[0]'", "cooldown_steps or cooldown_epochs, not both"]),
    ({"num_classes": 7}, ["config field 'num_classes' is 7", "'digits' has 10 classes"]),
    ({"compute_dtype": "float16"}, ["'compute_dtype'", "float16"]),
    ({"trainer": "reversible"}, ["config field 'trainer'", "not a reversible network"]),
])
def test_preflight_refuses_what_training_would_refuse_later(data_dir, overrides, needles):
    from nas.train import preflight

    config = tiny_config(data_dir)
    config.unlock()
    for key, value in overrides.items():
        if key == "schedule":
            with config.ignore_type():
                config.schedule = value
        else:
            node, *rest = key.split(".")
            if rest:
                config[node][rest[0]] = value
            else:
                config[key] = value
    with pytest.raises(ValueError) as e:
        preflight.check(with_defaults(config) if "compute_dtype" not in overrides else config)
    for needle in needles:
        assert needle in str(e.value), str(e.value)


def test_preflight_builds_the_zoo_model_and_counts_the_steps(data_dir):
    from nas.train import preflight

    config = with_defaults(tiny_config(data_dir))
    graph, constants = preflight.check(config)
    assert graph.ops and constants is not None
    assert preflight.training_steps(config) == (22, 1437 / 64)


def test_a_schedule_longer_than_the_run_is_shortened_with_one_line_each(data_dir):
    """22 steps: warmup 100 becomes 11 (half the run); each schedule of a list says so."""
    from nas.train import optim, preflight

    config = with_defaults(tiny_config(data_dir, **{"schedule.warmup_steps": 100}))
    preflight.check(config)
    assert preflight.schedule_notes(config) == [
        "config field 'schedule': warmup (100) + cooldown (0) steps exceed the run's 22 "
        "steps: shortened to warmup 11 + cooldown 0, half the run (total_epochs 1 x 22.5 "
        "steps per epoch at batch size 64)"]
    assert optim.fitted_ramps(config.schedule, 22) == (11, 0)
    config.unlock()
    with config.ignore_type():
        config.schedule = [("^conv", {"cooldown_steps": 30}), (".*", {"warmup_steps": 2})]
    notes = preflight.schedule_notes(config)
    assert len(notes) == 1 and notes[0].startswith(
        "config field 'schedule[0]': warmup (0) + cooldown (30) steps exceed the run's 22 "
        "steps: shortened to warmup 0 + cooldown 11")


def test_a_schedule_in_a_larger_config_is_named_by_its_full_path(data_dir):
    """A search's checks give the training config's path: the field its schedule line or
    its error names starts with it."""
    from nas.train import preflight

    config = with_defaults(tiny_config(data_dir, **{"schedule.warmup_steps": 100}))
    assert preflight.schedule_notes(config, "train.") == [
        "config field 'train.schedule': warmup (100) + cooldown (0) steps exceed the run's "
        "22 steps: shortened to warmup 11 + cooldown 0, half the run (total_epochs 1 x 22.5 "
        "steps per epoch at batch size 64)"]
    config.schedule.warmup_steps = -3
    with pytest.raises(ValueError) as e:
        preflight.labelled_schedule_notes({"the seed": config.to_dict()}, "train.")
    assert str(e.value) == ("config field 'train.schedule': warmup must be >= 0 steps, got -3 "
                            "(total_epochs 1 x 22.5 steps per epoch at batch size 64)")
