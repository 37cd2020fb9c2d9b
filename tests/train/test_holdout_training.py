"""Training with a held-out validation split: on the device-resident data path and on the
grain pipeline alike, no step reads the held-out examples, `acc` is measured on them and
`test_acc` on the test split."""

import pytest
from helpers import tiny_config, tiny_graph

from nas.io import examples
from nas.train import train_and_eval


@pytest.mark.parametrize("device_data_bytes", [2**30, 0])  # device-resident, grain
def test_validation_is_held_out_and_test_is_reported(data_dir, device_data_bytes):
    graph, constants = tiny_graph()
    config = tiny_config(data_dir, total_epochs=0.25, precise_bn_batches=0)
    config.input.device_data_bytes = device_data_bytes
    config.input.data.validation_fraction = 0.1
    config.eval.data.split = "holdout"
    config.eval.test_split = "test"
    metrics, _, _ = train_and_eval(config, eval_perf=False, graph=graph, constants=constants)
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
