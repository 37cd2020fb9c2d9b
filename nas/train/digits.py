"""A tfds builder for scikit-learn's bundled 8x8 handwritten digits.

Why: the service needs a real, offline, tiny dataset that goes through exactly the
same `tfds.data_source` + grain path as cifar10 or imagenet2012. scikit-learn ships
1,797 digits; we upscale them to 32x32x3 uint8 so CIFAR-sized zoo models run unchanged,
and write them as array_record (the only format readable without TensorFlow).
"""

from __future__ import annotations

import fcntl
import gzip
import importlib.util
import os

import numpy as np
import tensorflow_datasets as tfds

IMAGE_SIZE = 32
NUM_CLASSES = 10
NUM_TEST = 360  # 1,797 - 360 = 1,437 train examples
SPLIT_SEED = 0  # fixed: the split never changes between machines or versions


def default_data_dir() -> str:
    """`$NAS_DATA_DIR` if set, else `~/.cache/nas/tensorflow_datasets`."""
    env = os.environ.get("NAS_DATA_DIR")
    if env:
        return env
    return os.path.join(os.path.expanduser("~"), ".cache", "nas", "tensorflow_datasets")


def _upscale(images8: np.ndarray) -> np.ndarray:
    """(N, 8, 8) in 0..16 -> (N, 32, 32, 3) uint8 by nearest-neighbour x4, grey to RGB."""
    scaled = np.round(images8.astype(np.float32) * (255.0 / 16.0)).astype(np.uint8)
    factor = IMAGE_SIZE // scaled.shape[1]
    up = scaled.repeat(factor, axis=1).repeat(factor, axis=2)
    return np.repeat(up[..., None], 3, axis=-1)


def split_indices() -> dict[str, np.ndarray]:
    """Deterministic train/test split of the 1,797 examples (stratification not needed)."""
    order = np.random.default_rng(SPLIT_SEED).permutation(1797)
    return {"test": np.sort(order[:NUM_TEST]), "train": np.sort(order[NUM_TEST:])}


def labels() -> np.ndarray:
    """The 1,797 labels, in scikit-learn's order, read from the file it ships.

    Why: a config's checks count the digits' classes and split sizes, and importing
    scikit-learn for that would cost every `nas-search`/`nas-train` call about a second.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("dataset 'digits': scikit-learn, which ships the digits, is not "
                         "installed")
    path = os.path.join(spec.submodule_search_locations[0], "datasets", "data",
                        "digits.csv.gz")
    with gzip.open(path, "rt") as rows:  # 64 pixels and the label, per row
        return np.array([int(float(row.rsplit(",", 1)[1])) for row in rows], dtype=np.int64)


class Digits(tfds.core.GeneratorBasedBuilder):
    """scikit-learn digits, upscaled to 32x32x3 uint8; 1,437 train / 360 test."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "sklearn digits upscaled x4 to 32x32x3, fixed split."}

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description="scikit-learn's 1,797 handwritten 8x8 digits, upscaled to 32x32x3.",
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Tensor(
                        shape=(IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8
                    ),
                    "label": tfds.features.ClassLabel(num_classes=NUM_CLASSES),
                }
            ),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager):  # noqa: ARG002 - nothing to download
        from sklearn.datasets import load_digits

        raw = load_digits()
        images = _upscale(np.asarray(raw.images))
        labels = np.asarray(raw.target, dtype=np.int64)
        return {
            name: self._generate_examples(images[idx], labels[idx], idx)
            for name, idx in split_indices().items()
        }

    def _generate_examples(self, images: np.ndarray, labels: np.ndarray, ids: np.ndarray):
        for image, label, i in zip(images, labels, ids, strict=True):
            yield int(i), {"image": image, "label": int(label)}


def ensure_built(data_dir: str | None = None) -> str:
    """Build `digits` into `data_dir` if it is not there yet; return the data dir.

    Why: first use must work offline in under a second, with no separate download step.
    Several processes may start at once on a fresh machine (search workers, test workers):
    a file lock lets exactly one of them build while the others wait and then reuse it.
    """
    data_dir = data_dir or default_data_dir()
    if Digits(data_dir=data_dir, file_format="array_record").is_prepared():
        return data_dir
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, ".digits.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        builder = Digits(data_dir=data_dir, file_format="array_record")
        if not builder.is_prepared():
            tfds.disable_progress_bar()  # a sub-second build needs no bars
            builder.download_and_prepare(
                download_config=tfds.download.DownloadConfig(
                    download_mode=tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS
                )
            )
    return data_dir
