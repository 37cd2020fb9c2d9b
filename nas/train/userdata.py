"""`input.data.name = "folder:DIR"` or `"npz:FILE"`: users' own images as a tfds dataset.

Why: every dataset takes one path (`tfds` array_record source -> grain or the devices), so
the validation split, resizing, augmentation and device-resident training need nothing new
for a user's data. Their files (`nas.train.userfiles` reads and checks them) are written
once, by a tfds builder, into array_record under the data dir, in a folder named by a digest
of their content: the next run, and every worker of a search, opens that folder and
converts nothing. A changed file (new size or modification time, other npz bytes) makes a
new digest and a new conversion.

Safe when several processes convert the same data at once, and never half-written: one
process converts (a file lock) into a temp folder next to the final one and renames it into
place; any failure removes the temp folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import numpy as np
import tensorflow_datasets as tfds
from absl import logging

from nas.train import extras, userfiles

KINDS = ("folder", "npz")
SUBDIR = "nas_user_data"  # under the tfds data dir
FORMAT = "1"  # part of the digest: a new layout of the converted data converts again


def kind_of(name: str) -> str | None:
    """"folder" or "npz" for a user dataset name, else None (a tfds name)."""
    kind, sep, _ = name.partition(":")
    return kind if sep and kind in KINDS else None


def path_of(name: str, prefix: str = "") -> str:
    """The user's folder or file named by `name`, as an absolute path. A name without one
    is a ValueError naming `input.data.name` under `prefix` (the training config's path in
    a larger one: "train.")."""
    kind = kind_of(name)
    path = name[len(kind) + 1:] if kind else ""
    if not path:
        raise ValueError(f"config field '{prefix}input.data.name': {name!r} names no path "
                         f"(expected 'folder:DIR' or 'npz:FILE')")
    return os.path.abspath(os.path.expanduser(path))


class UserImages(tfds.core.GeneratorBasedBuilder):
    """A user's images and labels as tfds writes them: array_record, splits train and test."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "a folder:DIR or npz:FILE dataset, converted once."}

    def __init__(self, *, content: userfiles.Content, **kwargs: Any) -> None:
        self._content = content
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        c = self._content
        varying = c.shape[0] is None  # images of several sizes: stored with their shapes
        image = tfds.features.Tensor(shape=c.shape, dtype=np.uint8,
                                     encoding="bytes" if varying else "none")
        label = (tfds.features.ClassLabel(names=list(c.classes)) if c.classes
                 else tfds.features.ClassLabel(num_classes=c.num_classes))
        return tfds.core.DatasetInfo(
            builder=self,
            description=f"{c.kind}:{c.path}, converted by nas",
            features=tfds.features.FeaturesDict({"image": image, "label": label, **{
                extras.PREFIX + k: tfds.features.Tensor(shape=v.shape[1:], dtype=v.dtype)
                for k, v in c.extras.items()}}),
            supervised_keys=("image", "label"),
        )

    def _split_generators(self, dl_manager: Any) -> dict[str, Any]:  # noqa: ARG002
        return {split: self._generate_examples(split) for split in userfiles.SPLITS}

    def _generate_examples(self, split: str) -> Any:
        yield from self._content.examples(split)


def converted_dir(name: str, data_dir: str, prefix: str = "") -> str:
    """The folder holding `name`'s array_record files, converting it first if it is not
    there yet (checks the files and raises one ValueError line naming the one at fault,
    under `prefix`: `_faults_under`)."""
    kind, path = _user_dataset(name, prefix)
    with _faults_under(prefix):
        key = userfiles.content_key(kind, path)
        root = os.path.join(data_dir, SUBDIR)
        final = _final_dir(kind, key, data_dir)
        if os.path.isdir(final):
            return final
        os.makedirs(root, exist_ok=True)
        with open(os.path.join(root, f".{kind}-{key[:20]}.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process converts, the others wait for it
            if not os.path.isdir(final):
                _convert(userfiles.read(kind, path), root, final)
    return final


def _final_dir(kind: str, key: str, data_dir: str) -> str:
    return os.path.join(data_dir, SUBDIR, f"{kind}-{key[:20]}-v{FORMAT}")


def check_files(name: str, data_dir: str, prefix: str = "") -> None:
    """Check the user dataset `name` as its conversion reads it (the layout, each image's
    header, the npz's arrays), writing nothing: one ValueError naming the file at fault,
    under `prefix` (`_faults_under`). A dataset converted already was checked then."""
    kind, path = _user_dataset(name, prefix)
    with _faults_under(prefix):
        if not os.path.isdir(_final_dir(kind, userfiles.content_key(kind, path), data_dir)):
            userfiles.read(kind, path)


def labels(name: str, prefix: str = "") -> userfiles.Labels:
    """The labels of the user dataset `name` (`userfiles.labels`: nothing converted); a
    fault names the file under `prefix` (`_faults_under`)."""
    kind, path = _user_dataset(name, prefix)
    with _faults_under(prefix):
        return userfiles.labels(kind, path)


def _user_dataset(name: str, prefix: str) -> tuple[str, str]:
    """(kind, absolute path) of the user dataset `name`; a ValueError naming
    `input.data.name` under `prefix` when it names none."""
    kind = kind_of(name)
    if kind is None:
        raise ValueError(f"config field '{prefix}input.data.name': {name!r} is not a user "
                         f"dataset (expected 'folder:DIR' or 'npz:FILE')")
    return kind, path_of(name, prefix)


@contextlib.contextmanager
def _faults_under(prefix: str) -> Iterator[None]:
    """A fault of the user's files (`userfiles`: it names the file, not a field) as a
    larger config names it: after the section that holds the training config ("train:
    <file>: ..." for `prefix` "train."); unchanged without a prefix."""
    try:
        yield
    except ValueError as e:
        if not prefix:
            raise
        raise ValueError(f"{prefix.rstrip('.')}: {e}") from e


def _convert(content: userfiles.Content, root: str, final: str) -> None:
    """Write `content` with the tfds builder into a temp folder, then rename it to `final`."""
    tmp = tempfile.mkdtemp(prefix=".converting-", dir=root)
    try:
        print(f"converting {content.kind}:{content.path} ({content.sizes['train']} train, "
              f"{content.sizes['test']} test images) to array_record in {final} (once)",
              flush=True)
        tfds.disable_progress_bar()
        builder = UserImages(content=content, data_dir=tmp, file_format="array_record")
        with contextlib.redirect_stdout(io.StringIO()):  # tfds names the temp folder
            builder.download_and_prepare()
        os.rename(builder.data_dir, final)  # atomic: readers see all of it or none
        logging.info("converted %s:%s to %s", content.kind, content.path, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def open_split(name: str, split: str, data_dir: str, prefix: str = "") -> Any:
    """A random-access source of `split` ("train", "test", or a slice such as
    "train[:50%]") of the user dataset `name`; a fault is named under `prefix`
    (`converted_dir`)."""
    folder = converted_dir(name, data_dir, prefix)
    builder = tfds.builder_from_directory(folder)
    try:
        return builder.as_data_source(split=split)
    except Exception as e:  # tfds raises several types for an unknown split
        raise ValueError(f"config field '{prefix}input.data.name': {name!r} has splits "
                         f"{list(userfiles.SPLITS)}, cannot read split {split!r} "
                         f"({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
