import numpy as np
import pytest
import tensorflow_datasets as tfds

from nas.train import data, digits


class _Indexed:
    """A random-access source whose label is the example's index (to check coverage)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        return {"image": np.full((4, 4, 3), i % 256, np.uint8), "label": np.int64(i)}


@pytest.mark.parametrize("n, batch", [(10, 4), (8, 4), (3, 8), (360, 128)])
def test_eval_covers_each_example_exactly_once(n, batch):
    ev = data.EvalData(_Indexed(n), data.make_preprocess("digits", False, 4), batch, -(-n // batch))
    seen = []
    for b in ev:
        assert b["image"].shape[0] == batch and b["mask"].shape == (batch,)
        seen += [int(lab) for lab, m in zip(b["label"], b["mask"], strict=True) if m]
    assert sorted(seen) == list(range(n))


def test_eval_pads_extra_batches_for_other_hosts():
    ev = data.EvalData(_Indexed(5), data.make_preprocess("digits", False, 4), 4, 3)
    masks = [b["mask"].sum() for b in ev]
    assert masks == [4, 1, 0]


def test_digits_labels_read_without_scikit_learn_are_its_labels(monkeypatch):
    from sklearn.datasets import load_digits

    np.testing.assert_array_equal(digits.labels(), load_digits().target)
    monkeypatch.setattr(digits.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ValueError, match="'digits': scikit-learn.*not installed"):
        digits.labels()


def test_digits_eval_data_counts_every_test_example(data_dir):
    ev = data.make_eval_data("digits", "test", data_dir, 32, 100, num_devices=3)
    assert ev.batch_size % 3 == 0
    assert sum(b["mask"].sum() for b in ev) == 360


def test_train_iterator_resumes_on_the_exact_next_batch(data_dir):
    src = data.open_source("digits", "train", data_dir)
    pp = data.make_preprocess("digits", True, 32)
    ds = data.make_train_dataset(src, pp, local_batch_size=32, seed=3, num_threads=1)
    it = iter(ds)
    for _ in range(50):  # crosses an epoch boundary (44 batches per epoch)
        next(it)
    state = it.get_state()
    expected = next(it)
    it2 = iter(ds)
    it2.set_state(state)
    got = next(it2)
    np.testing.assert_array_equal(got["image"], expected["image"])
    np.testing.assert_array_equal(got["label"], expected["label"])


def test_cifar10_path_with_mock_data():
    """tfds.testing.mock_data serves tfds.data_source, so the cifar10 path runs offline."""
    with tfds.testing.mock_data(num_examples=20):
        src = data.open_source("cifar10", "train", None)
        assert len(src) == 20
        pp = data.make_preprocess("cifar10", True, 32)
        ds = data.make_train_dataset(src, pp, local_batch_size=8, seed=0, num_threads=1)
        batch = next(iter(ds))
        assert batch["image"].shape == (8, 32, 32, 3) and batch["image"].dtype == np.float32
        assert batch["label"].dtype == np.int32
        ev = data.make_eval_data("cifar10", "test", None, 32, 16, num_devices=1)
        assert sum(b["mask"].sum() for b in ev) == ev.num_examples


def test_cifar_preprocessing_normalizes_and_augments():
    rng = np.random.default_rng(0)
    ex = {"image": np.full((32, 32, 3), 128, np.uint8), "label": 3}
    out = data.make_preprocess("cifar10", False, 32)(ex, None)
    np.testing.assert_allclose(out["image"][0, 0], (128 / 255 - data.CIFAR_MEAN) / data.CIFAR_STD,
                               rtol=1e-5)
    crops = [data.make_preprocess("cifar10", True, 32)(ex, rng)["image"] for _ in range(20)]
    assert any((c == c.min()).any() for c in crops)  # zero padding entered some crops


def test_imagenet_style_crops_have_target_size():
    rng = np.random.default_rng(0)
    ex = {"image": rng.integers(0, 255, (50, 70, 3), dtype=np.uint8), "label": 1}
    for train in (True, False):
        out = data.make_preprocess("imagenet2012", train, 24)(ex, rng if train else None)
        assert out["image"].shape == (24, 24, 3)
        assert -1.0 <= out["image"].min() and out["image"].max() <= 1.0


def test_missing_dataset_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="input.data.name"):
        data.open_source("cifar10", "train", str(tmp_path))


def test_host_split_uses_even_splits():
    assert data.host_split("train", 0, 1) == "train"
    assert data.host_split("train", 1, 2) == tfds.even_splits("train", 2)[1]


def test_plain_batches_are_read_once_and_cannot_be_edited(data_dir):
    from nas.train.config import base_config

    inp = base_config().input
    inp.data.name, inp.data_dir, inp.image_size = "digits", data_dir, 32
    first = data.plain_batches(inp, 2, 4, seed=3)
    again = data.plain_batches(inp, 2, 4, seed=3)
    assert [b.shape for b in first] == [(4, 32, 32, 3)] * 2
    assert all(a is b for a, b in zip(first, again, strict=True))  # not read again
    with pytest.raises(ValueError, match="read-only"):
        first[0][0, 0, 0, 0] = 1.0
    other = data.plain_batches(inp, 2, 4, seed=4)  # another shuffle
    assert not np.array_equal(other[0], first[0])


def test_images_take_the_channels_the_model_expects():
    """Grey images repeat into RGB; RGB images become grey by their luminance (BT.601), so a
    grey model (input.channels=1) reads an RGB dataset and an RGB one a grey dataset."""
    from nas.train.data import make_preprocess

    rgb = np.zeros((4, 4, 3), np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 255, 128, 0
    grey = make_preprocess("npz:x", False, 4, channels=1)({"image": rgb, "label": 1}, None)
    assert grey["image"].shape == (4, 4, 1)
    expected = round(0.299 * 255 + 0.587 * 128) / 127.5 - 1.0
    np.testing.assert_allclose(grey["image"], expected, rtol=1e-6)
    back = make_preprocess("npz:x", False, 4, channels=3)(
        {"image": np.full((4, 4), 51, np.uint8), "label": 0}, None)
    assert back["image"].shape == (4, 4, 3)
    np.testing.assert_allclose(back["image"], 51 / 127.5 - 1.0, rtol=1e-6)
