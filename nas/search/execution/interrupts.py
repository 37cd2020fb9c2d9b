"""`deferred_interrupt`: a Ctrl-C that lands inside a short critical step waits for its end.

Why: some steps must not be cut in half. Starting a spawned worker process writes its
start-up data down a pipe; a KeyboardInterrupt in the middle leaves a child that the pool
does not know of (so nobody kills it), which prints a traceback when the pipe closes, and
leaves the pool's semaphores leaked. The same holds between the pool taking a task and the
executor noting it. Deferring the signal to the end of the step keeps Ctrl-C's meaning and
its one-line exit, whatever the timing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Holds SIGINT back for the block's duration and delivers it right after, to the
    handler that was in place (e.g. the CLI's). Outside the main thread, or where Python
    does not own the SIGINT handler, it changes nothing (only the main thread may set one)."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        received.append(signum)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)  # the previous handler runs now
