"""The device-resident training set: batches from (seed, step), augmentation in the step."""

from __future__ import annotations

import jax
import numpy as np
from helpers import tiny_config, tiny_graph

from nas.train import TrainOptions, data, devdata, train_and_eval


class _Indexed:
    """Digits-shaped examples whose pixels and label are the example's index."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return {"image": np.full((SIZE, SIZE, 3), i, np.uint8), "label": np.int64(i)}


SIZE = 16  # the smallest side that is shifted (`data.shift_pad`)


def _load(n=40, seed=0, name="digits", size=SIZE):
    return devdata.load(_Indexed(n), name, size, seed, jax.local_devices()[:1])


def test_each_epoch_visits_every_example_once_and_seed_fixes_the_order():
    dd = _load()
    per_epoch = dd.per_device // 8
    epoch0 = np.concatenate([dd.indices(s, 8) for s in range(per_epoch)])
    epoch1 = np.concatenate([dd.indices(s, 8) for s in range(per_epoch, 2 * per_epoch)])
    assert sorted(epoch0) == sorted(epoch1) == list(range(dd.per_device))
    assert list(epoch0) != list(epoch1)  # reshuffled every epoch
    np.testing.assert_array_equal(_load().indices(7, 8), dd.indices(7, 8))
    assert not np.array_equal(_load(seed=1).indices(0, 8), dd.indices(0, 8))


def test_batch_spans_an_epoch_boundary():
    dd = _load(n=12)
    idx = dd.indices(1, 8)  # positions 8..15 of a 12-example epoch
    assert len(idx) == 8 and len(set(idx[:4])) == 4 and len(set(idx[4:])) == 4


def test_augmentation_crops_with_the_normalized_zero_and_keeps_labels():
    dd = _load()
    share = dd.arrays  # one device: its share is the whole array
    idx = np.arange(16, dtype=np.int32)
    fn = jax.jit(dd.augment_fn())
    out = fn(share, idx, jax.random.PRNGKey(0))
    again = fn(share, idx, jax.random.PRNGKey(0))
    np.testing.assert_array_equal(out["image"], again["image"])  # same key, same batch
    labels = np.asarray(out["label"])
    images = np.asarray(out["image"])
    pp = data.make_preprocess("digits", False, SIZE)
    for img, lab in zip(images, labels, strict=True):
        value = pp({"image": np.full((SIZE, SIZE, 3), lab, np.uint8), "label": lab},
                   None)["image"]
        assert set(np.unique(img)) <= {-1.0, float(value[0, 0, 0])}
    assert (images == -1.0).any()  # some crop moved the padding in


def test_the_shift_is_a_sixteenth_of_the_side_and_none_on_small_images():
    """The shift scales with the side (2 pixels are 14 % of a 14x14 image and cost 7 points);
    32x32 keeps its 2 pixels, 28x28 gets 1, and 14x14 is not shifted on either path."""
    assert [data.shift_pad(s) for s in (8, 14, 16, 28, 32, 64)] == [0, 0, 1, 1, 2, 4]
    assert _load(size=SIZE).pad == 1 and _load(size=32).pad == 2
    assert _load(size=14).pad == 0
    rng = np.random.default_rng(0)
    ex = {"image": np.arange(14 * 14 * 3, dtype=np.uint8).reshape(14, 14, 3), "label": 1}
    plain = data.make_preprocess("npz", False, 14)(ex, None)["image"]
    for _ in range(8):  # the grain path: the image as it is
        np.testing.assert_array_equal(data.make_preprocess("npz", True, 14)(ex, rng)["image"],
                                      plain)


def test_digits_train_on_device_like_on_grain(data_dir):
    graph, constants = tiny_graph()
    accs = {}
    for name, limit in (("device", 2**30), ("grain", 0)):
        config = tiny_config(data_dir, total_epochs=2.0, **{"input.device_data_bytes": limit})
        metrics, _, _ = train_and_eval(config, eval_perf=False,
                                       options=TrainOptions(graph=graph, constants=constants))
        accs[name] = metrics.acc
    assert accs["device"] > 0.6 and abs(accs["device"] - accs["grain"]) < 0.1, accs


def test_room_for_a_whole_split_changes_no_batch():
    """Zero rows after each device's share change the arrays' shapes only: the same
    positions are drawn, and they gather the same examples."""
    plain = _load(n=40)
    roomy = devdata.load(_Indexed(40), "digits", SIZE, 0, jax.local_devices()[:1], rows=64)
    assert roomy.arrays["image"].shape[0] == 64 and roomy.per_device == plain.per_device
    key = jax.random.PRNGKey(3)
    for step in (0, 4, 9):
        idx = plain.indices(step, 8)
        np.testing.assert_array_equal(roomy.indices(step, 8), idx)
        a = plain.augment_fn()(plain.arrays, idx, key)
        b = roomy.augment_fn()(roomy.arrays, idx, key)
        np.testing.assert_array_equal(a["image"], b["image"])
        np.testing.assert_array_equal(a["label"], b["label"])


def test_a_fold_of_the_split_compiles_nothing_after_its_training_part(data_dir, tmp_path):
    """The search trains on the split less its validation part, a finals fold on two
    thirds of it: both have room for the whole split on the device, so the fold's run finds
    every program in the persistent cache."""
    graph, constants = tiny_graph()
    config = tiny_config(data_dir, total_epochs=0.2, compilation_cache_dir=str(tmp_path))
    config.input.data.validation_fraction = 0.1
    options = TrainOptions(graph=graph, constants=constants)
    train_and_eval(config, eval_perf=False, options=options)
    config.input.data.validation_fraction = 0.0
    config.input.data.folds, config.input.data.fold = 3, 0
    config.eval.data.split = data.FOLD
    fold, _, _ = train_and_eval(config, eval_perf=False, options=options)
    assert fold.compilations == 0 and fold.compile_cache_hits >= 2
