"""Users' own image data as found on disk: a class-per-folder tree, or a Keras-style `.npz`.

Why: a user arrives with images in folders or with arrays saved by numpy, not with a tfds
dataset. This module reads and checks them (one `ValueError` line naming the file at fault)
and describes them as `Content`: what the array_record conversion (`nas.train.userdata`)
writes. Nothing here writes to disk.

* `folder:DIR`: DIR/train/<class>/*.png|jpg and DIR/test/<class>/...; the classes are the
  folder names in sorted order, the same in both splits. Greyscale images stay one channel;
  if any image has colour, every image becomes RGB.
* `npz:FILE`: arrays `x_train, y_train, x_test, y_test` (as Keras publishes mnist, cifar10):
  uint8 images NHW (greyscale) or NHWC (1 or 3 channels), integer labels (N,) or (N, 1).
  Any other array is an extra (`nas.train.extras`): one row per training example (e.g. a
  teacher's soft labels, sample weights), handed to a loss that takes the batch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nas.train import extras as extras_lib

SPLITS = ("train", "test")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
_GREY_MODES = ("1", "L", "LA")
_WIDE_MODES = ("I", "F")  # 16/32-bit integer or float pixels ("I;16" too): no uint8 as is
_NPZ_ARRAYS = ("x_train", "y_train", "x_test", "y_test")

Example = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Content:
    """What a user dataset holds, enough to declare its tfds features and write it.

    `shape` is (H, W, C), with None for H and W when the images differ in size;
    `classes` are the class names (folder) or None with `num_classes` labels 0..n-1 (npz)."""

    kind: str  # "folder" or "npz"
    path: str
    shape: tuple[int | None, int | None, int]
    num_classes: int
    classes: tuple[str, ...] | None
    sizes: dict[str, int]  # examples per split
    reader: Any  # _FolderReader | _NpzReader
    extras: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # npz: train rows

    def examples(self, split: str) -> Iterator[Example]:
        """(key, {"image": uint8 HWC, "label": int}) for every example of `split`."""
        return self.reader.examples(split)


def content_key(kind: str, path: str) -> str:
    """A hex digest of what the dataset holds, cheap enough to compute on every open:
    the folder's listing with each file's size and modification time, or the npz's bytes.
    Same key, same converted dataset."""
    digest = hashlib.sha256(f"{kind}\0".encode())
    if kind == "folder":
        for split, cls, file in _listing(Path(path)):
            st = file.stat()
            digest.update(f"{split}\0{cls}\0{file.name}\0{st.st_size}\0{st.st_mtime_ns}\n"
                          .encode())
    else:
        try:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
        except OSError as e:
            raise ValueError(f"{path}: cannot read the npz file: {e.strerror}") from None
    return digest.hexdigest()


@dataclass(frozen=True)
class Labels:
    """The labels of a user dataset, read without decoding an image or writing anything:
    enough to count its classes and the examples of each split (and of its carved
    validation part) before the array_record conversion."""

    num_classes: int
    classes: tuple[str, ...] | None  # folder names (folder:), None (npz:)
    splits: dict[str, np.ndarray]  # split -> every example's label (file order)


def labels(kind: str, path: str) -> Labels:
    """The labels of the dataset at `path`: a folder's from its listing (classes are the
    sorted folder names), an npz's from its checked arrays (labels 0..max). Any fault is
    one ValueError naming the file, as `read` gives."""
    if kind == "folder":
        files = _listing(Path(path))
        classes = tuple(sorted({cls for _, cls, _ in files}))
        index = {c: i for i, c in enumerate(classes)}
        return Labels(len(classes), classes, {
            s: np.asarray([index[c] for split, c, _ in files if split == s], np.int64)
            for s in SPLITS})
    content = _read_npz(path)
    return Labels(content.num_classes, None,
                  {s: content.reader.arrays[f"y_{s}"] for s in SPLITS})


def read(kind: str, path: str) -> Content:
    """The dataset at `path`, checked: any fault is one ValueError naming the file."""
    return _read_folder(Path(path)) if kind == "folder" else _read_npz(path)


# ----------------------------------------------------------------------------- folder


def _listing(root: Path) -> list[tuple[str, str, Path]]:
    """(split, class, image file) for every image, in sorted order; checks the layout."""
    layout = f"expected {root}/train/<class>/*.png|jpg and {root}/test/<class>/..."
    if not root.is_dir():
        raise ValueError(f"{root}: no such folder ({layout})")
    classes: dict[str, list[str]] = {}
    out = []
    for split in SPLITS:
        top = root / split
        if not top.is_dir():
            raise ValueError(f"{top}: missing {split}/ folder ({layout})")
        entries = sorted(e for e in top.iterdir() if not e.name.startswith("."))
        stray = [e for e in entries if not e.is_dir()]
        if stray:
            raise ValueError(f"{stray[0]}: a file outside a class folder ({layout})")
        if not entries:
            raise ValueError(f"{top}: no class folders ({layout})")
        classes[split] = [e.name for e in entries]
        for folder in entries:
            files = sorted(f for f in folder.iterdir() if not f.name.startswith("."))
            for f in files:
                if f.suffix.lower() not in IMAGE_SUFFIXES or not f.is_file():
                    raise ValueError(f"{f}: not a .png or .jpg image file ({layout})")
            if not files:
                raise ValueError(f"{folder}: empty class folder (expected .png or .jpg "
                                 f"images)")
            out += [(split, folder.name, f) for f in files]
    if classes["train"] != classes["test"]:
        only_train = sorted(set(classes["train"]) - set(classes["test"]))
        only_test = sorted(set(classes["test"]) - set(classes["train"]))
        raise ValueError(f"{root}: class folders differ between train/ and test/ (only in "
                         f"train/: {only_train}, only in test/: {only_test})")
    return out


def _open_image(file: Path) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        return Image.open(file)
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise ValueError(f"{file}: unreadable image ({_reason(e)})") from None


def _reason(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200]


@dataclass(frozen=True)
class _FolderReader:
    files: tuple[tuple[str, str, Path], ...]
    classes: tuple[str, ...]
    mode: str  # the PIL mode every image is converted to: "L" or "RGB"

    def examples(self, split: str) -> Iterator[Example]:
        label = {c: i for i, c in enumerate(self.classes)}
        for s, cls, file in self.files:
            if s != split:
                continue
            with _open_image(file) as im:
                try:
                    image = np.asarray(im.convert(self.mode), np.uint8)
                except (OSError, ValueError) as e:  # e.g. truncated after a good header
                    raise ValueError(f"{file}: unreadable image ({_reason(e)})") from None
            if image.ndim == 2:
                image = image[..., None]
            yield f"{cls}/{file.name}", {"image": image, "label": label[cls]}


def _read_folder(root: Path) -> Content:
    files = _listing(root)
    sizes, modes = set(), set()
    for _, _, file in files:  # headers only: cheap, and a bad file is named before writing
        with _open_image(file) as im:
            if im.mode.split(";")[0] in _WIDE_MODES:  # converting would clip, not scale
                raise ValueError(f"{file}: {im.mode} pixels, expected an 8-bit greyscale or "
                                 f"colour image")
            sizes.add(im.size)
            modes.add(im.mode)
    mode = "L" if modes <= set(_GREY_MODES) else "RGB"
    channels = 1 if mode == "L" else 3
    (w, h), = sizes if len(sizes) == 1 else {(None, None)}
    classes = tuple(sorted({cls for _, cls, _ in files}))
    counts = {s: sum(1 for f in files if f[0] == s) for s in SPLITS}
    return Content("folder", str(root), (h, w, channels), len(classes), classes, counts,
                   _FolderReader(tuple(files), classes, mode))


# ----------------------------------------------------------------------------- npz


@dataclass(frozen=True)
class _NpzReader:
    arrays: dict[str, np.ndarray]
    extras: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def examples(self, split: str) -> Iterator[Example]:
        """The training split's examples carry their extras; the test split's zeros (tfds
        declares one set of features for both; the pipeline drops them there)."""
        x, y = self.arrays[f"x_{split}"], self.arrays[f"y_{split}"]
        for i in range(len(x)):
            ex = {"image": x[i], "label": int(y[i])}
            for name, rows in self.extras.items():
                ex[extras_lib.PREFIX + name] = rows[i] if split == "train" else \
                    np.zeros(rows.shape[1:], rows.dtype)
            yield str(i), ex


def _read_npz(path: str) -> Content:
    what = "expected an .npz of x_train, y_train, x_test, y_test as numpy.savez writes"
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such npz file ({what})")
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ValueError(f"{path}: unreadable npz ({_reason(e)}; {what})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise ValueError(f"{path}: a single .npy array, not an npz archive ({what})")
    with npz:
        missing = [k for k in _NPZ_ARRAYS if k not in npz.files]
        if missing:
            raise ValueError(f"{path}: missing array {missing[0]!r} (has {sorted(npz.files)}; "
                             f"{what})")
        try:
            arrays = {k: npz[k] for k in _NPZ_ARRAYS}
            others = {k: npz[k] for k in npz.files if k not in _NPZ_ARRAYS}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
            raise ValueError(f"{path}: unreadable npz ({_reason(e)}; {what})") from None
    arrays, shape, num_classes = checked_arrays(path, arrays)
    extras = extras_lib.checked(others, len(arrays["x_train"]), f"{path}: extra array")
    sizes = {s: len(arrays[f"x_{s}"]) for s in SPLITS}
    return Content("npz", path, shape, num_classes, None, sizes,
                   _NpzReader(arrays, extras), extras)


def checked_arrays(where: str, arrays: dict[str, np.ndarray]
                   ) -> tuple[dict[str, np.ndarray], tuple[int, int, int], int]:
    """(arrays as (N, H, W, C) images and (N,) labels, (H, W, C), number of classes) of
    `x_train, y_train, x_test, y_test`: an npz's, or arrays a user holds in memory
    (`nas.run_search`); each fault is one ValueError that starts with `where`."""
    arrays = dict(arrays)
    shapes = {s: _check_split(where, arrays, s) for s in SPLITS}
    if shapes["train"] != shapes["test"]:
        raise ValueError(f"{where}: x_test images are {_hwc(shapes['test'])}, x_train's "
                         f"{_hwc(shapes['train'])} (expected the same shape)")
    for s in SPLITS:
        x = arrays[f"x_{s}"]
        arrays[f"x_{s}"] = x[..., None] if x.ndim == 3 else x
        arrays[f"y_{s}"] = arrays[f"y_{s}"].reshape(-1)
    num_classes = int(max(arrays["y_train"].max(), arrays["y_test"].max())) + 1
    return arrays, shapes["train"], num_classes


def _hwc(shape: tuple) -> str:
    return "x".join(str(d) for d in shape)


def _check_split(path: str, arrays: dict[str, np.ndarray], split: str) -> tuple[int, int, int]:
    """(H, W, C) of the split's images, after checking its arrays."""
    x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
    if x.dtype != np.uint8:
        raise ValueError(f"{path}: x_{split} has dtype {x.dtype}, expected uint8 images "
                         f"(0..255)")
    if x.ndim not in (3, 4) or (x.ndim == 4 and x.shape[-1] not in (1, 3)):
        raise ValueError(f"{path}: x_{split} has shape {x.shape}, expected (N, H, W) or "
                         f"(N, H, W, C) with C 1 or 3")
    if len(x) == 0:
        raise ValueError(f"{path}: x_{split} holds no images")
    if not np.issubdtype(y.dtype, np.integer) or y.ndim not in (1, 2) or (
            y.ndim == 2 and y.shape[1] != 1):
        raise ValueError(f"{path}: y_{split} has dtype {y.dtype} and shape {y.shape}, "
                         f"expected integer labels of shape (N,) or (N, 1)")
    if len(y) != len(x):
        raise ValueError(f"{path}: x_{split} holds {len(x)} images but y_{split} "
                         f"{len(y)} labels (expected the same length)")
    if y.min() < 0:
        raise ValueError(f"{path}: y_{split} has label {int(y.min())}, expected labels "
                         f">= 0")
    return (int(x.shape[1]), int(x.shape[2]), int(x.shape[3]) if x.ndim == 4 else 1)
