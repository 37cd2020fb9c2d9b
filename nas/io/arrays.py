"""Nested dicts of arrays as `.npy` members of a zip archive, read without pickle.

Why: exported weights must load on any machine without running code from the file. Each
array is one `.npy` member; a JSON manifest (kept by the caller) lists its key path, shape
and dtype. Reading checks every member's header against the manifest and its size against
the header before allocating anything, so a damaged or hostile archive is a ValueError,
never an object array, a pickle, or a huge allocation.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

FOLDER = "weights"
_EMPTY = object()  # marks an empty dict while flattening


def flatten(
    tree: Mapping[str, Any], prefix: tuple[str, ...] = (), empty: Any = None
) -> list[tuple[tuple[str, ...], Any]]:
    """(key path, leaf) of every leaf of nested dicts, in key order; an empty dict is a leaf
    `empty` when that is given (so that `{"batch_stats": {}}` round-trips), else skipped."""
    out = []
    for key in sorted(tree):
        value = tree[key]
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and (value or empty is None):
            out.extend(flatten(value, path, empty))
        else:
            out.append((path, empty if isinstance(value, Mapping) else value))
    return out


def write_arrays(archive: zipfile.ZipFile, tree: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Write every leaf of `tree` as a member; returns the manifest that `read_arrays` needs."""
    manifest: list[dict[str, Any]] = []
    for i, (path, leaf) in enumerate(flatten(tree, empty=_EMPTY)):
        if leaf is _EMPTY:
            manifest.append({"path": list(path), "empty_dict": True})
            continue
        array = np.asarray(leaf)
        if array.dtype.kind not in "biufc":
            raise ValueError(
                f"weights: {'/'.join(path)} has dtype {array.dtype}; only "
                f"bool, integer, float and complex arrays can be exported"
            )
        member = f"{FOLDER}/{i}.npy"
        with archive.open(member, "w", force_zip64=True) as f:
            np.lib.format.write_array(f, np.ascontiguousarray(array), allow_pickle=False)
        manifest.append(
            {
                "path": list(path),
                "member": member,
                "shape": list(array.shape),
                "dtype": array.dtype.str,
            }
        )
    return manifest


def read_arrays(archive: zipfile.ZipFile, manifest: Any, where: str) -> dict[str, Any]:
    """The nested dicts that `write_arrays` wrote; `where` names the file in errors."""
    if not isinstance(manifest, list):
        raise ValueError(f"{where}: field 'weights' must be a list of arrays")
    tree: dict[str, Any] = {}
    for i, entry in enumerate(manifest):
        here = f"{where}: weights entry #{i}"
        if isinstance(entry, dict) and entry.get("empty_dict") is True:
            path, value = _path(entry, here), {}
        else:
            path, member, shape, dtype = _entry(entry, here)
            value = _read_member(archive, member, shape, dtype, where)
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"{where}: weights path {'/'.join(path)} runs through an array")
        if path[-1] in node:
            raise ValueError(f"{where}: weights path {'/'.join(path)} appears twice")
        node[path[-1]] = value
    return tree


def _path(entry: dict[str, Any], where: str) -> list[str]:
    path = entry.get("path")
    if not (isinstance(path, list) and path and all(isinstance(k, str) for k in path)):
        raise ValueError(f"{where}: 'path' must be a non-empty list of strings")
    return path


def _entry(entry: Any, where: str) -> tuple[list[str], str, tuple[int, ...], np.dtype]:
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: must be an object with path, member, shape and dtype")
    path, member, shape = _path(entry, where), entry.get("member"), entry.get("shape")
    if not isinstance(member, str):
        raise ValueError(f"{where}: 'member' must be a string")
    if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
        raise ValueError(f"{where}: 'shape' must be a list of sizes >= 0")
    try:
        dtype = np.dtype(str(entry.get("dtype")))
    except TypeError:
        dtype = np.dtype(object)
    if dtype.kind not in "biufc":
        raise ValueError(f"{where}: 'dtype' must be a numeric dtype, got {entry.get('dtype')!r}")
    return path, member, tuple(shape), dtype


def _read_member(
    archive: zipfile.ZipFile, member: str, shape: tuple[int, ...], dtype: np.dtype, where: str
) -> np.ndarray:
    name = f"{where}: member {member!r}"
    try:
        info = archive.getinfo(member)
    except KeyError:
        raise ValueError(f"{name} is missing") from None
    nbytes = math.prod(shape) * dtype.itemsize
    if info.file_size < nbytes:
        raise ValueError(
            f"{name} holds {info.file_size} bytes, fewer than the "
            f"{nbytes} of a {dtype}{list(shape)} array"
        )
    with archive.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            header = (
                np.lib.format.read_array_header_1_0
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0
            )(f)
        except ValueError as e:
            raise ValueError(f"{name} is not a .npy array: {e}") from None
        got_shape, fortran, got_dtype = header
        if tuple(got_shape) != shape or got_dtype != dtype:
            raise ValueError(
                f"{name} is {got_dtype}{list(got_shape)}, the manifest says {dtype}{list(shape)}"
            )
        data = f.read(nbytes + 1)
    if len(data) != nbytes:
        raise ValueError(f"{name} has {len(data)} data bytes, expected {nbytes}")
    return np.frombuffer(data, dtype).reshape(shape, order="F" if fortran else "C").copy()
