import flax.linen as nn
import jax
import numpy as np

from nas.train import perf


class _ConvDense(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Conv(16, (3, 3), padding="SAME")(x)  # 8x8x3 -> 8x8x16
        x = nn.Conv(32, (3, 3), strides=(2, 2), padding="SAME")(x)  # -> 4x4x32
        x = x.reshape(x.shape[0], -1)
        return nn.Dense(10)(x)


def test_flops_match_padding_aware_count_within_one_percent():
    model = _ConvDense()
    variables = model.init(jax.random.PRNGKey(0), np.zeros((1, 8, 8, 3), np.float32))
    measured = perf.flops_per_example(model.apply, variables, (8, 8, 3))
    analytic = (
        perf.conv_flops_same(8, 8, 3, 16, 3) + 8 * 8 * 16  # conv taps (MAC = 2) + bias
        + perf.conv_flops_same(8, 8, 16, 32, 3, stride=2) + 4 * 4 * 32
        + 2 * 512 * 10 + 10
    )
    naive = 2 * 9 * 3 * 16 * 64 + 2 * 9 * 16 * 32 * 16 + 2 * 512 * 10
    assert abs(measured - analytic) / analytic < 0.01, (measured, analytic)
    assert measured < naive  # padding taps are not counted


def test_conv_flops_same_counts_border_taps():
    # 3x3 SAME on 4x4: rows see 2,3,3,2 taps -> 10 per axis.
    assert perf.conv_flops_same(4, 4, 1, 1, 3) == 2 * 10 * 10
    assert perf.count_params({"a": {"k": np.zeros((2, 3))}, "b": {"k": np.zeros(4)}}) == 10


def test_memory_and_throughput_are_reported():
    f = jax.jit(lambda x: (x @ x).sum())
    compiled = f.lower(np.ones((64, 64), np.float32)).compile()
    temp, peak = perf.memory_bytes(compiled)
    assert peak >= temp >= 0 and peak > 0
    rate = perf.throughput(lambda: f(np.ones((64, 64), np.float32)), 64, min_seconds=0.05)
    assert rate > 0


def test_a_record_names_each_measured_field_as_the_study_does():
    from nas.train.perf import Metrics

    record = Metrics(acc=0.5, num_params=7, eval_examples=10, eval_correct="10:AA").record()
    assert record["accuracy"] == 0.5 and record["params"] == 7
    assert record["val_examples"] == 10 and record["val_correct"] == "10:AA"
    assert not {"acc", "num_params", "eval_examples", "eval_correct"} & set(record)
    # what was not measured is absent, not a placeholder a reader could take for a value
    assert not {k for k in record if k.startswith("test_") or k.startswith("start_")}
    measured = Metrics(test_acc=0.25, test_examples=4, start_acc=0.0).record()
    assert measured["test_accuracy"] == 0.25 and measured["start_accuracy"] == 0.0
    assert "test_correct" not in measured  # no bits recorded


def test_metrics_jsonl_reads_under_the_record_names_old_files_too(tmp_path):
    from nas.train.perf import read_records

    path = tmp_path / "metrics.jsonl"
    assert read_records(str(path)) == []
    path.write_text('{"step": 2, "epoch": 1, "eval_acc": 0.5, "eval_loss": 1.5}\n'
                    '{"step": 4, "epoch": 2, "accuracy": 0.75, "loss": 1.0}\n'
                    '[1, 2]\n'
                    '{"step": 5, "training_lo')  # a torn last line, as after a kill
    assert read_records(str(path)) == [{"step": 2, "epoch": 1, "accuracy": 0.5, "loss": 1.5},
                                       {"step": 4, "epoch": 2, "accuracy": 0.75, "loss": 1.0}]
