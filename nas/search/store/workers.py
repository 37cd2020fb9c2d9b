"""Who holds a claim: worker names ([role@]host:pid), and whether the process a name
points to has exited, which voids its lease at once (`Study.claim`)."""

from __future__ import annotations

import os
import re
import socket


def default_worker(role: str = "") -> str:
    """A worker name that identifies this process: [role@]host:pid."""
    return f"{role + '@' if role else ''}{socket.gethostname()}:{os.getpid()}"


def dead_local_process(worker: str | None) -> bool:
    """Whether `worker` names a process on this host ([role@]host:pid) that has exited:
    its lease is void at once, without waiting for it to expire."""
    match = re.fullmatch(r"(?:[^@]*@)?(.+):([0-9]+)", worker or "")
    if match is None or match.group(1) != socket.gethostname():
        return False
    pid = int(match.group(2))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by someone else
        return False
    return is_zombie(pid)


def is_zombie(pid: int) -> bool:
    """Whether process `pid` has exited and waits for its parent to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False
