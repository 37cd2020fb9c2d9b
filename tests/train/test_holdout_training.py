"""Training with a held-out validation split: on the device-resident data path and on the
grain pipeline alike, no step reads the held-out examples, `acc` is measured on them and
`test_acc` on the test split."""

import pytest
from helpers import tiny_config, tiny_graph

from nas.io import examples
from nas.train import TrainOptions, train_and_eval


@pytest.mark.parametrize("device_data_bytes", [2**30, 0])  # device-resident, grain
def test_validation_is_held_out_and_test_is_reported(data_dir, device_data_bytes):
    graph, constants = tiny_graph()
    config = tiny_config(data_dir, total_epochs=0.25, precise_bn_batches=0)
    config.input.device_data_bytes = device_data_bytes
    config.input.data.validation_fraction = 0.1
    config.eval.data.split = "holdout"
    config.eval.test_split = "test"
    metrics, _, _ = train_and_eval(config, eval_perf=False,
                                   options=TrainOptions(graph=graph, constants=constants))
    assert metrics.eval_examples == 143 and metrics.test_examples == 360
    assert metrics.steps == int(1294 / 64 * 0.25)  # 1437 - 143 training examples
    assert 0.0 <= metrics.acc <= 1.0 and 0.0 <= metrics.test_acc <= 1.0
    # which examples were right, one bit each in the split's order: the last eval batch's
    # padding (143 and 360 do not fill batches of 128) is not counted
    assert 143 % config.eval.batch_size and 360 % config.eval.batch_size
    for text, n, acc in ((metrics.eval_correct, 143, metrics.acc),
                         (metrics.test_correct, 360, metrics.test_acc)):
        bits = examples.from_text(text)
        assert bits.dtype == bool and bits.size == n
        assert int(bits.sum()) == round(acc * n)


def test_a_fold_is_held_out_and_evaluated(data_dir):
    """k-fold cross-validation (the finals): fold `fold` of the training split is never
    trained on and is what `acc` measures; the folds cover the split once, stratified."""
    import numpy as np

    from nas.train import data as data_lib

    graph, constants = tiny_graph()
    config = tiny_config(data_dir, total_epochs=0.25, precise_bn_batches=0)
    config.input.data.folds, config.input.data.fold, config.input.data.fold_seed = 3, 1, 7
    config.eval.data.split = data_lib.FOLD
    metrics, _, _ = train_and_eval(config, eval_perf=False,
                                   options=TrainOptions(graph=graph, constants=constants))
    assert metrics.eval_examples == 479 and metrics.steps == int(958 / 64 * 0.25)
    labels = data_lib.split_labels("digits", "train", data_dir,
                                   data_lib.open_source("digits", "train", data_dir))
    folds = [data_lib.fold_indices(labels, 3, f, 7) for f in range(3)]
    assert np.array_equal(np.sort(np.concatenate(folds)), np.arange(1437))
    for fold in folds:  # each class in proportion: within one example of a third
        counts = np.bincount(labels[fold], minlength=10)
        assert np.all(np.abs(counts - np.bincount(labels, minlength=10) / 3) <= 1)
    held = data_lib.split_source(config.input, data_lib.FOLD, data_dir)
    assert np.array_equal(held.indices, folds[1])


def test_fold_settings_are_one_line(data_dir):
    from nas.train import data as data_lib

    config = tiny_config(data_dir)
    config.input.data.folds, config.input.data.validation_fraction = 3, 0.1
    with pytest.raises(ValueError, match="set one of them, not both"):
        data_lib.split_source(config.input, "train", data_dir)
    config.input.data.validation_fraction = 0.0
    config.input.data.fold = 3
    with pytest.raises(ValueError, match=r"input.data.fold' must be in \[0, 3\)"):
        data_lib.split_source(config.input, "train", data_dir)
    config.input.data.folds = 0
    with pytest.raises(ValueError, match="eval split 'fold' needs input.data.folds > 1"):
        data_lib.split_source(config.input, data_lib.FOLD, data_dir)
