"""Users' own datasets made from scikit-learn's digits: PNG folders and Keras-style npz."""

from __future__ import annotations

import os

import numpy as np
from PIL import Image

from nas.train import digits


def digits_arrays(size: int = 8) -> dict[str, np.ndarray]:
    """The bundled digits' train/test split as greyscale uint8 (N, size, size) images."""
    from sklearn.datasets import load_digits

    raw = load_digits()
    images = np.round(raw.images * (255 / 16)).astype(np.uint8)
    if size != images.shape[1]:
        images = np.stack([np.asarray(Image.fromarray(im).resize((size, size),
                                                                 Image.BILINEAR))
                           for im in images])
    out = {}
    for split, idx in digits.split_indices().items():
        out[f"x_{split}"] = images[idx]
        out[f"y_{split}"] = raw.target[idx].astype(np.uint8)
    return out


def write_npz(path: str, arrays: dict[str, np.ndarray]) -> str:
    np.savez(path, **arrays)
    return path


def write_folder(root: str, arrays: dict[str, np.ndarray], suffix: str = ".png") -> str:
    """root/<split>/digit<label>/<i>.png, one file per image."""
    for split in ("train", "test"):
        for i, (image, label) in enumerate(zip(arrays[f"x_{split}"], arrays[f"y_{split}"],
                                               strict=True)):
            folder = os.path.join(root, split, f"digit{label}")
            os.makedirs(folder, exist_ok=True)
            Image.fromarray(image).save(os.path.join(folder, f"{i}{suffix}"))
    return root


def small_arrays(per_class: int = 3, classes: int = 3, size: int = 6,
                 channels: int | None = None) -> dict[str, np.ndarray]:
    """A few seeded random images per class: for the layout and error tests."""
    rng = np.random.default_rng(0)
    out = {}
    for split in ("train", "test"):
        n = per_class * classes
        shape = (n, size, size) + ((channels,) if channels else ())
        out[f"x_{split}"] = rng.integers(0, 256, shape, dtype=np.uint8)
        out[f"y_{split}"] = np.repeat(np.arange(classes, dtype=np.uint8), per_class)
    return out
