"""A search's dataset as a value in Ray's object store, cached once on each node.

Why: the nodes of a rented cluster (KubeRay pods, cloud VMs, TPU slices) share no disk with
the driver, and the dataset is what used to tie a search to one. The driver reads the data
once per study (`ship`) and puts it in the object store; every task gets the one reference.
A node fetches it only when its own cache (`node_cache_dir`, keyed by the content's digest)
lacks it, and converts it there once (an `npz:`/`folder:` dataset to array_record, as on
the driver). The bundled `digits` travels as its name: each node builds it from
scikit-learn. With `search.ray.dataset="node"` nothing is shipped: each node reads the
dataset where the config names it (a tfds dataset prepared on every node).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

from nas.search.execution.ray_files import Files, read_files, unpack_once


def node_cache_dir() -> str:
    """This node's cache of shipped datasets: $NAS_RAY_CACHE, else ~/.cache/nas/ray_data."""
    return os.environ.get("NAS_RAY_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "nas", "ray_data")


def dataset_files(train_config: dict[str, Any]) -> tuple[str, str, Files | None]:
    """(kind, name, files) of the dataset `train_config` trains on, read from this disk:
    kind "npz"/"folder" (name: the file or folder's base name), "tfds" (a dataset prepared in
    the data dir; name: the tfds name) or "digits" (no files: every node builds it)."""
    from nas.train import data as data_lib
    from nas.train import userdata

    inp = train_config["input"]
    name, data_dir = str(inp["data"]["name"]), str(inp.get("data_dir", "") or "")
    kind = userdata.kind_of(name)
    if kind:
        path = userdata.path_of(name)
        if not os.path.exists(path):
            raise ValueError(f"config field 'train.input.data.name': {path}: no such "
                             f"{'file' if kind == 'npz' else 'folder'} to ship to the Ray "
                             f"nodes")
        base = os.path.basename(path.rstrip(os.sep)) or kind
        return kind, base, read_files(path, prefix=base)
    if name == "digits":
        return "digits", name, None
    root = os.path.join(data_lib.resolve_data_dir(data_dir or None), name)
    if not os.path.isdir(root):
        raise ValueError(f"config field 'train.input.data.name': dataset {name!r} is not "
                         f"prepared in {os.path.dirname(root)} on the driver, so it cannot "
                         f"be shipped (prepare it there, or on every node with "
                         f"search.ray.dataset='node')")
    return "tfds", name, read_files(root, prefix=name)


def shipment(kind: str, name: str, digest: str, ref: Any) -> dict[str, Any]:
    """What each task carries about its dataset. The reference sits inside a list, so Ray
    hands it over unfetched: a node whose cache has the digest never fetches the data."""
    return {"kind": kind, "name": name, "digest": digest, "ref": [ref]}


def node_train_config(train_config: dict[str, Any], shipped: dict[str, Any] | None,
                      fetch: Callable[[Any], Files], cache_dir: str | None = None
                      ) -> dict[str, Any]:
    """`train_config` reading its dataset from this node's cache (filled from the object
    store with `fetch(ref)` the first time this node sees the digest)."""
    if shipped is None:
        return train_config
    config = copy.deepcopy(train_config)
    inp = config["input"]
    if shipped["kind"] == "digits":
        inp["data_dir"] = ""  # this node's own data dir, where it builds digits
        return config
    root = os.path.join(cache_dir or node_cache_dir(), f"{shipped['kind']}-"
                                                       f"{shipped['digest'][:24]}")
    files = os.path.join(root, "files")
    if not os.path.isdir(files):
        unpack_once(fetch(shipped["ref"][0]), files)
    if shipped["kind"] in ("npz", "folder"):
        inp["data"]["name"] = f"{shipped['kind']}:{os.path.join(files, shipped['name'])}"
        inp["data_dir"] = os.path.join(root, "tfds")  # its array_record conversion, once
    else:
        inp["data_dir"] = files
    return config
