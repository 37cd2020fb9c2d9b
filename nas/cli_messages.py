"""One-line messages shared by both command lines (`nas-train`, `nas-search`)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence


def unknown_field_line(e: BaseException, argv: Sequence[str] = ()) -> str:
    """`--config.x.y=v` for a field the config lacks, as one clean line (ml_collections'
    message arrives quoted and escaped, with a suggestion on a second line, and names only
    the last part of the field: the whole `x.y` is taken from `argv` when it is there)."""
    text = str(e.args[0]) if e.args else str(e)
    if "has no attribute 'get_config'" in text:  # the file loaded but defines no config
        given = [a.split("=", 1)[1].split(":", 1)[0] for a in argv if a.startswith("--config=")]
        return f"--config: {given[-1] if given else 'the config file'} defines no get_config()"
    for _ in range(3):
        text = text.replace("\\\\", "\\").replace("\\'", "'").replace("\\n", "\n")
    lines = [ln.strip().strip("'\"\\") for ln in text.splitlines() if ln.strip()]
    name = lines[0] if lines else "?"
    given = [a[len("--config."):].split("=", 1)[0] for a in argv if a.startswith("--config.")]
    path = next((g for g in given if g == name or g.endswith(f".{name}")), name)
    hint = re.search(r'Did you mean "([^"]+)"', text)
    section = path[:len(path) - len(name)]  # "search." for "search.max_candidatez"
    return f"--config: unknown config field {path!r}" + (
        f" (did you mean {section + hint.group(1)!r}?)" if hint else "")


def check_workdir(workdir: str, create: bool) -> None:
    """Refuse a workdir that is a file or cannot be written, before anything is created."""
    path = os.path.abspath(workdir)
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ValueError(f"--workdir: {workdir} exists and is not a directory")
        if create and not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"--workdir: {workdir} is not writable")
        return
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):  # nothing can ever be created there: a worker never waits
        raise ValueError(f"--workdir: {parent} is not a directory")
    if create and not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--workdir: cannot create {workdir} ({parent} is not writable)")


def os_error_line(e: OSError, workdir: str | None = None) -> str:
    """An OSError as one line; one on a path in (or at) `workdir` names --workdir and the
    workdir rather than an internal file there (e.g. a temp file written in /proc/1)."""
    reason = e.strerror or (str(e).splitlines() or [type(e).__name__])[0]
    if e.filename is None:
        return reason
    where = os.path.abspath(os.fsdecode(e.filename))
    if workdir:
        top = os.path.abspath(workdir)
        if where == top or where.startswith(top + os.sep):
            return f"--workdir: cannot use {workdir}: {reason}"
    return f"{os.fsdecode(e.filename)}: {reason}"


def first_line(e: BaseException) -> str:
    """An exception's first non-blank line (the one line a refusal shows)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0] if lines else type(e).__name__


def flag_error_line(e: BaseException) -> str:
    """absl's flag error as one line. A config file that raises while it is loaded comes
    as "flag --config=F: Error whilst parsing config file:" with the reason only at the
    end of a traceback: that case reads `--config: F: <reason>`."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    found = re.match(r"flag --config=([^:]*)(?::\S*)?: Error whilst parsing config file:$",
                     lines[0])
    if found and len(lines) > 1:
        return f"--config: {found.group(1)}: {lines[-1]}"
    return lines[0]
