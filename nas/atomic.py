"""Atomic file writes: a reader or a crash never sees a half-written file."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` to `path` via a temp file in the same folder, fsync, then rename.

    `os.replace` within one filesystem is atomic, so `path` holds either the old
    content or the new one, never a prefix of it.
    """
    return atomic_write_with(path, lambda f: f.write(data))


def atomic_write_with(path: str | os.PathLike, write: Callable[[BinaryIO], object]) -> Path:
    """`atomic_write_bytes` for content streamed by `write(file)` (e.g. a zip archive)."""
    path = Path(path)
    try:
        _write_via_temp(path, write)
    except OSError as e:  # name the user's path, not the temp file next to it
        raise type(e)(e.errno, e.strerror, str(path)) from None
    _fsync_dir(path.parent)
    return path


def _write_via_temp(path: Path, write: Callable[[BinaryIO], object]) -> None:
    if path.is_dir():  # os.replace would name only the temp file
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would make reports private
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Text (UTF-8) variant of `atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def _umask() -> int:
    """The process umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    """Persist the rename itself (best effort: not every platform allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
