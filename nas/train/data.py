"""Input pipelines: `tfds.data_source` (array_record) fed through grain, no TensorFlow.

Why: reading is random access (array_record), so shuffling is an index permutation per epoch
(exact, no buffer) and the whole pipeline state is one integer: the train iterator is saved
in checkpoints and resumes on exactly the next batch. Preprocessing is numpy, per example,
following big_vision's recipes:

* digits: value range to [-1, 1]; train augmentation is a random shift (pad, crop) of
  `shift_pad(image_size)` pixels: 2 at 32x32, none below 16x16.
* cifar10: value range to [0, 1]; train: pad-4 random crop + horizontal flip; then
  normalize with the CIFAR-10 mean/std.
* folder:DIR, npz:FILE (users' own images, `nas.train.userdata`): resized to
  `image_size` (bilinear), grey to RGB, value range to [-1, 1]; train augmentation is the
  digits' random shift (`shift_pad`): no flip, which would change what a digit or a letter
  means.
* imagenet2012 (and any other dataset with images of varying size): train: inception crop
  to `image_size` + flip; eval: resize the short side to image_size*256/224, center crop;
  value range to [-1, 1].

Labels stay integers; the train step one-hots them (less to copy to the device).

Validation: `input.data.validation_fraction` > 0 carves that fraction of the training split
out (stratified by label, the same examples whatever the run's seed): no training path reads
it, and the eval split `HOLDOUT` names it. A search decides on it and keeps the test split
for reporting.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grain
import jax
import numpy as np
import tensorflow_datasets as tfds

from nas.train import digits as digits_lib
from nas.train import extras as extras_lib
from nas.train import userdata, userfiles

CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)
CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)

Example = dict[str, np.ndarray]

HOLDOUT = "holdout"  # eval split: the carved validation part of the training split
FOLD = "fold"  # eval split: the held-out fold of a k-fold cross-validation (input.data.folds)
_HOLDOUT_SEED = 20240525  # fixed: every run and candidate holds out the same examples


# ----------------------------------------------------------------------------- preprocessing


def _pad_crop(image: np.ndarray, pad: int, rng: np.random.Generator) -> np.ndarray:
    h, w = image.shape[:2]
    padded = np.pad(image, ((pad, pad), (pad, pad), (0, 0)))
    y, x = rng.integers(0, 2 * pad + 1, size=2)
    return padded[y : y + h, x : x + w]


def _resize(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bilinear resize of a uint8 HWC image to (height, width) with PIL."""
    from PIL import Image

    if image.shape[:2] == size:
        return image
    if image.ndim == 3 and image.shape[-1] == 1:  # PIL takes grey as (H, W)
        return _resize(image[..., 0], size)[..., None]
    return np.asarray(Image.fromarray(image).resize((size[1], size[0]), Image.BILINEAR))


def _inception_crop(image: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """Random crop of 5%-100% of the area, aspect 3/4-4/3, resized to size x size."""
    h, w = image.shape[:2]
    for _ in range(10):
        area = h * w * rng.uniform(0.05, 1.0)
        aspect = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        ch, cw = int(round(math.sqrt(area / aspect))), int(round(math.sqrt(area * aspect)))
        if 0 < ch <= h and 0 < cw <= w:
            y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
            return _resize(image[y : y + ch, x : x + cw], (size, size))
    return _center_crop(image, size)


def _center_crop(image: np.ndarray, size: int) -> np.ndarray:
    h, w = image.shape[:2]
    short = size * 256 // 224
    scale = short / min(h, w)
    image = _resize(image, (max(size, round(h * scale)), max(size, round(w * scale))))
    h, w = image.shape[:2]
    y, x = (h - size) // 2, (w - size) // 2
    return image[y : y + size, x : x + size]


_LUMINANCE = np.array([0.299, 0.587, 0.114], np.float32)  # ITU-R BT.601


def _rgb(image: np.ndarray, channels: int = 3) -> np.ndarray:
    """`image` with `channels` channels: grey repeated into RGB, or RGB to grey by its
    luminance (the model's input shape decides, `input.channels`)."""
    image = np.asarray(image)
    if image.ndim == 2:
        image = image[..., None]
    if image.shape[-1] == channels:
        return image
    if channels == 3:
        return np.repeat(image, 3, axis=-1)
    grey = image.astype(np.float32) @ _LUMINANCE
    return np.round(grey)[..., None].astype(image.dtype)


def scale(images: Any) -> Any:
    """uint8 pixel values (0..255) to the [-1, 1] a model sees: `x / 127.5 - 1` in float32
    (numpy or jax arrays). Every dataset but CIFAR's (normalized by its mean and std) is
    scaled so; `preprocess` is this, after the eval-time resizing."""
    return images.astype(np.float32) / 127.5 - 1.0


def preprocess(images: Any, image_size: int | None = None, channels: int | None = None
               ) -> np.ndarray:
    """`nas.preprocess`: the exact transform a model of a search on images given as arrays,
    an npz or a folder (and on the digits) sees at evaluation: uint8 images (N, H, W) or
    (N, H, W, C) to float32 (N, image_size, image_size, channels) in [-1, 1], `x / 127.5 -
    1`, after a bilinear resize to `image_size` and grey <-> RGB to `channels` when given
    (the model's input shape; by default the images' own). A teacher, a pretrained model
    or a deployment feeds the model this. (CIFAR-10/100 by tfds name are normalized by
    their mean and std instead: `make_preprocess`.)"""
    x = np.asarray(images)
    if x.dtype != np.uint8 or x.ndim not in (3, 4):
        raise ValueError(f"preprocess: images have dtype {x.dtype} and shape {x.shape}, "
                         f"expected uint8 (N, H, W) or (N, H, W, C)")
    if x.ndim == 3:
        x = x[..., None]
    size = image_size or x.shape[1]
    if size == x.shape[1] == x.shape[2] and (channels or x.shape[-1]) == x.shape[-1]:
        return scale(x)  # the pipeline's own scaling, without a per-image loop
    pp = make_preprocess("npz:", False, size, channels=channels or x.shape[-1])
    return np.stack([pp({"image": image, "label": 0}, None)["image"] for image in x])


def shift_pad(image_size: int) -> int:
    """Pixels of the random shift (pad, then crop) of digits and users' images: 1/16 of the
    side, so 2 at 32x32, 1 at 28x28 and none below 16x16.

    Why: a shift of 2 pixels is 14 % of a 14x14 image. On 4,000 Fashion-MNIST images at
    14x14 it cost a user's CNN 7 points of held-out accuracy after 3 epochs (0.69 against
    0.76 unshifted) and 7 after 10 epochs (0.75 against 0.83); at 28x28 a 1-pixel shift
    cost 2.5 after 3 (`benchmarks/first_try.py`, docs/benchmarks.md)."""
    return max(0, int(image_size)) // 16


def make_preprocess(
    name: str, train: bool, image_size: int, augment: bool = True, channels: int = 3,
    keep_extras: bool = True,
) -> Callable[[Example, np.random.Generator | None], Example]:
    """(example, rng) -> {"image": float32 HWC, "label": int32, and the example's extras
    (`nas.train.extras`) unless not `keep_extras`}; rng is None for eval. Images have
    `channels` channels (`_rgb`)."""
    pp = _make_preprocess(name, train, image_size, augment, channels)

    def with_extras(ex: Example, rng: np.random.Generator | None) -> Example:
        out = pp(ex, rng)
        if keep_extras:
            out.update({k: np.asarray(ex[k]) for k in extras_lib.keys_of(ex)})
        return out

    return with_extras


def _make_preprocess(
    name: str, train: bool, image_size: int, augment: bool, channels: int
) -> Callable[[Example, np.random.Generator | None], Example]:
    base = name.split("/")[0].split(":")[0]

    def finish(image: np.ndarray, label: Any) -> Example:
        return {"image": image.astype(np.float32), "label": np.int32(label)}

    if base == "digits":

        def pp(ex: Example, rng: np.random.Generator | None) -> Example:
            image = _rgb(ex["image"], channels)
            if image.shape[0] != image_size:  # stored at 32x32; a config may ask for less
                image = _resize(image, (image_size, image_size))
            if train and augment and rng is not None:
                image = _pad_crop(image, shift_pad(image_size), rng)
            return finish(scale(image), ex["label"])

    elif base in userdata.KINDS:

        def pp(ex: Example, rng: np.random.Generator | None) -> Example:
            image = _resize(_rgb(ex["image"], channels), (image_size, image_size))
            if train and augment and rng is not None:
                image = _pad_crop(image, shift_pad(image_size), rng)
            return finish(scale(image), ex["label"])

    elif base == "cifar10" or base == "cifar100":

        def pp(ex: Example, rng: np.random.Generator | None) -> Example:
            image = _rgb(ex["image"], channels).astype(np.float32) / 255.0
            if train and augment and rng is not None:
                image = _pad_crop(image, 4, rng)
                if rng.random() < 0.5:
                    image = image[:, ::-1]
            mean, std = ((CIFAR_MEAN, CIFAR_STD) if channels == 3 else
                         (CIFAR_MEAN @ _LUMINANCE, CIFAR_STD @ _LUMINANCE))
            return finish((image - mean) / std, ex["label"])

    else:

        def pp(ex: Example, rng: np.random.Generator | None) -> Example:
            image = _rgb(ex["image"], channels)
            if train and augment and rng is not None:
                image = _inception_crop(image, image_size, rng)
                if rng.random() < 0.5:
                    image = image[:, ::-1]
            else:
                image = _center_crop(image, image_size)
            return finish(scale(image), ex["label"])

    return pp


# ----------------------------------------------------------------------------- sources


def resolve_data_dir(data_dir: str | None) -> str:
    return data_dir or digits_lib.default_data_dir()


def host_split(split: str, process_index: int, process_count: int) -> str:
    """This host's share of `split` (tfds.even_splits) when there are several hosts."""
    if process_count <= 1:
        return split
    return tfds.even_splits(split, n=process_count, drop_remainder=False)[process_index]


def _remembered(table: dict, key: Any, make: Callable[[], Any], keep: int) -> Any:
    """`table[key]`, made on first use; at most `keep` entries, the oldest dropped first.
    For what every candidate of a search reads the same, once per process."""
    if key not in table:
        if len(table) >= keep:
            table.pop(next(iter(table)))
        table[key] = make()
    return table[key]


_SOURCES: dict[tuple[str, str, str], Any] = {}  # per process, a handful of entries


def open_source(name: str, split: str, data_dir: str | None, prefix: str = "") -> Any:
    """A random-access tfds source; builds the bundled `digits` on first use. A dataset
    that cannot be opened is one ValueError line naming `input.data.name` under `prefix`
    (the training config's path in a larger one: "train.").

    Opened once per process (the sources are read-only): a search candidate opened its
    training, validation and test splits, and more, at about 12 ms each."""
    data_dir = resolve_data_dir(data_dir)
    return _remembered(_SOURCES, (name, split, data_dir),
                       lambda: _open_source(name, split, data_dir, prefix), keep=16)


def _open_source(name: str, split: str, data_dir: str, prefix: str) -> Any:
    if userdata.kind_of(name):
        return userdata.open_split(name, split, data_dir, prefix)
    if name == "digits":
        digits_lib.ensure_built(data_dir)
    try:
        return tfds.data_source(name, split=split, data_dir=data_dir, download=False)
    except Exception as e:  # tfds raises several types for a missing dataset or split
        if not _is_prepared(name, data_dir):
            raise ValueError(
                f"config field '{prefix}input.data.name': dataset {name!r} is not prepared in "
                f"{data_dir} (build it there with tfds, file_format='array_record', or set "
                f"input.data_dir)"
            ) from e
        raise ValueError(
            f"config field '{prefix}input.data.name': cannot open {name!r} split {split!r} in "
            f"{data_dir}: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
        ) from e


@dataclass(frozen=True)
class Subset:
    """Random access to the examples of `source` at `indices` (in that order)."""

    source: Any
    indices: np.ndarray

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Any:
        return self.source[int(self.indices[i])]

    @property
    def dataset_info(self) -> Any:
        return self.source.dataset_info


def holdout_indices(labels: np.ndarray, fraction: float, prefix: str = "") -> np.ndarray:
    """Sorted positions of the validation examples: `fraction` of each class (rounded, at
    least one of a class with two or more examples), drawn with a fixed seed. A bad
    fraction names its field under `prefix`."""
    if not 0 < fraction < 1:
        raise ValueError(f"config field '{prefix}input.data.validation_fraction' must be in "
                         f"(0, 1) to carve a validation split, got {fraction:g}")
    rng = np.random.default_rng(_HOLDOUT_SEED)
    held = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        take = int(round(fraction * len(members)))
        take = min(max(take, 1 if len(members) > 1 else 0), len(members) - 1)
        held.append(rng.permutation(members)[:take])
    return np.sort(np.concatenate(held)) if held else np.zeros(0, np.int64)


def fold_indices(labels: np.ndarray, folds: int, fold: int, seed: int, prefix: str = ""
                 ) -> np.ndarray:
    """Sorted positions of fold `fold` of `folds`: each class's examples shuffled with
    `seed` and dealt round-robin (one deal over all classes), so every fold holds each
    class in proportion and fold sizes differ by at most one. A bad fold names its field
    under `prefix`."""
    if folds < 2 or not 0 <= fold < folds:
        raise ValueError(f"config field '{prefix}input.data.fold' must be in [0, {folds}) "
                         f"with input.data.folds={folds} (at least 2), got {fold}")
    if len(labels) < folds:
        raise ValueError(f"config field '{prefix}input.data.folds': {folds} folds of "
                         f"{len(labels)} examples")
    rng = np.random.default_rng(seed)
    order = np.concatenate([rng.permutation(np.flatnonzero(labels == label))
                            for label in np.unique(labels)])
    return np.sort(order[fold::folds])


def carved(inp: Any, prefix: str = "") -> tuple[str, float, int]:
    """How `inp` carves its training split: (eval split name, validation fraction, folds);
    ("", 0, 0) when nothing is carved. Both at once is a one-line ValueError naming the
    two fields under `prefix`."""
    fraction = float(inp.data.get("validation_fraction", 0.0) or 0.0)
    folds = int(inp.data.get("folds", 0) or 0)
    if fraction > 0 and folds:
        raise ValueError(f"config fields '{prefix}input.data.validation_fraction' and "
                         f"'{prefix}input.data.folds': set one of them, not both")
    return (FOLD, 0.0, folds) if folds else (HOLDOUT, fraction, 0) if fraction > 0 else \
        ("", 0.0, 0)


def held_out(inp: Any, labels: np.ndarray, prefix: str = "") -> np.ndarray:
    """Sorted positions of the training split that `inp` holds out (its validation part,
    or its fold); a bad carving names its fields under `prefix`."""
    name, fraction, folds = carved(inp, prefix)
    if name == FOLD:
        return fold_indices(labels, folds, int(inp.data.fold), int(inp.data.fold_seed),
                            prefix)
    return holdout_indices(labels, fraction, prefix)


_SPLIT_LABELS: dict[tuple, np.ndarray] = {}


def split_labels(name: str, split: str, data_dir: str | None, source: Any) -> np.ndarray:
    """Every label of `source` (split `split` of dataset `name`), read once per process:
    every candidate of a search carves the same validation split, and reading the labels
    decodes every example (about 0.2 s for the 1,437 digits)."""
    key = (name, split, resolve_data_dir(data_dir), len(source))
    if key not in _SPLIT_LABELS:
        _SPLIT_LABELS[key] = np.asarray([source[i]["label"] for i in range(len(source))])
    return _SPLIT_LABELS[key]


def split_source(inp: Any, split: str, data_dir: str | None, process_index: int = 0,
                 process_count: int = 1, prefix: str = "") -> Any:
    """This host's share of `split` of the input config `inp`: with
    `inp.data.validation_fraction` > 0, the training split without its validation part,
    and `HOLDOUT` that part; any other split as tfds names it. A bad field is named under
    `prefix`, the training config's path in a larger one (`check_dataset`)."""
    name = _carved_split(inp, split, prefix)
    if not name:
        return open_source(inp.data.name, host_split(split, process_index, process_count),
                           data_dir, prefix)
    full = open_source(inp.data.name, inp.data.split, data_dir, prefix)
    held = held_out(inp, split_labels(inp.data.name, inp.data.split, data_dir, full), prefix)
    keep = held if split == name else np.setdiff1d(np.arange(len(full)), held)
    return Subset(full, np.array_split(keep, process_count)[process_index])


def split_size(inp: Any, split: str, data_dir: str | None, prefix: str = "") -> int:
    """The number of examples `split_source(inp, split, ...)` gives over all hosts. A user
    dataset's (folder:, npz:) or the digits' split train or test is counted from its
    labels, without converting or building it: a run's checks come before anything is
    written. A bad field is named under `prefix` (`split_source`)."""
    base = inp.data.split if split in (HOLDOUT, FOLD) else split
    labels = _labels_unwritten(inp.data.name, base, prefix)
    if labels is None:
        return len(split_source(inp, split, data_dir, prefix=prefix))
    name = _carved_split(inp, split, prefix)
    if not name:
        return len(labels)
    held = len(held_out(inp, labels, prefix))
    return held if split == name else len(labels) - held


def _carved_split(inp: Any, split: str, prefix: str) -> str:
    """The carved eval split's name when `split` is it or the training split it is carved
    from, else "" (a split as tfds names it). A carved name without its carving is one
    line, naming the fields under `prefix`."""
    name, _, _ = carved(inp, prefix)
    if split in (HOLDOUT, FOLD) and split != name:
        need = (f"{prefix}input.data.validation_fraction > 0" if split == HOLDOUT
                else f"{prefix}input.data.folds > 1")
        raise ValueError(f"eval split {split!r} needs {need} (the part of "
                         f"{prefix}input.data.split {inp.data.split!r} held out)")
    return name if name and split in (name, inp.data.split) else ""


def _labels_unwritten(name: str, split: str, prefix: str) -> np.ndarray | None:
    """Every label of `split` of a user dataset or of the bundled digits, read from what
    they are made of (files, scikit-learn's arrays) without converting or building them;
    None for any other dataset or split. A fault is named under `prefix`."""
    kind = userdata.kind_of(name)
    if kind and split in userfiles.SPLITS:
        return userdata.labels(name, prefix).splits[split]
    if name == "digits" and split in ("train", "test"):
        return digits_lib.labels()[digits_lib.split_indices()[split]]
    return None


def dataset_classes(name: str, data_dir: str | None = None, split: str = "train",
                    prefix: str = "") -> int:
    """The number of classes of the dataset `name` (`input.data.name`): a `folder:DIR`'s
    class folders, an `npz:FILE`'s labels (the largest + 1), a tfds dataset's label
    feature (`split` is opened to read it). A user dataset is not converted for it.
    ValueError (one line) when the dataset cannot be read or declares no class count,
    naming the field under `prefix`."""
    kind = userdata.kind_of(name)
    if kind:
        return userdata.labels(name, prefix).num_classes
    if name == "digits":
        return digits_lib.NUM_CLASSES
    features = open_source(name, split, data_dir, prefix).dataset_info.features
    found = getattr(features["label"], "num_classes", None) if "label" in features else None
    if not found:
        raise ValueError(f"config field '{prefix}num_classes': dataset {name!r} declares no "
                         f"number of classes (no ClassLabel 'label'); set num_classes")
    return int(found)


def check_num_classes(config: Any, prefix: str = "") -> int:
    """The number of classes `config` trains: `num_classes`, or with 0 the data's
    (`dataset_classes`). A number set that disagrees with the data is one ValueError line
    naming the field (under `prefix`, the config's path in a larger one) and both numbers
    (an npz's labels only bound it from below: a class may have no example)."""
    inp = config.input
    name, given = inp.data.name, int(config.num_classes)
    found = dataset_classes(name, inp.data_dir or None, inp.data.split, prefix)
    kind = userdata.kind_of(name)
    if given == 0:
        return found
    if kind == "npz" and given < found:
        raise ValueError(f"{userdata.path_of(name, prefix)}: labels up to {found - 1}, "
                         f"outside config field '{prefix}num_classes' = {given} (labels "
                         f"must be 0..{given - 1}; 0 takes the number from the data)")
    if kind != "npz" and given != found:
        what = "class folders" if kind == "folder" else "classes"
        raise ValueError(f"config field '{prefix}num_classes' is {given}, but dataset "
                         f"{name!r} has {found} {what} (0 takes the number from the data)")
    return given


def with_num_classes(config: Any) -> Any:
    """A copy of the training config `config` whose `num_classes` is the number it trains
    (`check_num_classes`): what every front door records, so a study, a checkpoint and an
    export hold the number and never need the data to know it."""
    resolved = check_num_classes(config)
    if int(config.num_classes) == resolved:
        return config
    out = config.copy_and_resolve_references()
    with out.unlocked():
        out.num_classes = resolved
    return out


def check_dataset(config: Any, prefix: str = "") -> None:
    """The training split of a (full) training config opens (a user dataset is counted,
    not converted), holds a batch, and its classes are the config's `num_classes`
    (`check_num_classes`): fewer would one-hot the larger labels to all-zero targets and
    train silently on a wrong task, more would train a head for classes never seen.
    `prefix`: the config's path in a larger one ("train." in a search's), which every
    field named in an error starts with."""
    inp = config.input
    if userdata.kind_of(inp.data.name):
        userdata.check_files(inp.data.name, resolve_data_dir(inp.data_dir or None), prefix)
    size = split_size(inp, inp.data.split, inp.data_dir or None, prefix)
    if size < inp.batch_size:
        raise ValueError(f"config field '{prefix}input.batch_size' must be <= the {size} "
                         f"examples of {inp.data.name!r} split {inp.data.split!r}, got "
                         f"{inp.batch_size}")
    check_num_classes(config, prefix)


def _is_prepared(name: str, data_dir: str) -> bool:
    try:
        return tfds.builder(name, data_dir=data_dir).is_prepared()
    except Exception:  # unknown dataset name, unreadable dir
        return False


# ----------------------------------------------------------------------------- iterators


def _stack(examples: list[Example]) -> dict[str, np.ndarray]:
    return {k: np.stack([ex[k] for ex in examples]) for k in examples[0]}


def make_train_dataset(
    source: Any,
    preprocess: Callable[[Example, np.random.Generator | None], Example],
    *,
    local_batch_size: int,
    seed: int,
    shuffle: bool = True,
    num_threads: int = 2,
    prefetch: int = 4,
) -> grain.IterDataset:
    """Endless, per-epoch reshuffled, preprocessed batches (drop remainder).

    The returned dataset's iterator has get_state()/set_state() (a dict of ints), which is
    what a checkpoint stores to resume on the exact next batch.
    """
    if len(source) < local_batch_size:
        raise ValueError(
            f"config field 'input.batch_size': {local_batch_size} per host exceeds the "
            f"{len(source)} training examples"
        )
    ds = grain.MapDataset.source(source)
    if shuffle:
        ds = ds.shuffle(seed=seed)
    ds = ds.repeat(None).random_map(lambda ex, rng: preprocess(ex, rng), seed=seed + 1)
    ds = ds.batch(local_batch_size, drop_remainder=True, batch_fn=_stack)
    options = grain.ReadOptions(num_threads=max(1, num_threads), prefetch_buffer_size=prefetch)
    return ds.to_iter_dataset(options)


@dataclass(frozen=True)
class EvalData:
    """Every example of a split exactly once, in fixed-size batches with a `mask`.

    `num_batches` is the same on every host (computed from the largest host share), so
    collective eval steps never wait on a host that ran out; surplus batches are all-padding.
    """

    source: Any
    preprocess: Callable[[Example, np.random.Generator | None], Example]
    batch_size: int
    num_batches: int
    batches: tuple[dict[str, np.ndarray], ...] | None = None  # all of them, when kept

    @property
    def num_examples(self) -> int:
        return len(self.source)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        if self.batches is not None:
            yield from self.batches
            return
        ds = grain.MapDataset.source(self.source).map(lambda ex: self.preprocess(ex, None))
        ds = ds.batch(self.batch_size, drop_remainder=False, batch_fn=_stack)
        it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=2)))
        template = None
        for _ in range(self.num_batches):
            batch = next(it, None)
            if batch is None:  # this host has fewer batches than another: all padding
                yield {k: np.zeros_like(v) for k, v in template.items()} | {
                    "mask": np.zeros(self.batch_size, np.float32)
                }
                continue
            n = len(batch["label"])
            template = batch if template is None else template
            if n < self.batch_size:
                batch = {
                    k: np.concatenate([v, np.zeros((self.batch_size - n, *v.shape[1:]), v.dtype)])
                    for k, v in batch.items()
                }
            mask = np.zeros(self.batch_size, np.float32)
            mask[:n] = 1.0
            yield batch | {"mask": mask}


_PLAIN_BATCHES: dict[str, list[np.ndarray]] = {}  # per process, a handful of entries


def plain_batches(inp: Any, count: int, batch_size: int, seed: int) -> list[np.ndarray]:
    """`count` batches of preprocessed, non-augmented training images of the input config
    `inp` (the whole split, shuffled by `seed`: the same on every host), as read-only arrays.

    Read once per process: every candidate of a search takes the same batches (to fit its
    new ops, for its batch-norm statistics), and opening and preprocessing them cost a
    child about 0.1 s."""
    plain = inp.to_dict() if hasattr(inp, "to_dict") else dict(inp)
    data_dir = resolve_data_dir(inp.data_dir or None)
    key = json.dumps([plain, data_dir, count, batch_size, seed], sort_keys=True, default=str)

    def read() -> list[np.ndarray]:
        source = split_source(inp, inp.data.split, data_dir)
        ds = make_train_dataset(
            source, make_preprocess(inp.data.name, False, inp.image_size, False,
                                    inp.get("channels", 3)),
            local_batch_size=min(batch_size, len(source)), seed=seed, shuffle=True,
            num_threads=1, prefetch=1)
        it = iter(ds)
        batches = [np.array(next(it)["image"]) for _ in range(count)]
        for batch in batches:
            batch.setflags(write=False)
        return batches

    return list(_remembered(_PLAIN_BATCHES, key, read, keep=8))


def make_eval_data(
    name: str,
    split: str,
    data_dir: str | None,
    image_size: int,
    global_batch_size: int,
    num_devices: int,
    inp: Any = None,
) -> EvalData:
    """Eval data for this host; the per-host batch is rounded up to a multiple of devices.
    With the input config `inp`, `split` may be its carved validation part (`split_source`)."""
    pc, pi = jax.process_count(), jax.process_index()
    if inp is not None:
        total = len(split_source(inp, split, data_dir)) if pc > 1 else None
        source = split_source(inp, split, data_dir, pi, pc)
    else:
        total = len(open_source(name, split, data_dir)) if pc > 1 else None
        source = open_source(name, host_split(split, pi, pc), data_dir)
    local = max(1, global_batch_size // pc)
    local = int(math.ceil(local / num_devices) * num_devices)
    largest_share = math.ceil(total / pc) if total is not None else len(source)
    data = EvalData(
        source=source,
        preprocess=make_preprocess(name, train=False, image_size=image_size,
                                   channels=int(inp.get("channels", 3)) if inp else 3,
                                   keep_extras=carries_extras(inp, split)),
        batch_size=local,
        num_batches=max(1, math.ceil(largest_share / local)),
    )
    carving = carved(inp) + (int(inp.data.get("fold", 0)), int(inp.data.get("fold_seed", 0))) \
        if inp else ()
    key = (name, split, resolve_data_dir(data_dir), image_size, carving, local,
           data.num_batches, len(source), pi, pc,
           int(inp.get("channels", 3)) if inp else 3)
    return kept_batches(data, key, image_size)


def carries_extras(inp: Any, split: str) -> bool:
    """Whether `split` holds real extras: the training split and its carved validation
    part do; the test split (zeros where the data is stored) does not."""
    return inp is not None and (split == HOLDOUT or split.startswith(inp.data.split))


_EVAL_BATCHES: dict[tuple, tuple[dict[str, np.ndarray], ...]] = {}
EVAL_KEEP_BYTES = 64 * 2**20  # eval sets up to this size stay in host memory


def kept_batches(data: EvalData, key: tuple, image_size: int) -> EvalData:
    """`data` with its batches read and preprocessed once per process (`key` names them)
    when they fit in `EVAL_KEEP_BYTES`: a search evaluates every candidate on the same
    validation and test examples, and reading them cost about 0.3 s per candidate."""
    if data.num_batches * data.batch_size * image_size**2 * 3 * 4 > EVAL_KEEP_BYTES:
        return data
    # another search's, or another split: the newest 4 are kept
    return dataclasses.replace(data, batches=_remembered(_EVAL_BATCHES, key,
                                                         lambda: tuple(data), keep=4))
