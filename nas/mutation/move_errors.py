"""A move that raises what no move should: its cause as one line, and where it was raised.

Why: a move written for the zoo's architectures may meet a graph it was not written for
(a user's imported model); a bug there must cost one proposal, not the search. The driver
records the line (`MoveFailed.line`) and proposes again.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Iterator

# The package's folder: a frame in a file under it is ours (the innermost one is named).
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class MoveFailed(Exception):  # noqa: N818 (named for what happened to the proposal)
    """A move (`kind`: "widen", "deepen", "shrink", "subgraph", ...) raised `error`
    ("TypeName: first line") at `where` (file:line of the innermost frame in `nas`)."""

    def __init__(self, kind: str, error: str, where: str = "") -> None:
        super().__init__(kind, error, where)
        self.kind, self.error, self.where = kind, error, where

    @property
    def line(self) -> str:
        """The cause in one line, e.g. "deepen: TypeError: ... (at nas/mutation/x.py:3)"."""
        return f"{self.kind}: {self.error}" + (f" (at {self.where})" if self.where else "")

    def __str__(self) -> str:
        return self.line


def first_line(e: BaseException) -> str:
    """"TypeName: the first non-empty line of its message"."""
    text = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def where_raised(e: BaseException) -> str:
    """file:line of the innermost frame of `e`'s traceback in the `nas` package, relative
    to the folder that holds it ("" when no frame is ours)."""
    here = ""
    for frame in traceback.extract_tb(e.__traceback__):
        path = os.path.abspath(frame.filename)
        if path.startswith(_PACKAGE + os.sep):
            here = f"{os.path.relpath(path, os.path.dirname(_PACKAGE))}:{frame.lineno}"
    return here


@contextlib.contextmanager
def raised_as(kind: str, *refusals: type[BaseException]) -> Iterator[None]:
    """Runs a move: the `refusals` it may raise (its one-line "does not apply here", e.g.
    `NotApplicable`) and a `MoveFailed` pass through; any other exception becomes a
    `MoveFailed` of `kind` naming it and where it was raised."""
    try:
        yield
    except MoveFailed:
        raise
    except refusals:
        raise
    except Exception as e:  # noqa: BLE001 - a move's bug is named, not hidden
        raise MoveFailed(kind, first_line(e)[:500], where_raised(e)) from e
