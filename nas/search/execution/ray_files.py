"""Folders as values: a folder's files read into one picklable object and written back.

Why: a Ray task may run on a node that shares no disk with the driver. What it needs from
the driver's disk (a dataset, a candidate's run folder to resume) and what it writes there
(the run folder: curves, a rung's checkpoint) travel as `Files` through Ray's object store;
only the driver writes its workdir.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass


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
    """Writes `files` under `root` (created), each with its recorded modification time
    (a folder dataset's content key reads the times)."""
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
    A kill in between leaves the old folder or a `.incoming`/`.replaced` sibling, which
    the next call removes."""
    parent = os.path.dirname(os.path.abspath(root))
    os.makedirs(parent, exist_ok=True)
    base = os.path.basename(root)
    for stale in (f".{base}.incoming", f".{base}.replaced"):
        shutil.rmtree(os.path.join(parent, stale), ignore_errors=True)
    incoming = os.path.join(parent, f".{base}.incoming")
    write_files(files, incoming)
    os.makedirs(incoming, exist_ok=True)
    replaced = os.path.join(parent, f".{base}.replaced")
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
