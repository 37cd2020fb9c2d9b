"""The Ray executor's parts: folders as values, the dataset as a value, reaching Ray, and
what one task runs on its node.

Why: a Ray node may share no disk with the driver. What a task needs from the driver's disk
and what it writes there travel as `Files` through Ray's object store.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import os
import shutil
import socket
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from nas.search.execution.task import Failure, Task
from nas.search.execution.worker import describe_failure, one_line, train_or_failure
from nas.train import data as data_lib
from nas.train import userdata

REACH_TIMEOUT_S = 5.0
RUN_FOLDER = "train"

# ----------------------------------------------------------------------------- files


@dataclass(frozen=True)
class Files:
    """Files under one folder: (path relative to it, bytes, modification time in ns)."""

    entries: tuple[tuple[str, bytes, int], ...] = ()

    @property
    def size(self) -> int:
        return sum(len(data) for _, data, _ in self.entries)

    def digest(self) -> str:
        """A hex digest of the paths and bytes (not the times): same digest, same data."""
        h = hashlib.sha256()
        for rel, data, _ in self.entries:
            h.update(f"{rel}\0{len(data)}\0".encode())
            h.update(data)
        return h.hexdigest()


def read_files(root: str, keep: Callable[[str], bool] = lambda rel: True,
               prefix: str = "") -> Files:
    """The files under `root` (a folder, or one file) whose relative path `keep` accepts,
    named `prefix/relative path`; sorted, so the same folder gives the same `Files`."""
    if os.path.isfile(root):
        st = os.stat(root)
        with open(root, "rb") as f:
            return Files(((prefix or os.path.basename(root), f.read(), st.st_mtime_ns),))
    entries = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if not keep(rel) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            entries.append((f"{prefix}/{rel}" if prefix else rel, data,
                            os.stat(path).st_mtime_ns))
    return Files(tuple(entries))


def write_files(files: Files, root: str) -> None:
    """Writes `files` under `root`, each with its recorded modification time (a folder
    dataset's content key reads the times)."""
    for rel, data, mtime_ns in files.entries:
        parts = rel.split("/")
        if rel.startswith("/") or ".." in parts:
            raise ValueError(f"{rel!r}: a shipped file must stay inside its folder")
        path = os.path.join(root, *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        os.utime(path, ns=(mtime_ns, mtime_ns))


def replace_folder(files: Files, root: str) -> None:
    """Makes `root` hold exactly `files`, never a mix: written beside it, then renamed in.
    A kill in between leaves a `.incoming`/`.replaced` sibling, which the next call removes."""
    parent = os.path.dirname(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    incoming, replaced = (os.path.join(parent, f".{os.path.basename(root)}.{part}")
                          for part in ("incoming", "replaced"))
    for stale in (incoming, replaced):
        shutil.rmtree(stale, ignore_errors=True)
    write_files(files, incoming)
    os.makedirs(incoming, exist_ok=True)
    if os.path.exists(root):
        os.rename(root, replaced)
    os.rename(incoming, root)
    shutil.rmtree(replaced, ignore_errors=True)


def unpack_once(files: Files, final: str) -> str:
    """`final` holding `files`, written by the first of the processes that ask (temp folder
    then rename): a node's cache entry, keyed by content in its name."""
    if os.path.isdir(final):
        return final
    parent = os.path.dirname(final)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".unpacking-", dir=parent)
    try:
        write_files(files, tmp)
        try:
            os.rename(tmp, final)
        except OSError:  # another process renamed its copy first: the same bytes
            if not os.path.isdir(final):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


# ----------------------------------------------------------------------------- the dataset
# Read once per study into the object store; a node fetches it only when its cache lacks
# the digest. `digits` travels as its name (each node builds it).


def node_cache_dir() -> str:
    """This node's cache of shipped datasets: $NAS_RAY_CACHE, else ~/.cache/nas/ray_data."""
    return os.environ.get("NAS_RAY_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "nas", "ray_data")


def dataset_files(train_config: dict[str, Any]) -> tuple[str, str, Files | None]:
    """(kind, name, files) of the dataset `train_config` trains on, from this disk."""
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
    """`train_config` reading its dataset from this node's cache, filled once."""
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


# ----------------------------------------------------------------------------- the cluster
# Why: `ray.init()` with no address joins whatever cluster Ray's session file names, a dead
# one included; and Ray keeps a task that no node can hold pending forever.


@contextlib.contextmanager
def fork_then_exec() -> Iterator[None]:
    """Silences JAX's `os.fork()` warning for Ray's process starts, which exec at once."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called",
                                category=RuntimeWarning)
        yield


def start_or_join(ray: Any, address: str | None, slots: int, request: dict[str, float]
                  ) -> None:
    """Initializes Ray here unless it already is: no `address`, a new local Ray with room
    for `slots` tasks of `request`; else that cluster, or one ValueError line."""
    if ray.is_initialized():
        return
    if not address:
        custom = {k: v * slots for k, v in request.items() if k not in ("CPU", "GPU")}
        with fork_then_exec():
            ray.init(address="local", num_cpus=max(1, math.ceil(request.get("CPU", 1) * slots)),
                     resources=custom or None, include_dashboard=False, log_to_driver=False)
        return
    check_reachable(address)
    try:
        with fork_then_exec():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, TimeoutError, RuntimeError, ValueError) as e:
        raise ValueError(f"config field 'search.ray_address': cannot join the Ray cluster at "
                         f"{address!r} ({one_line(e)[:300]})") from None


def check_reachable(address: str) -> None:
    """One ValueError line when nothing answers at `address` within REACH_TIMEOUT_S."""
    target: str | None = address.removeprefix("ray://")
    if not address.startswith("ray://"):
        try:
            from ray._private.services import canonicalize_bootstrap_address

            target = canonicalize_bootstrap_address(address)
        except ImportError:  # Ray moved it: ray.init checks on its own
            return
        except ConnectionError:  # "auto" found no cluster
            target = None
        except Exception as e:  # noqa: BLE001 - Ray's own reasons, e.g. a malformed address
            raise ValueError(f"config field 'search.ray_address': {address!r} is not a Ray "
                             f"address ({one_line(e)[:300]})") from None
        if target is None:
            raise ValueError(f"config field 'search.ray_address': {address!r} names no "
                             f"running Ray cluster (start one with `ray start --head`, or "
                             f"leave the field empty for a local Ray)")
    host, _, port = str(target).rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), REACH_TIMEOUT_S):
            pass
    except (OSError, ValueError) as e:
        raise ValueError(f"config field 'search.ray_address': cannot reach a Ray cluster at "
                         f"{target} ({one_line(e)[:300]})") from None


def check_fits(ray: Any, request: dict[str, float]) -> None:
    """One ValueError line when no live node has every resource one task asks for."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(all(node.get(k, 0.0) >= v for k, v in request.items()) for node in nodes):
        return
    have = "; ".join(", ".join(f"{k} {v:g}" for k, v in sorted(node.items())
                               if k in request) or "none of them" for node in nodes)
    asked = ", ".join(f"{k} {v:g}" for k, v in sorted(request.items()))
    raise ValueError(f"config field 'search.ray': each task asks for {asked}, more than any "
                     f"node of the Ray cluster has ({len(nodes)} node(s): {have or 'none'})")


# ----------------------------------------------------------------------------- one task


def keep_returned(rel: str, checkpoint_step: str | None) -> bool:
    """The run-folder files a task sends back: all but checkpoints, and the latest
    checkpoint only when a later rung will resume from it."""
    parts = rel.split("/")
    if parts[0] != "checkpoints":
        return True
    return checkpoint_step is not None and len(parts) > 1 and parts[1] == checkpoint_step


def latest_step(workdir: str) -> str | None:
    """The newest finished checkpoint folder's name in `workdir` (its step), or None."""
    folder = os.path.join(workdir, "checkpoints")
    steps = [n for n in os.listdir(folder) if n.isdigit()] if os.path.isdir(folder) else []
    return max(steps, key=int) if steps else None


def run_task(task: Task, runtime: dict[str, Any], dataset: dict[str, Any] | None,
             run_in: Files | None
             ) -> tuple[Any, Files | None, dict[str, float], Files | None]:
    """(result or `Failure`, the run folder's files, timings, the TensorBoard run's files
    or None) of one task, trained in a temporary folder of this node."""
    import ray

    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="nas-ray-task-") as tmp:
        workdir = os.path.join(tmp, RUN_FOLDER)
        os.makedirs(workdir)
        board = os.path.join(tmp, "tensorboard") if task.tensorboard else None
        start = time.perf_counter()
        try:
            if run_in is not None:
                write_files(run_in, workdir)
            train_config = node_train_config(task.train_config, dataset, ray.get)
        except (Exception, MemoryError) as e:  # noqa: BLE001 - sent back, named
            return Failure(*describe_failure(e)), None, timings, None
        timings["ray_data_s"] = time.perf_counter() - start
        start = time.perf_counter()
        result = train_or_failure(task.replace(train_config=train_config, workdir=workdir,
                                               tensorboard=board), **runtime)
        timings["ray_train_s"] = time.perf_counter() - start
        step = latest_step(workdir) if task.stop_epochs is not None else None
        out = read_files(workdir, keep=lambda rel: keep_returned(rel, step))
        curves = read_files(board) if board and os.path.isdir(board) else None
    return result, out, timings, curves
