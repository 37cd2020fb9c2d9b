import numpy as np
import tensorflow_datasets as tfds

from nas.train import digits


def test_split_is_fixed_disjoint_and_complete():
    a, b = digits.split_indices(), digits.split_indices()
    np.testing.assert_array_equal(a["train"], b["train"])
    assert len(a["train"]) == 1437 and len(a["test"]) == 360
    assert not set(a["train"]) & set(a["test"])
    assert sorted({*a["train"], *a["test"]}) == list(range(1797))


def test_builds_array_record_and_reads_with_data_source(data_dir):
    train = tfds.data_source("digits", split="train", data_dir=data_dir)
    test = tfds.data_source("digits", split="test", data_dir=data_dir)
    assert (len(train), len(test)) == (1437, 360)
    ex = train[0]
    assert ex["image"].shape == (32, 32, 3) and ex["image"].dtype == np.uint8
    labels = {int(test[i]["label"]) for i in range(len(test))}
    assert labels == set(range(10))
    # Building again is a no-op (already prepared).
    assert digits.ensure_built(data_dir) == data_dir
